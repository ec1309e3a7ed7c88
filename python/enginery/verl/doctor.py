"""The checks behind `python -m enginery.verl doctor`, in the order a verl process goes through them: enginery
imports against this torch, its plugins load, each backend's engine builds (what only a build checks, such as
ENGINERY_CUDA_KERNELS), verl imports, the `verl.plugins` entry point is installed and allowed, importing it
registers the backends, and verl's EngineRegistry then holds them. Each prints one line, OK or FAIL with the
reason; the first failure stops the rest (each needs the one before)."""
import importlib
import importlib.metadata
import os
import traceback
import warnings

ENTRY_POINT = "enginery.verl.plugin"


class _Failed(Exception):
    pass


def _import_enginery():
    try:
        import enginery
    except Exception as e:
        raise _Failed(f"import enginery: {e}") from None
    import torch
    return f"enginery {enginery.__version__} at {os.path.dirname(enginery.__file__)}, torch {torch.__version__}"


def _plugins():
    import enginery
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        enginery.load_plugins()
    rejected = [str(w.message) for w in caught]
    backends = sorted({e["backend"] for e in enginery.plugins()})
    if not backends:
        raise _Failed("no enginery plugin loaded (" + ("; ".join(rejected) or f"none in "
                      f"{enginery.bundled_plugin_dir()} or ENGINERY_PLUGIN_PATH") + ")")
    return "backends " + ", ".join(backends) + (f"; skipped: {'; '.join(rejected)}" if rejected else "")


# The smallest model there is: the check builds engines, never their weights (initialize() is not called).
_PROBE_CONFIG = {"model": {"path": "builtin:qwen2-tiny"}}


def _engines():
    """Builds each backend's engine as the adapter does when verl makes one (enginery/verl/engine.py), on the device
    it would pick, so a setting that refuses every engine fails here rather than in verl's worker."""
    import enginery
    import torch

    from . import BACKENDS
    from .engine import backend_of
    device = "cuda" if torch.cuda.is_available() else "cpu"
    for backend in BACKENDS:
        try:
            enginery.new_engine("language_model", backend_of(backend), device, _PROBE_CONFIG)
        except Exception as e:
            raise _Failed(f"building the {backend} engine (language_model on {device}) failed: {e}") from None
    return f"built {', '.join(BACKENDS)} (language_model on {device}, no weights)"


def _import_verl():
    try:
        verl = importlib.import_module("verl")
    except Exception as e:
        raise _Failed(f"import verl: {type(e).__name__}: {e}") from None
    return f"verl {getattr(verl, '__version__', '?')} at {os.path.dirname(verl.__file__)}"


def _entry_point():
    found = [e for e in importlib.metadata.entry_points(group="verl.plugins") if e.value == ENTRY_POINT]
    if not found:
        raise _Failed(f"no `verl.plugins` entry point names {ENTRY_POINT}: enginery's distribution metadata is not "
                      f"on this Python's path (reinstall enginery with pip)")
    policy = os.getenv("VERL_USE_EXTERNAL_PLUGINS", "auto").strip().lower()
    allowed = policy == "auto" or found[0].name in {n.strip() for n in policy.split(",")}
    if not allowed:
        raise _Failed(f"VERL_USE_EXTERNAL_PLUGINS={policy!r} keeps verl from loading the entry point "
                      f"'{found[0].name}': unset it, or add {found[0].name}")
    return f"entry point {found[0].name} = {found[0].value}"


def _load_entry_point():
    try:
        importlib.import_module(ENTRY_POINT)
    except Exception as e:
        detail = traceback.format_exception_only(type(e), e)[-1].strip()
        raise _Failed(f"importing {ENTRY_POINT} failed, which verl logs at DEBUG only: {detail}") from None
    return "registered"


def _registry():
    from verl.workers.engine.base import EngineRegistry

    from . import BACKENDS
    missing = []
    for model_type in ("language_model", "value_model"):
        known = EngineRegistry._engines.get(model_type, {})
        missing += [f"{model_type}/{b}" for b in BACKENDS if b not in known]
    if missing:
        raise _Failed("verl's EngineRegistry lacks " + ", ".join(missing))
    return "EngineRegistry has " + ", ".join(BACKENDS) + " for language_model and value_model"


CHECKS = (("enginery", _import_enginery), ("plugins", _plugins), ("engine", _engines), ("verl", _import_verl),
          ("entry point", _entry_point), ("registration", _load_entry_point), ("registry", _registry))


def run_checks(out):
    """Prints one line per check; returns 0 when all pass, 1 at the first failure."""
    for name, check in CHECKS:
        try:
            detail = check()
        except _Failed as e:
            print(f"FAIL  {name}: {e}", file=out)
            return 1
        print(f"OK    {name}: {detail}", file=out)
    return 0
