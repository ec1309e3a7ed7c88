# Sourced by the GPU scripts that run a sequence of logged steps (verify.sh, check_install.sh): with $out set,
# `step NAME SECONDS COMMAND...` runs COMMAND under a time limit into $out/NAME.log and appends one line (rc, seconds)
# to $out/summary.txt, which it starts empty.
summary="$out/summary.txt"
: > "$summary"
step() {  # step NAME SECONDS COMMAND...
  local name=$1 limit=$2; shift 2
  local start=$SECONDS
  timeout "$limit" "$@" > "$out/$name.log" 2>&1
  local rc=$?
  printf '%-28s rc=%-3s %4ss\n' "$name" "$rc" "$((SECONDS - start))" | tee -a "$summary"
}
