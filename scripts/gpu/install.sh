#!/usr/bin/env bash
# Run THERE (the GPU machine), from the repo root: the same route as `make test` here — `pip wheel` over the CMake
# tree against the torch already installed (2.11 there), then `pip install` of the wheel — into a venv that sees the
# machine's own torch (--system-site-packages), so the installed command finds torch through the console script's
# fallback rather than its RPATH. Usage: source scripts/gpu/install.sh [build-dir]   (carry .deps and .whl)
# Leaves ENGINERY_VENV and ENGINERY_GPU_BUILD set.
set -eo pipefail
source scripts/gpu/setup.sh
ENGINERY_GPU_BUILD=${1:-build-gpu}
ENGINERY_VENV=/tmp/enginery-venv
python3 -m venv --system-site-packages "$ENGINERY_VENV"
# The machine's torch lives in a venv of its own (/opt/torch/.venv), whose packages --system-site-packages does not
# reach (it reaches the base interpreter's): a .pth file adds them, as a user's torch would be there.
python3 -c 'import site; print(site.getsitepackages()[0])' > \
  "$("$ENGINERY_VENV/bin/python3" -c 'import site; print(site.getsitepackages()[0])')/machine-torch.pth"
"$ENGINERY_VENV/bin/pip" install -q --no-index --find-links .whl scikit-build-core
rm -rf "$ENGINERY_GPU_BUILD/dist"
CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) "$ENGINERY_VENV/bin/pip" wheel --no-build-isolation --no-deps \
  -w "$ENGINERY_GPU_BUILD/dist" -Cbuild-dir="$ENGINERY_GPU_BUILD" -Ccmake.build-type=${ENGINERY_BUILD_TYPE:-Release} \
  -Ccmake.define.ENGINERY_BUILD_TESTS=ON .
"$ENGINERY_VENV/bin/pip" install -q --no-deps --force-reinstall "$ENGINERY_GPU_BUILD"/dist/enginery-*.whl
export ENGINERY_VENV ENGINERY_GPU_BUILD
