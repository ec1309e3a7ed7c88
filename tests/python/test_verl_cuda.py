"""enginery.verl on a GPU (skipped without CUDA): NCCL group, bf16 autocast, remove-padding, jagged nested input on
the device; log-probs equal `enginery logprobs --dtype bf16 --device cuda` on the same sequences, and
get_per_tensor_param's names are the model's Hugging Face names. scripts/gpu/check_verl_adapter.sh runs it.

Environment: ENGINERY_EXE (the enginery binary; ctest sets it), ENGINERY_VERL_MODEL (default builtin:qwen2-tiny, or
an HF directory), ENGINERY_VERL_ATOL (default 2e-2: the two paths batch and pack differently under bf16)."""
import json
import os
import random
import socket
import subprocess

import pytest
import torch
import torch.distributed as dist

from enginery import verl as enginery_verl

import common
import verl_common

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
MODEL = os.environ.get("ENGINERY_VERL_MODEL", "builtin:qwen2-tiny")


@pytest.fixture(scope="module")
def nccl_engine():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    engine = enginery_verl.LanguageModelEngine(
        model_config={"path": MODEL, "use_remove_padding": True},
        engine_config={"strategy": "enginery_fsdp", "micro_batch_size_per_gpu": 2,
                       "mixed_precision": {"param_dtype": "bf16"}},
        optimizer_config={"lr": 1e-6}, device="cuda", plugin_dirs=[common.PLUGIN_DIR])
    engine.initialize()
    yield engine
    del engine
    dist.destroy_process_group()


def vocab_size():
    if MODEL.startswith("builtin:"):
        return 256  # the built-in tiny models' vocabulary is larger; these ids are valid in all of them
    with open(os.path.join(MODEL, "config.json")) as f:
        return json.load(f)["vocab_size"]


def test_log_probs_equal_enginery_logprobs(nccl_engine, tmp_path):
    exe = os.environ.get("ENGINERY_EXE")
    if not exe:
        pytest.skip("ENGINERY_EXE (the enginery binary) is not set")
    rng = random.Random(0)
    tokens = [[rng.randrange(vocab_size()) for _ in range(n)] for n in (7, 40, 2, 23, 13)]
    (tmp_path / "tokens.json").write_text(json.dumps(tokens))
    subprocess.run([exe, "logprobs", "--model", MODEL, "--tokens", str(tmp_path / "tokens.json"),
                    "--out", str(tmp_path / "lp.json"), "--dtype", "bf16", "--device", "cuda"], check=True)
    expected = json.loads((tmp_path / "lp.json").read_text())["log_probs"]

    rows = [torch.tensor(t, device="cuda") for t in tokens]
    data = {"input_ids": torch.nested.as_nested_tensor(rows, layout=torch.jagged),
            "position_ids": torch.nested.as_nested_tensor([torch.arange(len(t), device="cuda") for t in tokens],
                                                          layout=torch.jagged),
            "loss_mask": torch.nested.as_nested_tensor([torch.ones(len(t), device="cuda") for t in tokens],
                                                       layout=torch.jagged),
            "temperature": 1.0, "use_remove_padding": True}
    with nccl_engine.eval_mode():
        out = nccl_engine.infer_batch(data)["model_output"]["log_probs"]
    assert out.is_nested and out.layout == torch.jagged
    atol = float(os.environ.get("ENGINERY_VERL_ATOL", "2e-2"))
    worst = 0.0
    for r, row in enumerate(out.unbind()):
        want = torch.tensor(expected[r], dtype=torch.float32)
        got = row[: len(tokens[r]) - 1].float().cpu()
        assert got.shape == want.shape, r
        worst = max(worst, float((got - want).abs().max()) if want.numel() else 0.0)
    print(f"max |enginery.verl - enginery logprobs| = {worst:.3g} (atol {atol})")
    assert worst <= atol


def test_per_tensor_param_names_are_the_models_hf_names(nccl_engine):
    generator, peft = nccl_engine.get_per_tensor_param(dtype=torch.bfloat16)
    names = []
    for name, tensor in generator:
        assert tensor.dtype == torch.bfloat16 and tensor.is_cuda, name
        names.append(name)
    assert peft is None and len(names) == len(set(names))
    if MODEL.startswith("builtin:"):
        assert any(n.startswith("model.layers.0.") for n in names) and "model.embed_tokens.weight" in names
    else:
        assert set(names) == verl_common.safetensors_names(MODEL)
