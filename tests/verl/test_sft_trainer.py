"""verl's own SFT trainer (verl.trainer.sft_trainer.SFTTrainer) with enginery chosen by config, as a user chooses it:
verl's `sft_trainer_engine` hydra config with `hydra.searchpath=[pkg://enginery.verl.conf] engine=enginery
engine.strategy=enginery_fsdp2`, fp32, 20 steps on the CPU in one process. The run's data is written here: a tiny
Qwen2 (transformers from_config + save_pretrained), a byte-level BPE tokenizer built offline with transformers'
Qwen2Tokenizer and a chat template (same folder), and a parquet of `messages` (verl's MultiTurnSFTDataset) whose
replies follow a fixed rule. The losses are the ones verl's trainer logs, through verl's own `file` logger
(VERL_FILE_LOGGER_PATH): they must fall, and equal those of verl's own FSDP2 engine on the same run.

verl's run_sft cannot run on the CPU (its process group asks for "cpu:gloo,<device>:<nccl>"), so each run is a
child process (this file as a script): verl's CPU platform (verl_cpu.py), a one-rank Gloo process group, then
SFTTrainer(config).fit(); the platform and the process group stay in the child."""
import json
import math
import os
import socket
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
STEPS = 20
FP32 = "{param_dtype: fp32, reduce_dtype: fp32, buffer_dtype: fp32}"
WORDS = ("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa").split()
# What selects enginery, as in README's "Use it from verl".
ENGINERY = ["hydra.searchpath=[pkg://enginery.verl.conf]", "engine=enginery", "engine.strategy=enginery_fsdp2",
            f"engine.mixed_precision={FP32}"]
# verl's own FSDP2 engine on the same run (verl_cpu.register_verl_fsdp_on_cpu); its engine yaml has no
# mixed_precision key, and its model needs sdpa on the CPU (verl's default, flash_attention_2, is not installed).
VERL_FSDP2 = ["engine=fsdp", "engine.strategy=fsdp2", f"+engine.mixed_precision={FP32}",
              "+model.override_config.attn_implementation=sdpa"]


def write_tokenizer(path):
    """A Qwen2Tokenizer (byte-level BPE, Qwen's pre-tokenizer) whose vocabulary is WORDS (with and without the
    leading space, "Ġ"), the role names, "\\n" ("Ċ") and the merges that build them, plus ChatML special tokens and a
    ChatML chat template: each message tokenizes alone as it does inside the conversation, as MultiTurnSFTDataset
    checks."""
    from transformers import Qwen2Tokenizer
    space, newline = "\u0120", "\u010a"
    vocab, merges = {}, []
    for piece in [space + w for w in WORDS] + WORDS + ["system", "user", "assistant"]:
        chars = [space] + list(piece[1:]) if piece.startswith(space) else list(piece)
        for ch in chars:
            vocab.setdefault(ch, len(vocab))
        merged = chars[0]
        for ch in chars[1:]:
            if (merged, ch) not in merges:
                merges.append((merged, ch))
            merged += ch
            vocab.setdefault(merged, len(vocab))
    vocab.setdefault(newline, len(vocab))
    tokenizer = Qwen2Tokenizer(vocab=vocab, merges=merges, unk_token=None, eos_token="<|im_end|>",
                               pad_token="<|endoftext|>", additional_special_tokens=["<|im_start|>", "<|im_end|>"])
    tokenizer.chat_template = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
                               "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    tokenizer.save_pretrained(path)
    return tokenizer


def write_model(path, tokenizer):
    """A Qwen2 of two layers over the tokenizer's vocabulary, random weights (seed 0), in Hugging Face format."""
    import torch
    import transformers
    config = transformers.Qwen2Config(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64,
                                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                      max_position_embeddings=64, tie_word_embeddings=False,
                                      pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
                                      bos_token_id=None)
    torch.manual_seed(0)
    transformers.AutoModelForCausalLM.from_config(config).save_pretrained(path)


def write_data(path, rows=64):
    """Conversations: the user names a word, the assistant answers with the next four words of WORDS (cyclic)."""
    import random

    import pandas as pd
    rng = random.Random(0)
    conversations = []
    for _ in range(rows):
        k = rng.randrange(len(WORDS))
        reply = " ".join(WORDS[(k + j) % len(WORDS)] for j in range(1, 5))
        conversations.append({"messages": [{"role": "user", "content": WORDS[k]},
                                           {"role": "assistant", "content": reply}]})
    pd.DataFrame(conversations).to_parquet(path)


