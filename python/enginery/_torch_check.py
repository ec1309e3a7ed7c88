"""The torch enginery runs with must be the one it was compiled against: its C++ code calls libtorch's C++ ABI,
which changes between releases, so another torch would fail at load with an undefined symbol, or later and worse.
These checks run before the extension or the CLI binary is loaded, and say in one line what was found and what to
do. Nothing here imports torch unless asked to: the CLI only reads torch/version.py."""
import importlib.util
import os
import re
import sys

_REINSTALL = "pip install --force-reinstall --no-deps <enginery source or wheel built against it>"


def public_version(version):
    """2.11.0+cu130 -> 2.11.0, what `pip install torch==` takes."""
    return version.split("+", 1)[0]


def missing_torch_message(built):
    return (f"enginery was built against torch {built}, and this Python ({sys.executable}) has no torch: "
            f"pip install torch=={public_version(built)}")


def mismatch_message(built, found, where):
    return (f"enginery was built against torch {built}, but this Python imports torch {found} (from {where}): "
            f"pip install torch=={public_version(built)}, or rebuild enginery against torch {found} "
            f"({_REINSTALL})")


def import_torch(built):
    """Imports torch and returns it, or raises ImportError with one line when it is missing or not `built`."""
    try:
        import torch
    except ModuleNotFoundError as e:
        if e.name != "torch":
            raise
        raise ImportError(missing_torch_message(built)) from None
    if torch.__version__ != built:
        raise ImportError(mismatch_message(built, torch.__version__, os.path.dirname(torch.__file__)))
    return torch


def torch_location(built):
    """(torch's package folder, its __version__) without importing torch (seconds saved on every CLI call);
    raises SystemExit with one line when torch is missing or not `built`."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("enginery: " + missing_torch_message(built))
    folder = list(spec.submodule_search_locations)[0]
    try:
        with open(os.path.join(folder, "version.py"), encoding="utf-8") as f:
            match = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)['\"]", f.read(), re.MULTILINE)
    except OSError:
        match = None
    found = match.group(1) if match else "of unknown version"
    if found != built:
        raise SystemExit("enginery: " + mismatch_message(built, found, folder))
    return folder, found
