"""The GPU a table's rows ran on, named in its header: tables are made on the GPU machine right after the run, and
a table must never name another card than the one that gave its numbers (H100 and H200 are both lent)."""
import subprocess


def gpu_machine():
    """"<count>x <name>" from nvidia-smi, or a phrase saying the card is unknown."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        out = ""
    names = [line.strip() for line in out.splitlines() if line.strip()]
    if not names:
        return "unknown GPU (no nvidia-smi where the table was made)"
    kinds = sorted(set(names))
    return f"{len(names)}x {kinds[0]}" if len(kinds) == 1 else ", ".join(names)
