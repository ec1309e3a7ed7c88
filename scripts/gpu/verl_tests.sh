#!/usr/bin/env bash
# The ctest label gpu with real verl on the GPU machine: builds and installs enginery and verl 0.9.1 (verl_setup.sh:
# verl from carried wheels, ../shared/gpu-verl, the machine has no package registry), then runs `ctest -L gpu` in the
# build folder. ctest runs the interpreter the build was
# configured with (ENGINERY_PYTHON_EXECUTABLE: scikit-build-core hands CMake the venv's python), so the verl tests
# see verl; this script checks that before running them.
#
# HERE, once (network; all three folders are git-ignored, together about 50 MB of the device call's 64 MiB):
#   scripts/gpu/verl_tests.sh --fetch      # = scripts/gpu/fetch_deps.sh (.deps, .whl) + ../shared/gpu-verl/fetch.sh
#                                          #   into .vwh, with install_there.sh and import_stubs.py copied beside
#                                          #   the wheels (../shared does not travel to the machine; .vwh does)
# THERE, through the device tool, from the repo root:
#   run(command="PYTHONUNBUFFERED=1 scripts/gpu/verl_tests.sh $OUT", carry=[".deps", ".whl", ".vwh"], timeout_s=600)
#   Extra arguments go to ctest, e.g. `scripts/gpu/verl_tests.sh $OUT -R verl_` for the verl entries alone. On a
#   machine still warm from an earlier call the build is incremental.
# OUT gets install.log (build + pip install), verl_install.log (the wheels, the import check, any import stub),
# ctest.log and summary.txt. Nothing starts after DEADLINE seconds (default 570, inside the call's 600);
# ctest is cut off at the deadline.
set -uo pipefail
cd "$(dirname "$0")/../.."

if [ "${1:-}" = "--fetch" ]; then
  set -e
  shared=${GPU_VERL_DIR:-../shared/gpu-verl}
  scripts/gpu/fetch_deps.sh
  "$shared/fetch.sh" .vwh requirements.txt
  cp "$shared/install_there.sh" "$shared/import_stubs.py" .vwh/
  du -sh .deps .whl .vwh
  du -cb .deps .whl .vwh | tail -1 | awk '{printf "carried: %.1f MiB of 64\n", $1 / 1048576}'
  exit 0
fi

out=$(realpath -m "${1:?usage: verl_tests.sh OUT [ctest arguments...] | verl_tests.sh --fetch}")
shift
source scripts/gpu/verl_setup.sh

# The interpreter of the ctest entries must be the venv's (the one that has verl).
configured=$(grep -E '^ENGINERY_PYTHON_EXECUTABLE:' "$ENGINERY_GPU_BUILD/CMakeCache.txt" | cut -d= -f2-)
note "ctest's python (ENGINERY_PYTHON_EXECUTABLE): $configured"
case "$configured" in
  "$ENGINERY_VENV"/*) ;;
  *) note "not the venv's python: reconfiguring with -DENGINERY_PYTHON_EXECUTABLE=$ENGINERY_VENV/bin/python3"
     cmake -DENGINERY_PYTHON_EXECUTABLE="$ENGINERY_VENV/bin/python3" "$ENGINERY_GPU_BUILD" \
       > "$out/reconfigure.log" 2>&1 || { note "reconfigure failed (reconfigure.log)"; exit 1; } ;;
esac

[ "$(left)" -gt 30 ] || { note "deadline: no time left for ctest"; exit 1; }
(cd "$ENGINERY_GPU_BUILD" && timeout -k 10 "$(left)" ctest -L gpu --output-on-failure "$@") > "$out/ctest.log" 2>&1
rc=$?
note "ctest -L gpu $*: rc=$rc $((SECONDS - start))s$([ $rc -eq 124 ] && echo ' (cut off at the deadline)')"
grep -E "^ *[0-9]+/[0-9]+ Test +#|tests passed|tests failed|^ *[0-9]+ - " "$out/ctest.log" | tee -a "$summary"
# pytest's and gtest's lines naming what failed, from the whole log (ctest.log has the rest).
grep -E "^(FAILED|ERROR) |^E +[A-Za-z]*(Error|Exception)|^\[  FAILED  \]" "$out/ctest.log" | head -40
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>&1 | sed 's/^/gpu: /' | tee -a "$summary"
exit $rc
