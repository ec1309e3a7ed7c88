"""The Python API's packed batch (host_api/batch.h's [Note: packed batch]): a batch whose input_ids is a jagged
nested tensor (or a strided one, or a list of 1-D tensors) reaches the engine as input_ids.values() and cu_seqlens =
offsets(), without padding; its outputs come back as jagged nested views on input_ids' offsets, in verl's alignment
(log_probs[t] for token t + 1, 0 at a sequence's last token): the padded call's outputs shifted by one. The loss sees
the micro-batch packed (flat tensors and cu_seqlens) and ctx.rows; losses and gradients equal the padded call's.
Entries that cannot be read as the batch's rows are refused by name before any work."""
import enginery
import pytest
import torch

import common

LENGTHS = (16, 12, 16, 16)  # common.parity_batch: row 1 ends in 4 padding tokens


def engine():
    e = enginery.new_engine("language_model", "fsdp", "cpu", common.CONFIG)
    e.initialize()
    return e


def value_engine():
    e = enginery.new_engine("value_model", "fsdp", "cpu", common.CONFIG)
    e.initialize()
    return e


def rows(padded, lengths=LENGTHS):
    return [padded[i, :n] for i, n in enumerate(lengths)]


def jagged(row_list):
    return torch.nested.as_nested_tensor(row_list, layout=torch.jagged)


def packed_batch(form="jagged"):
    """common.parity_batch's sequences without their padding: input_ids and loss_mask (1 at each target token, as
    verl's SFT mask) nested like each other."""
    padded = common.parity_batch()
    ids, mask = rows(padded["input_ids"]), rows(padded["loss_mask"])
    if form == "jagged":
        return {"input_ids": jagged(ids), "loss_mask": jagged(mask)}
    if form == "strided":
        return {"input_ids": torch.nested.nested_tensor(ids), "loss_mask": torch.nested.nested_tensor(mask)}
    return {"input_ids": ids, "loss_mask": mask}


def packed_sft_loss(model_output, data, ctx):
    """common.sft_loss in the packed form: log_probs[t] is token t + 1's, so token t's target weight is read one
    position left (no sequence's first token is a target, so nothing crosses a sequence's end)."""
    log_probs = model_output["log_probs"]
    assert log_probs.dim() == 1 and data["input_ids"].dim() == 1 and "cu_seqlens" in data
    mask = torch.roll(data["loss_mask"].to(log_probs.dtype), -1)
    return -(log_probs * mask).sum() / ctx.global_num_tokens, {}


def shifted(padded_row):
    """The padded call's row (log_probs[t] for token t) in verl's alignment: token t + 1's at t, 0 at the end."""
    return torch.cat([padded_row[1:], padded_row.new_zeros(1)])


@pytest.mark.parametrize("form", ["jagged", "strided", "list"])
def test_packed_outputs_are_the_padded_calls_shifted_as_nested_views(form):
    e = engine()
    padded = e.infer_batch({**common.parity_batch(), "calculate_entropy": True})["model_output"]
    batch = {**packed_batch(form), "calculate_entropy": True}
    out = e.infer_batch(batch)["model_output"]
    for name in ("log_probs", "entropy"):
        got = out[name]
        assert got.is_nested and got.layout == torch.jagged, name
        assert got.values().dim() == 1 and got.values().shape[0] == sum(LENGTHS)
        if form == "jagged":  # views on the caller's offsets: the same ragged dimension as input_ids
            assert got.offsets() is batch["input_ids"].offsets()
            assert got.shape[1] == batch["input_ids"].shape[1]
        for r, row in enumerate(got.unbind()):
            want = shifted(padded[name][r, : LENGTHS[r]])
            torch.testing.assert_close(row, want, rtol=1e-5, atol=1e-6, msg=f"{name} row {r}")
            assert row[-1] == 0


