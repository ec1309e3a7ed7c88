# Sourced by verl_tests.sh and verl_bench.sh THERE (the GPU machine): builds and installs enginery as a user does
# (scripts/gpu/install.sh: pip wheel + pip install into the venv /tmp/enginery-venv, which sees the machine's torch),
# then verl 0.9.1 and what it imports into that same venv from the carried wheels (.vwh, see verl_tests.sh --fetch).
# Expects out (the output folder) and DEADLINE (seconds from now, default 570); defines note() (a line to
# out/summary.txt) and left() (seconds to the deadline); leaves ENGINERY_VENV and ENGINERY_GPU_BUILD exported and the
# environment of setup.sh (NVLink multicast off) set.
mkdir -p "$out"
deadline=${DEADLINE:-570}
start=$SECONDS
summary="$out/summary.txt"
: > "$summary"
note() { echo "$*" | tee -a "$summary"; }
left() { echo $((deadline - (SECONDS - start))); }

for f in .vwh/install_there.sh .vwh/import_stubs.py; do
  [ -f "$f" ] || { note "missing $f: run scripts/gpu/verl_tests.sh --fetch here and carry .vwh"; exit 2; }
done
ls .vwh/verl-*.whl >/dev/null 2>&1 || { note "no verl wheel in .vwh: carry .vwh"; exit 2; }

# install.sh sets -e and pipefail and leaves ENGINERY_VENV and ENGINERY_GPU_BUILD set; a failure in it must not end
# this script before the summary, so it runs in a subshell that reports what it set.
vars=$(mktemp)
(source scripts/gpu/install.sh build-gpu && echo "ENGINERY_VENV=$ENGINERY_VENV ENGINERY_GPU_BUILD=$ENGINERY_GPU_BUILD" \
  > "$vars") > "$out/install.log" 2>&1
rc=$?
note "install (build + pip install): rc=$rc $((SECONDS - start))s"
[ $rc -eq 0 ] || { grep -E "error|Error" "$out/install.log" | head -20; tail -20 "$out/install.log"; exit 1; }
eval "$(cat "$vars")"
export ENGINERY_VENV ENGINERY_GPU_BUILD
# setup.sh's environment (NVLink multicast off, the unpacked OpenSSL's library path) for the tests as well.
source scripts/gpu/setup.sh > /dev/null 2>&1
set +e

# install_there.sh is made to be sourced (it leaves -e off); its import stubs are named on stderr.
(source .vwh/install_there.sh "$ENGINERY_VENV" .vwh) > "$out/verl_install.log" 2>&1
imported=$(grep -E '^verl ' "$out/verl_install.log" || echo 'verl does not import')
note "verl wheels into $ENGINERY_VENV: $((SECONDS - start))s: $imported"
grep -E "import stub|does not import" "$out/verl_install.log" | tee -a "$summary"
"$ENGINERY_VENV/bin/python" -c "
import enginery, pytest, torch, transformers, verl
from verl.workers.engine_workers import TrainingWorker
print('python', __import__('sys').executable, 'torch', torch.__version__, 'cuda', torch.cuda.is_available(),
      'transformers', transformers.__version__, 'verl', verl.__version__, 'pytest', pytest.__version__)
" 2>&1 | tail -3 | tee -a "$summary"
