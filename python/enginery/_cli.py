"""The `enginery` console script: checks the torch of this environment from its version file (_torch_check), then
replaces itself with the C++ command installed in the package (bin/enginery). Neither torch nor the extension is
imported on the way: the package's __init__ leaves them out for pip's wrapper of this script. torch's libraries are found through the binary's RPATH
when torch sits beside this package; LD_LIBRARY_PATH adds them for a torch installed elsewhere on sys.path (a
user site, a --system-site-packages venv)."""
import os
import sys

from . import _build_info
from ._torch_check import torch_location

_BINARY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "enginery")


def main():
    torch_dir, _ = torch_location(_build_info.TORCH_VERSION)
    if not os.access(_BINARY, os.X_OK):
        raise SystemExit(f"enginery: the command {_BINARY} is missing from this installation; reinstall enginery")
    env = dict(os.environ)
    lib = os.path.join(torch_dir, "lib")
    env["LD_LIBRARY_PATH"] = lib + (os.pathsep + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    os.execve(_BINARY, [_BINARY] + sys.argv[1:], env)


if __name__ == "__main__":
    main()
