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
gcc -shared -fPIC -O1 -o /tmp/segv_backtrace.so scripts/gpu/segv_backtrace.c -ldl
export PYTHONPATH="$PWD/$build/python" PYTHONDONTWRITEBYTECODE=1
run_case() {  # NAME GROUP DEVICE [CONFIG-JSON]
  local name=$1 group=$2 device=$3
  DIAG_CONFIG=${4:-} LD_PRELOAD=/tmp/segv_backtrace.so timeout 120 python3 scripts/gpu/diagnose_python_group.py \
    "$group" "$device" "$build/plugins" > "$out/case-$name.log" 2>&1
  echo "== $name: rc=$?"
  grep '^\[' "$out/case-$name.log" | tail -2
  # "lib.so(+0xOFF)" frames and "pc/scan lib+0xOFF" words: addr2line; "lib.so(sym+0xOFF)": c++filt.
  grep -E '^\S+\(\S*\+0x[0-9a-f]+\)|^(pc|scan) ' "$out/case-$name.log" | grep -v 'libc.so\|libpython\|segv_backtrace' \
    | head -50 | while read -r frame; do
    case $frame in
      pc\ *|scan\ *) lib=${frame#* }; off=0x${lib##*+0x}; lib=${lib%+0x*}; sym="" ;;
      *) lib=${frame%%(*}; inner=${frame#*(}; inner=${inner%%)*}; sym=${inner%+*}; off=${inner##*+} ;;
    esac
    if [ -z "$sym" ] && [ -f "$lib" ]; then
      echo "  ${frame%% *} $(basename "$lib") $(addr2line -f -C -i -e "$lib" "$off" 2>/dev/null | paste -sd' ' | cut -c1-220)"
    else
      echo "  $(basename "$lib") $(echo "$sym" | c++filt) +$off"
    fi
  done
}

model='"model": {"path": "builtin:qwen2-tiny", "use_remove_padding": true}'
engine='"engine": {"micro_batch_size_per_gpu": 2, "mixed_precision": {"param_dtype": "bf16"}}'
rest='"optim": {"lr": 1e-6}, "checkpoint": {}'
run_case nccl-plain nccl cuda
run_case nccl-verl nccl cuda "{$model, $engine, $rest}"
run_case none-verl none cuda "{$model, $engine, $rest}"
run_case nccl-no-rmpad nccl cuda "{\"model\": {\"path\": \"builtin:qwen2-tiny\"}, $engine, $rest}"
run_case nccl-no-bf16 nccl cuda "{$model, \"engine\": {\"micro_batch_size_per_gpu\": 2}, $rest}"
run_case nccl-no-optim nccl cuda "{$model, $engine}"
run_case gloo-cpu-verl gloo cpu "{$model, $engine, $rest}"
