"""Bad batches through verl's EngineRegistry in verl's own layouts (verl_batches.py: its SFT collator's nested
TensorDict, its PPO batch after left_right_2_no_padding) with verl's own losses, on enginery_fsdp2 and, as the
control, verl's fsdp2 engine: every batch verl's engine refuses, enginery refuses too, before any work, naming the
entry and the row; and it refuses the batches verl's engine trains silently wrong (a 0.5 in a mask, no target at
all). CPU: a one-process Gloo group with verl's CPU platform (verl_cpu.py)."""
from functools import partial

import pytest
import torch
import verl_batches
from conftest import DEVICE, model_config, new_engine, one_rank_group, optimizer_config

process_group = pytest.fixture(scope="module", autouse=True)(one_rank_group)

PROMPTS = [[5, 9, 3], [7, 2], [11, 4, 6, 8]]
RESPONSES = [[12, 30, 7, 2], [40, 3], [9, 9, 21]]  # rows of 7, 4 and 7 tokens; the tiny model's vocabulary is 128
FP32 = {"param_dtype": "fp32", "reduce_dtype": "fp32", "buffer_dtype": "fp32"}


def build(backend, path):
    from verl.workers.config import FSDPEngineConfig

    from enginery.verl.engine_config import EngineryEngineConfig
    config = FSDPEngineConfig if backend == "fsdp2" else EngineryEngineConfig
    engine = new_engine(path, backend=backend, model=model_config(path, use_remove_padding=True),
                        engine=config(strategy=backend, fsdp_size=1, forward_only=False, mixed_precision=FP32),
                        optim=optimizer_config(lr=1e-4, total_training_steps=10))
    engine.initialize()
    return engine


def nested(rows):
    return torch.nested.as_nested_tensor(rows, layout=torch.jagged)


def sft(change=None):
    data = verl_batches.sft_batch(PROMPTS, RESPONSES, micro_batch=1)
    if change is not None:
        for key, value in change(data).items():
            data[key] = value
    return data


def rows_with(key, row, replace):
    """The entry `key` with its row `row` replaced by replace(that row)."""
    def change(data):
        rows = list(data[key].unbind())
        rows[row] = replace(rows[row])
        return {key: nested(rows)}
    return change


def train(engine, data):
    from verl.workers.utils.losses import sft_loss
    with engine.train_mode():
        return engine.train_batch(data.to(DEVICE), partial(sft_loss, config=None))


# Which batches verl's engine itself refuses (True) and which it trains (False), and enginery's message for each.
CASES = {
    "position_ids row shorter than input_ids'": (
        rows_with("position_ids", 1, lambda p: p[:3]), True,
        "batch['position_ids'] row 1 has 3 entries, input_ids 4 (allowed: one entry per token of input_ids)"),
    "position_ids row longer than input_ids'": (
        rows_with("position_ids", 2, lambda p: torch.arange(9)), True, "batch['position_ids'] row 2 has 9 entries"),
    "float input_ids": (
        lambda d: {"input_ids": nested([t.float() + 0.7 for t in d["input_ids"].unbind()])}, True,
        "batch['input_ids'] row 0 has dtype torch.float32 (allowed: torch.int64, torch.int32)"),
    "token id past the vocabulary": (
        rows_with("input_ids", 2, lambda t: t.index_fill(0, torch.tensor([5]), 128)), True,
        "batch['input_ids'] row 2: token 5 is 128, outside the model's vocabulary of 128 tokens (allowed: token ids "
        "0..127)"),
    "loss_mask row of another length": (
        rows_with("loss_mask", 0, lambda m: m[:5]), True, "batch['loss_mask'] row 0 has 5 entries, input_ids 7"),
    "a weight in the loss mask": (
        rows_with("loss_mask", 2, lambda m: m.index_fill(0, torch.tensor([6]), 0.5)), False,
        "batch['loss_mask'] row 2: token 6 is 0.5 (allowed: 0 or 1 per token)"),
    "no target token": (
        lambda d: {"loss_mask": nested([torch.zeros_like(m) for m in d["loss_mask"].unbind()])}, False,
        "batch['loss_mask']: has no target token"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_bad_verl_batch_is_refused_as_verls_engine_refuses_it_or_stricter(tiny_model_dir, case):
    change, verl_refuses, message = CASES[case]
    control = build("fsdp2", tiny_model_dir)
    if verl_refuses:
        with pytest.raises(Exception):  # verl's own errors: a tensor-size RuntimeError, an IndexError, ...
            train(control, sft(change))
    else:
        train(control, sft(change))
    engine = build("enginery_fsdp2", tiny_model_dir)
    fresh = build("enginery_fsdp2", tiny_model_dir)
    with pytest.raises(RuntimeError) as error:  # enginery.EngineryError
        train(engine, sft(change))
    assert type(error.value).__name__ == "EngineryError" and message in str(error.value)
    # before any work: the next step is a fresh engine's first
    got, want = train(engine, sft()), train(fresh, sft())
    assert got["loss"] == want["loss"] and got["metrics"]["grad_norm"] == want["metrics"]["grad_norm"]


def test_ppo_inputs_narrower_than_the_response_mask_are_refused(tiny_model_dir):
    """verl's PPO layout: old_log_probs and advantages are [rows, response width] like the response mask; one
    column short, verl's ppo_loss would broadcast or fail on a size mismatch inside the loss."""
    old = [torch.zeros(len(r)) for r in RESPONSES]
    data = verl_batches.ppo_batch(PROMPTS, RESPONSES, old, [1.0, -0.5, 0.25], micro_batch=1)
    data["old_log_probs"] = data["old_log_probs"][:, :-1]
    engine = build("enginery_fsdp2", tiny_model_dir)
    with pytest.raises(RuntimeError, match=r"batch\['old_log_probs'\] has shape \[3, 3\], loss_mask \[3, 4\]"):
        engine.infer_batch(data.to(DEVICE))
