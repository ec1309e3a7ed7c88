"""bench/fidelity/run_fidelity.py: what it reads from a run, its statistical verdict, and one tiny sweep through the
real `enginery train` (two dtypes, one seed, a few steps) that leaves results.jsonl, table.md and curves.png."""
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HARNESS = REPO / "bench/fidelity/run_fidelity.py"
spec = importlib.util.spec_from_file_location("run_fidelity", HARNESS)
fidelity = importlib.util.module_from_spec(spec)
spec.loader.exec_module(fidelity)


def write_metrics(path, lines):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


def test_reads_final_accuracy_val_loss_first_step_at_target_and_reward(tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    write_metrics(metrics, [
        {"step": 1, "loss": 3.0, "critic/score/mean": 0.1},
        {"step": 100, "val_loss": 1.2, "accuracy": 0.5},
        {"step": 200, "val_loss": 0.4, "accuracy": 0.92},
        {"step": 250, "loss": 0.3, "critic/score/mean": 0.8},
        {"step": 300, "val_loss": 0.5, "accuracy": 0.88},
    ])
    got = fidelity.read_metrics(metrics, 0.9)
    assert got == {"first_accuracy": 0.5, "accuracy": 0.88, "val_loss": 0.5, "steps_to_target": 200, "reward": 0.8,
                   "reward_rise": pytest.approx(0.7), "steps": 300}
    assert fidelity.read_metrics(tmp_path / "missing.jsonl", 0.9)["accuracy"] is None


def result(dtype, seed, accuracy, val_loss):
    return {"variant": "on", "dtype": dtype, "seed": seed, "rc": 0, "accuracy": accuracy, "val_loss": val_loss,
            "steps_to_target": 100 if accuracy >= 0.9 else None, "reward": None}


def test_a_dtype_passes_only_when_its_medians_lie_within_the_reference_seed_range():
    results = [result("fp32", s, a, l) for s, a, l in [(1, 0.90, 0.30), (2, 1.00, 0.10), (3, 0.95, 0.20)]]
    results += [result("bf16", s, a, l) for s, a, l in [(1, 0.97, 0.15), (2, 0.93, 0.25), (3, 0.99, 0.12)]]
    results += [result("fp16", s, a, l) for s, a, l in [(1, 0.10, 1.10), (2, 0.96, 0.20), (3, 0.15, 1.00)]]
    table, groups = fidelity.summarise(results, ["fp32", "bf16", "fp16"], ["on"], [1, 2, 3], 0.9)
    assert groups[("on", "fp32")]["accuracy"] == {"median": 0.95, "min": 0.90, "max": 1.00, "n": 3}
    rows = {line.split("|")[2].strip(): line for line in table.splitlines() if line.startswith("| on |")}
    assert rows["fp32"].rstrip(" |").endswith("reference")
    assert rows["bf16"].rstrip(" |").endswith("PASS")
    assert rows["fp16"].rstrip(" |").endswith("FAIL")  # one good seed does not make a median
    assert "(1/3)" in rows["fp16"]  # steps to 90%: reached by one run of three


def test_the_curve_gap_compares_same_seed_runs_and_the_reference_across_seeds(tmp_path):
    def run(variant, seed, losses):
        write_metrics(tmp_path / f"{variant}-{seed}" / "metrics.jsonl",
                      [{"step": 0, "accuracy": 0.0}] + [{"step": t, "loss": v} for t, v in enumerate(losses, 1)])
        return dict(result("fp32", seed, 0.95, 0.2), variant=variant, dir=str(tmp_path / f"{variant}-{seed}"))
    results = [run("off", 1, [3.0, 2.0, 1.0]), run("off", 2, [3.0, 2.5, 2.0]), run("off", 3, [3.0, 1.0, 0.5]),
               run("swiglu", 1, [3.0, 2.0, 1.3]), run("swiglu", 2, [3.0, 2.5, 2.0]), run("swiglu", 3, [3.0, 1.3, 0.5])]
    _, groups = fidelity.summarise(results, ["fp32"], ["off", "swiglu"], [1, 2, 3], 0.9)
    # the kernel's runs against the same seed without it: 0.1, 0 and 0.1
    assert groups[("swiglu", "fp32")]["curve_gap"] == pytest.approx({"median": 0.1, "min": 0.0, "max": 0.1, "n": 3})
    # the reference between its seeds: 1-2 (0.5), 1-3 (0.5), 2-3 (1.0)
    assert groups[("off", "fp32")]["curve_gap"] == pytest.approx({"median": 0.5, "min": 0.5, "max": 1.0, "n": 3})
    # the first step more than 1% apart: seed 1 at step 3, seed 3 at step 2, seed 2 never
    assert groups[("swiglu", "fp32")]["parts_at"] == {"median": 2.5, "min": 2, "max": 3, "n": 2}


def test_the_gain_bars_fail_a_run_that_did_not_rise_above_its_start(tmp_path):
    def grpo_run(seed, first, last, rewards):
        run_dir = tmp_path / "runs" / f"on-fp32-s{seed}"
        write_metrics(run_dir / "metrics.jsonl",
                      [{"step": 0, "accuracy": first, "val_loss": 0.3}]
                      + [{"step": t, "critic/score/mean": v} for t, v in enumerate(rewards, 1)]
                      + [{"step": len(rewards), "accuracy": last, "val_loss": 0.3}])
        return dict(result("fp32", seed, last, 0.3), first_accuracy=first, dir=str(run_dir), log=f"s{seed}.log")
    rows = [grpo_run(1, 0.30, 0.80, [0.5] * 10 + [0.7] * 10),  # +50 points, reward +0.2
            grpo_run(2, 0.31, 0.35, [0.6] * 20)]                 # +4 points, reward flat
    results = tmp_path / "results.jsonl"
    results.write_text("".join(json.dumps(r) + "\n" for r in rows))
    common = ["--from-results", str(results), "--out", str(tmp_path / "summary"), "--enginery", "true"]
    assert fidelity.main(common + ["--require-gain", "0.05"]) == 1
    assert fidelity.main(common + ["--require-reward-rise", "0.1"]) == 1
    assert fidelity.main(common + ["--require-gain", "0.03", "--require-reward-rise", "0.0"]) == 0
    table = (tmp_path / "summary" / "table.md").read_text()
    assert "| 27.0% [4.0%, 50.0%] |" in table  # the held-out gain column
    assert "| 0.1 [0, 0.2] |" in table  # the reward's rise


def test_a_tiny_sweep_through_enginery_train(tmp_path):
    exe = os.environ["ENGINERY_EXE"]
    out = tmp_path / "sweep"
    cmd = [sys.executable, str(HARNESS), "--enginery", exe, "--nproc", "1", "--dtypes", "fp32,bf16", "--seeds", "1",
           "--out", str(out), "--set", "trainer.total_training_steps=4", "--set", "trainer.test_freq=2",
           "--set", "trainer.save_freq=-1", "--set", "data.val_size=8", "--set", "trainer.val_before_train=false",
           "--require-accuracy", "0.0"]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stdout + run.stderr
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert sorted(r["dtype"] for r in rows) == ["bf16", "fp32"]
    for r in rows:
        assert r["rc"] == 0 and r["steps"] == 4 and r["val_loss"] is not None
        config = (Path(r["dir"]) / "config.toml").read_text()
        assert f"param_dtype = '{r['dtype']}'" in config
    assert "| on | bf16 | 1 (0) |" in (out / "table.md").read_text()
    assert (out / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_demo_rl_warmup_is_the_first_saved_checkpoint_past_the_threshold(tmp_path):
    spec = importlib.util.spec_from_file_location("pick_warmup", REPO / "scripts/pick_warmup.py")
    pick_warmup = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(pick_warmup)
    run = tmp_path / "sft"
    write_metrics(run / "metrics.jsonl", [
        {"step": 25, "val_loss": 1.2, "accuracy": 0.01}, {"step": 50, "val_loss": 1.0, "accuracy": 0.3},
        {"step": 75, "val_loss": 0.5, "accuracy": 0.6}, {"step": 100, "val_loss": 0.1, "accuracy": 0.99}])
    for step in (25, 75, 100):  # step 50 was not saved
        (run / f"global_step_{step}" / "actor" / "huggingface").mkdir(parents=True)
    export, accuracy = pick_warmup.pick(run, 0.25)
    assert (export, accuracy) == (run / "global_step_75" / "actor" / "huggingface", 0.6)
    try:
        pick_warmup.pick(run, 0.999)
        raise AssertionError("a threshold no checkpoint reached was accepted")
    except SystemExit as e:
        assert "no checkpoint" in str(e) and "99.0% at step 100" in str(e), str(e)
