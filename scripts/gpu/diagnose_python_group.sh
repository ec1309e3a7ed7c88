#!/usr/bin/env bash
# Run THERE (the GPU machine), from the repo root: builds the Python module with debug info and runs
# diagnose_python_group.py over each kind of group under the segv_backtrace.c preload, resolving a crash's native
# stack with addr2line. Usage: scripts/gpu/diagnose_python_group.sh OUT [BUILD_DIR (default build-dbg)]
set -uo pipefail
out=${1:?usage: diagnose_python_group.sh OUT [BUILD_DIR]}; build=${2:-build-dbg}
mkdir -p "$out"
source scripts/gpu/setup.sh >/dev/null
set +e  # setup.sh sets -e; every case must run whatever the last one did
export NCCL_NVLS_ENABLE=0
ENGINERY_BUILD_TYPE=RelWithDebInfo scripts/gpu/build.sh "$build" enginery_python enginery_fsdp > "$out/build.log" 2>&1 \
  || { tail -30 "$out/build.log"; exit 1; }
python3 -c "import torch, torch._C as C; print(torch.__version__, [getattr(C, n, None) for n in ('_PYBIND11_COMPILER_TYPE', '_PYBIND11_STDLIB', '_PYBIND11_BUILD_ABI')])"
grep -h "define PYBIND11_VERSION_M" "$(python3 -c 'import torch,os;print(os.path.dirname(torch.__file__))')/include/pybind11/detail/common.h"
gcc -shared -fPIC -O1 -o /tmp/segv_backtrace.so scripts/gpu/segv_backtrace.c
export PYTHONPATH="$PWD/$build/python" PYTHONDONTWRITEBYTECODE=1
for case in "none cuda" "gloo cpu" "gloo cuda" "nccl cuda"; do
  set -- $case
  LD_PRELOAD=/tmp/segv_backtrace.so timeout 120 python3 scripts/gpu/diagnose_python_group.py "$1" "$2" \
    "$build/plugins" > "$out/case-$1-$2.log" 2>&1
  echo "== $1 $2: rc=$?"
  grep -v "^ *$" "$out/case-$1-$2.log" | grep -v "native stack" | sed -n '/\[/p' | tail -4
  # Resolve "lib.so(+0xOFF)" / "lib.so(sym+0xOFF)" frames: addr2line for the first, c++filt for the second.
  grep -E '^\S+\((\S*)\+0x[0-9a-f]+\)' "$out/case-$1-$2.log" | head -40 | while read -r frame; do
    lib=${frame%%(*}; inner=${frame#*(}; inner=${inner%%)*}; sym=${inner%+*}; off=${inner##*+}
    if [ -z "$sym" ] && [ -f "$lib" ]; then
      echo "  $(basename "$lib") $(addr2line -f -C -i -e "$lib" "$off" 2>/dev/null | paste -sd' ')"
    else
      echo "  $(basename "$lib") $(echo "$sym" | c++filt) +$off"
    fi
  done
done
