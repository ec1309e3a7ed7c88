"""python -m enginery.verl doctor: whether verl will find enginery's engines, and why not (enginery/verl/doctor.py)."""
import argparse
import sys

from .doctor import run_checks

parser = argparse.ArgumentParser(prog="python -m enginery.verl")
parser.add_argument("command", choices=["doctor"], help="doctor: check that verl finds enginery's engines")
parser.parse_args()
sys.exit(run_checks(sys.stdout))
