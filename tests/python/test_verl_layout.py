"""verl's no-padding layout -> the engine's packed batch and back (enginery/verl/layout.py), without an engine: verl's
jagged tensors reach the engine as views (values() and offsets(), nothing padded or copied), a padded batch as the
host's padded form; outputs come back as nested views on verl's offsets."""
import pytest
import torch

from enginery.verl import layout

import verl_common

NEEDS_ENGINE = False  # the extension is imported (enginery/__init__.py), the plugins are not needed


def test_jagged_batch_becomes_the_engines_packed_batch():
    prompts, responses = verl_common.sequences()
    mask = torch.ones(4, 7)
    mask[2, 3] = 0.0  # a masked response token (a tool output): the response mask goes to the engine as it is
    data = verl_common.verl_batch(prompts, responses, response_mask=mask)
    batch, shape = layout.to_engine_batch(data)
    ids = [torch.cat([p, r]) for p, r in zip(prompts, responses)]
    assert torch.equal(batch["input_ids"], torch.cat(ids))
    assert batch["cu_seqlens"].tolist() == [0, 9, 17, 26, 35] and batch["cu_seqlens"].dtype == torch.int64
    assert torch.equal(batch["position_ids"], torch.cat([torch.arange(t.shape[0]) for t in ids]))
    assert batch["loss_mask"] is data["loss_mask"]  # verl's response mask [rows, R]: per sequence, not placed
    assert "attention_mask" not in batch and set(batch) == {"input_ids", "cu_seqlens", "position_ids", "loss_mask"}
    assert shape.rows == 4
    # views of verl's own tensors: no padding, no copy
    assert batch["input_ids"].data_ptr() == data["input_ids"].values().data_ptr()
    assert batch["cu_seqlens"] is data["input_ids"].offsets()
    assert batch["position_ids"].data_ptr() == data["position_ids"].values().data_ptr()


def test_sft_mask_jagged_like_input_ids_is_the_per_token_mask():
    prompts, responses = verl_common.sequences()
    data = verl_common.verl_batch(prompts, responses)
    data["loss_mask"] = torch.nested.as_nested_tensor(
        [torch.cat([torch.zeros(p.shape[0]), torch.ones(r.shape[0])]) for p, r in zip(prompts, responses)],
        layout=torch.jagged)
    batch, _ = layout.to_engine_batch(data)
    assert batch["loss_mask"].data_ptr() == data["loss_mask"].values().data_ptr()
    assert batch["loss_mask"].shape == batch["input_ids"].shape


def test_outputs_come_back_nested_on_verls_offsets():
    prompts, responses = verl_common.sequences()
    data = verl_common.verl_batch(prompts, responses)
    batch, shape = layout.to_engine_batch(data)
    flat = torch.arange(batch["input_ids"].numel(), dtype=torch.float32)
    log_probs = shape.output(flat, "log_probs", batch["cu_seqlens"])
    assert log_probs.is_nested and log_probs.layout == torch.jagged
    assert log_probs.values().data_ptr() == flat.data_ptr()  # a view
    assert log_probs.shape[1] == data["input_ids"].shape[1]  # verl's ragged dimension
    rows = verl_common.rows_of(log_probs)
    ends = batch["cu_seqlens"].tolist()
    for r, row in enumerate(rows):  # the engine's outputs are verl's alignment already: nothing shifted
        assert torch.equal(row, flat[ends[r]: ends[r + 1]]), r


def test_padded_input_passes_through_and_its_outputs_are_shifted_to_verls_alignment():
    prompts, responses = verl_common.sequences()
    padded = verl_common.plain_batch(prompts, responses)
    batch, shape = layout.to_engine_batch(dict(padded))
    assert batch["input_ids"] is padded["input_ids"] and batch["attention_mask"] is padded["attention_mask"]
    assert shape.offsets is None and shape.rows == 4
    engine = torch.arange(1, 1 + padded["input_ids"].numel(), dtype=torch.float32).view_as(padded["input_ids"])
    out = shape.output(engine, "log_probs")  # the host's padded form: log_probs[s, t] for token t itself
    assert torch.equal(out[:, :-1], engine[:, 1:]) and out[:, -1].abs().sum() == 0
    assert shape.output(engine, "values") is engine


def test_select_rows_keeps_each_form():
    prompts, responses = verl_common.sequences()
    data = verl_common.verl_batch(prompts, responses)
    data["old_log_probs"] = torch.arange(4 * 7, dtype=torch.float32).view(4, 7)
    picked = layout.select_rows(data, [3, 1], 4)
    rows = data["input_ids"].unbind()
    assert [t.tolist() for t in picked["input_ids"].unbind()] == [rows[3].tolist(), rows[1].tolist()]
    assert torch.equal(picked["old_log_probs"], data["old_log_probs"][[3, 1]])
    assert picked["temperature"] == 1.0 and picked["global_batch_size"] == 4


def _nested_rows(key, row, change):
    def apply(data):
        rows = list(data[key].unbind())
        rows[row] = change(rows[row])
        return {key: torch.nested.as_nested_tensor(rows, layout=torch.jagged)}
    return apply


@pytest.mark.parametrize("change, named", [
    ({"input_ids": None}, "the batch has no 'input_ids'"),
    ({"loss_mask": None}, "the batch has no 'loss_mask'"),
    ({"input_ids": "text"}, "batch['input_ids'] is a str"),
    ({"input_ids": []}, "batch['input_ids'] is a list"),
    (lambda d: {"input_ids": torch.nested.nested_tensor(list(d["input_ids"].unbind()))},
     "batch['input_ids'] is a nested tensor whose values() are not its rows back to back"),
    (_nested_rows("input_ids", 2, lambda t: t[:0]), "batch['input_ids'] row 2 has shape [0]"),
    (_nested_rows("position_ids", 1, lambda t: t[:-2]), "batch['position_ids'] row 1 has 6 entries, input_ids 8"),
    (lambda d: {"input_ids": torch.nested.as_nested_tensor([t.float() for t in d["input_ids"].unbind()],
                                                           layout=torch.jagged)},
     "batch['input_ids'] row 0 has dtype torch.float32"),
    (lambda d: {"position_ids": torch.zeros(4, 9, dtype=torch.long)}, "batch['position_ids'] is not jagged"),
    (lambda d: {"loss_mask": torch.ones(3, 7)}, "batch['loss_mask'] has shape [3, 7] for 4 rows"),
    (lambda d: {"old_log_probs": torch.zeros(4, 6)}, "batch['old_log_probs'] has shape [4, 6], loss_mask [4, 7]"),
    (lambda d: {"advantages": torch.nested.as_nested_tensor([torch.zeros(n) for n in (6, 3, 7, 4)],
                                                            layout=torch.jagged)},
     "batch['advantages'] row 3 has 4 entries, the responses 5"),
    (lambda d: {"responses": None, "attention_mask": None,
                "advantages": verl_common.nested(torch.zeros(n) for n in (6, 3, 7, 5))},
     "neither 'responses' (jagged) nor a padded 'attention_mask'"),
    (lambda d: {"input_ids": d["input_ids"].to("meta")}, "batch['input_ids'] is on the meta device"),
])
def test_unreadable_batches_are_named(change, named):
    prompts, responses = verl_common.sequences()
    data = verl_common.verl_batch(prompts, responses)
    changes = change if isinstance(change, dict) else change(data)
    for key, value in changes.items():
        if value is None:
            del data[key]
        else:
            data[key] = value
    with pytest.raises(layout.LayoutError) as error:
        layout.to_engine_batch(data)
    assert named in str(error.value)
