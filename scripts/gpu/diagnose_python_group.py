"""Builds an enginery engine from Python over one kind of torch.distributed group, to find which one crashes.
Usage (scripts/gpu/diagnose_python_group.sh runs it): diagnose_python_group.py GROUP DEVICE PLUGIN_DIR
GROUP: nccl | gloo | none. DIAG_CONFIG (JSON) replaces the engine config. Prints each stage before it runs, so the last line printed names the stage that died."""
import json
import os
import socket
import sys

import torch
import torch.distributed as dist

import enginery

group, device, plugin_dir = sys.argv[1:4]


def stage(text):
    print(f"[{group}/{device}] {text}", flush=True)


if group != "none":
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    stage(f"init_process_group({group})")
    dist.init_process_group(group, init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    default = dist.distributed_c10d._get_default_group()
    backend = default._get_backend(torch.device(device)) if hasattr(default, "_get_backend") else default
    stage(f"backend object: {type(backend).__module__}.{type(backend).__qualname__}")
stage("load_plugins")
print(enginery.load_plugins([plugin_dir]), flush=True)
stage("new_engine")
config = json.loads(os.environ.get("DIAG_CONFIG", '{"model.path": "builtin:qwen2-tiny"}'))
stage(f"config {config}")
engine = enginery.new_engine("language_model", "fsdp", device, config)
stage("initialize")
engine.initialize()
stage("train_batch")
ids = torch.randint(0, 200, (2, 16), device=device)
batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "position_ids": torch.arange(16, device=device)
         .expand(2, 16).contiguous(), "loss_mask": torch.ones_like(ids, dtype=torch.float32)}


def loss_fn(model_output, data):
    lp = model_output["log_probs"]
    return -(lp * data["loss_mask"][:, : lp.shape[1]]).sum() / data["loss_mask"].sum(), {}


with engine.train_mode():
    out = engine.train_batch(batch, loss_fn)
stage(f"ok: loss {float(out['loss']):.4f} grad_norm {out['grad_norm']:.4f}")
if group != "none":
    dist.destroy_process_group()