def test_packed_values_are_per_token():
    e = value_engine()
    padded = e.infer_batch(common.parity_batch())["model_output"]["values"]
    got = e.infer_batch(packed_batch())["model_output"]["values"]
    for r, row in enumerate(got.unbind()):
        torch.testing.assert_close(row, padded[r, : LENGTHS[r]], rtol=1e-5, atol=1e-6)


def test_flat_input_ids_with_cu_seqlens_is_the_same_call():
    """The contract's own spelling (flat input_ids and cu_seqlens) is the same packed call as a nested input_ids."""
    e = engine()
    nested = e.infer_batch(packed_batch())["model_output"]["log_probs"]
    batch = packed_batch()
    flat = {"input_ids": batch["input_ids"].values(), "cu_seqlens": batch["input_ids"].offsets(),
            "loss_mask": batch["loss_mask"].values()}
    out = e.infer_batch(flat)["model_output"]["log_probs"]
    assert out.is_nested and torch.equal(out.values(), nested.values())


def test_packed_training_equals_padded_training_loss_for_loss_and_gradient():
    """Three train steps: the packed call's loss, grad norm and next outputs equal the padded call's; the loss sees
    each micro-batch packed, with its rows."""
    packed, padded = engine(), engine()
    seen = []

    def loss_fn(model_output, data, ctx):
        offsets = data["cu_seqlens"]
        seen.append((list(ctx.rows), offsets.tolist(), data["input_ids"].shape[0], model_output["log_probs"].shape[0]))
        return packed_sft_loss(model_output, data, ctx)

    for step in range(3):
        got = packed.train_batch(packed_batch(), loss_fn)
        want = padded.train_batch(common.parity_batch(), common.sft_loss)
        assert float(got["loss"]) == pytest.approx(float(want["loss"]), rel=1e-5), step
        assert got["grad_norm"] == pytest.approx(want["grad_norm"], rel=1e-4), step
    # two micro-batches of two rows (common.CONFIG), each packed with its own offsets from 0
    assert seen[:2] == [([0, 1], [0, 16, 28], 28, 28), ([2, 3], [0, 16, 32], 32, 32)]
    after = packed.infer_batch(packed_batch())["model_output"]["log_probs"].unbind()
    reference = padded.infer_batch(common.parity_batch())["model_output"]["log_probs"]
    for r, row in enumerate(after):
        torch.testing.assert_close(row, shifted(reference[r, : LENGTHS[r]]), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("change, message", [
    # another nested entry whose rows are not input_ids'
    (lambda b: {**b, "loss_mask": jagged([m[:-1] if i == 2 else m for i, m in enumerate(b["loss_mask"].unbind())])},
     "batch['loss_mask']: row 2 has 15 entries, input_ids 16"),
    (lambda b: {**b, "loss_mask": jagged(list(b["loss_mask"].unbind())[:3])},
     "batch['loss_mask']: has 3 rows, input_ids 4"),
    (lambda b: {**b, "position_ids": [torch.arange(n + (i == 1)) for i, n in enumerate(LENGTHS)]},
     "batch['position_ids']: row 1 has 13 entries, input_ids 12"),
    # nested entries beside a padded input_ids, and cu_seqlens beside a nested input_ids
    (lambda b: {**common.parity_batch(), "loss_mask": b["loss_mask"]},
     "batch['loss_mask']: is a nested tensor, and input_ids is not"),
    (lambda b: {**b, "cu_seqlens": b["input_ids"].offsets()}, "batch['cu_seqlens']: is given, and input_ids is nested"),
    (lambda b: {**b, "input_ids": []}, "batch['input_ids']: has no rows"),
])
def test_unreadable_nested_entries_are_refused_by_name_before_any_work(change, message):
    e, fresh = engine(), engine()
    with pytest.raises(enginery.EngineryError) as error:
        e.train_batch(change(packed_batch()), packed_sft_loss)
    assert message in str(error.value)
    got = e.train_batch(common.parity_batch(), common.sft_loss)
    want = fresh.train_batch(common.parity_batch(), common.sft_loss)
    assert float(got["loss"]) == float(want["loss"]) and got["grad_norm"] == want["grad_norm"]