@pytest.fixture(scope="module")
def sft_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("sft")
    model = path / "model"
    write_model(model, write_tokenizer(model))
    write_data(path / "train.parquet")
    return path


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_trainer(sft_dir, name, engine_overrides):
    """verl's SFT trainer in a child process; returns what verl's file logger wrote, one dict per step."""
    run_dir = sft_dir / name
    run_dir.mkdir()
    metrics = run_dir / "metrics.jsonl"
    overrides = engine_overrides + [
        f"model.path={sft_dir / 'model'}", f"data.train_files={sft_dir / 'train.parquet'}",
        "data.train_batch_size=8",  # 64 rows: 8 steps an epoch, so 20 steps span three epochs
        "data.num_workers=0",  # no loader processes on a 2-core machine
        f"trainer.total_training_steps={STEPS}", "trainer.logger=[console,file]", "trainer.device=cpu",
        f"trainer.default_local_dir={run_dir / 'checkpoints'}"]
    env = dict(os.environ, HF_HUB_OFFLINE="1", VERL_ENGINE_DEVICE="cpu", VERL_FILE_LOGGER_PATH=str(metrics),
               MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), RANK="0", LOCAL_RANK="0", WORLD_SIZE="1")
    run = subprocess.run([sys.executable, "-W", "ignore::UserWarning", os.path.abspath(__file__),
                          json.dumps(overrides)], cwd=run_dir, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-5000:]
    logged = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert [entry["step"] for entry in logged] == list(range(1, STEPS + 1)), logged
    return [entry["data"] for entry in logged], run_dir


@pytest.fixture(scope="module")
def enginery_run(sft_dir):
    return run_trainer(sft_dir, "enginery", ENGINERY)


def test_verl_sft_trainer_with_enginery_loss_falls(enginery_run):
    steps, run_dir = enginery_run
    losses = [step["train/loss"] for step in steps]
    print("enginery_fsdp2 losses:", [round(x, 4) for x in losses])
    assert all(math.isfinite(x) for x in losses), losses
    assert all(math.isfinite(step["train/grad_norm"]) for step in steps)
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    assert last < first - 0.3, (first, last, losses)
    # The trainer's last step saves through verl's CheckpointHandler into the engine's save_checkpoint.
    assert (run_dir / "checkpoints" / f"global_step_{STEPS}").is_dir()


def test_verl_sft_trainer_with_enginery_equals_verl_fsdp2(sft_dir, enginery_run):
    """The same run with verl's own FSDP2 engine: the same loss and grad norm at every step (fp32)."""
    steps, _ = enginery_run
    reference, _ = run_trainer(sft_dir, "verl_fsdp2", VERL_FSDP2)
    for step, (got, want) in enumerate(zip(steps, reference), 1):
        assert got["train/loss"] == pytest.approx(want["train/loss"], rel=1e-5), step
        assert got["train/grad_norm"] == pytest.approx(want["train/grad_norm"], rel=1e-4), step
        assert got["train/lr"] == pytest.approx(want["train/lr"]), step


def train(overrides):
    """The child: verl's config composed as `python -m verl.trainer.sft_trainer <overrides>` composes it, then
    SFTTrainer(config).fit() in a one-rank Gloo process group (MASTER_ADDR/PORT from the parent)."""
    import torch.distributed as dist
    import verl_cpu
    verl_cpu.use_cpu_platform()  # before verl's engine and trainer modules are imported
    if "engine.strategy=fsdp2" in overrides:
        verl_cpu.register_verl_fsdp_on_cpu()
    import verl
    from hydra import compose, initialize_config_dir
    with initialize_config_dir(config_dir=os.path.join(os.path.dirname(verl.__file__), "trainer", "config"),
                               version_base=None):
        config = compose(config_name="sft_trainer_engine", overrides=overrides)
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        from verl.trainer.sft_trainer import SFTTrainer
        SFTTrainer(config).fit()
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    sys.path.insert(0, HERE)
    train(json.loads(sys.argv[1]))
