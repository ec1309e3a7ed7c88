"""verl's no-padding layout -> the engine's padded batch and back (enginery/verl/layout.py), without an engine:
lists of tensors everywhere, jagged nested tensors where torch has them (2.1+)."""
import pytest
import torch

from enginery.verl import layout

import verl_common

NEEDS_ENGINE = False  # the extension is imported (enginery/__init__.py), the plugins are not needed

jagged_only = pytest.mark.skipif(not layout.has_jagged(), reason="torch.nested has no jagged layout before 2.1")


@pytest.mark.parametrize("jagged", [False, pytest.param(True, marks=jagged_only)])
def test_jagged_batch_becomes_the_engines_padded_batch(jagged):
    prompts, responses = verl_common.sequences()
    mask = torch.ones(4, 7)
    mask[2, 3] = 0.0  # a masked response token (a tool output) stays masked at its own position
    data = verl_common.verl_batch(prompts, responses, jagged=jagged, response_mask=mask)
    batch, _ = layout.to_engine_batch(data)
    expected = verl_common.plain_batch(prompts, responses)
    assert torch.equal(batch["input_ids"], expected["input_ids"])
    assert torch.equal(batch["attention_mask"], expected["attention_mask"])
    assert torch.equal(batch["position_ids"][0, :9], torch.arange(9))
    for r in range(4):  # response token j of a row of n tokens with `resp` response tokens sits at n - resp + j
        n, resp = prompts[r].shape[0] + responses[r].shape[0], responses[r].shape[0]
        want = torch.zeros(batch["loss_mask"].shape[1])
        want[n - resp: n] = mask[r, :resp]
        assert torch.equal(batch["loss_mask"][r], want), r
    assert batch[layout.ROW_KEY].tolist() == [0, 1, 2, 3]


@pytest.mark.parametrize("jagged", [False, pytest.param(True, marks=jagged_only)])
def test_outputs_come_back_in_verls_layout(jagged):
    prompts, responses = verl_common.sequences()
    data = verl_common.verl_batch(prompts, responses, jagged=jagged)
    batch, shape = layout.to_engine_batch(data)
    engine = torch.arange(batch["input_ids"].numel(), dtype=torch.float32).view_as(batch["input_ids"])
    log_probs = shape.output("log_probs", engine)
    values = shape.output("values", engine)
    if jagged:
        assert log_probs.is_nested and log_probs.layout == torch.jagged
    rows = verl_common.rows_of(log_probs)
    for r, row in enumerate(rows):
        n = prompts[r].shape[0] + responses[r].shape[0]
        # verl's position t is the engine's t + 1 (the token it predicts); the last position predicts nothing
        assert torch.equal(row, torch.cat([engine[r, 1:n], torch.zeros(1)])), r
        assert torch.equal(verl_common.rows_of(values)[r], engine[r, :n]), r


def test_sft_mask_aligned_with_input_ids_and_padded_input_pass_through():
    prompts, responses = verl_common.sequences()
    data = verl_common.verl_batch(prompts, responses)
    data["loss_mask"] = [torch.cat([torch.zeros(p.shape[0]), torch.ones(r.shape[0])])
                         for p, r in zip(prompts, responses)]
    batch, _ = layout.to_engine_batch(data)
    assert torch.equal(batch["loss_mask"], verl_common.plain_batch(prompts, responses)["loss_mask"])

    padded = verl_common.plain_batch(prompts, responses)
    batch, shape = layout.to_engine_batch(dict(padded))
    assert batch["input_ids"] is padded["input_ids"] and shape.lengths is None
    out = shape.output("log_probs", torch.ones(4, padded["input_ids"].shape[1]))
    assert out.shape == padded["input_ids"].shape and out[:, -1].abs().sum() == 0


def test_select_rows_keeps_each_form():
    prompts, responses = verl_common.sequences()
    data = verl_common.verl_batch(prompts, responses)
    data["old_log_probs"] = torch.arange(4 * 7, dtype=torch.float32).view(4, 7)
    picked = layout.select_rows(data, [3, 1], 4)
    assert [t.tolist() for t in picked["input_ids"]] == [data["input_ids"][3].tolist(), data["input_ids"][1].tolist()]
    assert torch.equal(picked["old_log_probs"], data["old_log_probs"][[3, 1]])
    assert picked["temperature"] == 1.0 and picked["global_batch_size"] == 4


@pytest.mark.parametrize("change, named", [
    ({"input_ids": None}, "input_ids"),
    ({"loss_mask": None}, "loss_mask"),
    ({"responses": None, "attention_mask": None}, "responses"),
    ({"input_ids": "text"}, "input_ids"),
])
def test_unreadable_batches_are_named(change, named):
    prompts, responses = verl_common.sequences()
    data = verl_common.verl_batch(prompts, responses)
    for key, value in change.items():
        if value is None:
            del data[key]
        else:
            data[key] = value
    with pytest.raises(layout.LayoutError, match=named):
        layout.to_engine_batch(data)
