"""qwen3_moe's Hugging Face export (checkpoint.save_contents "hf_model"): after a training step, transformers loads
the directory enginery writes, every tensor used and none missing (its per-expert names are those transformers 5
fuses into mlp.experts.gate_up_proj / down_proj on load), and computes the log-probs enginery computes; a critic's
export loads as Qwen3MoeForTokenClassification with enginery's values."""
import torch
import transformers

import enginery

import common

CONFIG = {**common.CONFIG, "model.path": "builtin:qwen3-moe-tiny", "checkpoint.save_contents": ["model", "hf_model"]}


def test_transformers_loads_the_export_and_agrees(tmp_path):
    common.require_plugins()
    engine = enginery.new_engine("language_model", "fsdp", "cpu", CONFIG)
    engine.initialize()
    batch = common.parity_batch()
    with engine.train_mode():
        engine.train_batch(batch, common.sft_loss)
    engine.save_checkpoint(str(tmp_path / "ckpt"), 1)
    with engine.eval_mode():
        ours = engine.infer_batch(batch)["model_output"]["log_probs"]

    model, info = transformers.AutoModelForCausalLM.from_pretrained(
        str(tmp_path / "ckpt" / "huggingface"), dtype=torch.float32, attn_implementation="eager",
        experts_implementation="eager", output_loading_info=True)
    assert type(model).__name__ == "Qwen3MoeForCausalLM"
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"], info
    exported = dict(engine.get_per_tensor_param())
    fused = model.state_dict()["model.layers.0.mlp.experts.gate_up_proj"]  # [E, 2 * I, H], gate rows first
    for e in range(fused.shape[0]):
        gate = exported[f"model.layers.0.mlp.experts.{e}.gate_proj.weight"]
        up = exported[f"model.layers.0.mlp.experts.{e}.up_proj.weight"]
        assert torch.equal(fused[e], torch.cat([gate, up])), f"expert {e}"

    ids, mask = batch["input_ids"], batch["attention_mask"]
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp(min=0)).logits
    theirs = torch.log_softmax(logits.double(), -1)[:, :-1].gather(-1, ids[:, 1:, None])[..., 0]
    pairs = (mask[:, :-1] * mask[:, 1:]).bool()
    assert (ours[:, 1:][pairs].double() - theirs[pairs]).abs().max().item() < 1e-4


def test_transformers_loads_the_value_model_export(tmp_path):
    """A qwen3_moe critic (value_model) exports as Qwen3MoeForTokenClassification, whose scores are its values."""
    common.require_plugins()
    engine = enginery.new_engine("value_model", "fsdp", "cpu", CONFIG)
    engine.initialize()
    engine.save_checkpoint(str(tmp_path / "ckpt"), 1)
    batch = common.parity_batch()
    with engine.eval_mode():
        ours = engine.infer_batch(batch)["model_output"]["values"]
    model = transformers.AutoModelForTokenClassification.from_pretrained(
        str(tmp_path / "ckpt" / "huggingface"), dtype=torch.float32, attn_implementation="eager",
        experts_implementation="eager")
    assert type(model).__name__ == "Qwen3MoeForTokenClassification"
    ids, mask = batch["input_ids"], batch["attention_mask"]
    with torch.no_grad():
        theirs = model(input_ids=ids, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp(min=0)).logits[..., 0]
    real = mask.bool()
    assert (ours[real] - theirs[real]).abs().max().item() < 1e-4
