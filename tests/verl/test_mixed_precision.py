"""verl's test_fsdp2_autocast_dtype_honors_mixed_precision (tests/models/test_engine.py) on enginery's backend, on
the CPU over one process: built with verl's config objects through verl's EngineRegistry, then initialize(), then
what verl's test reads. bf16: autocast in bf16, no scaler; fp32: no autocast (the autocast dtype is fp32), no
scaler; fp16: a sharded grad scaler. enginery's scaler is C++; `engine.scaler` is a read-only view of it with
torch's GradScaler getters (enginery.verl.engine.ShardedGradScalerView)."""
import pytest
import torch
from conftest import engine_config, new_engine

from enginery.verl.engine import ShardedGradScalerView


@pytest.mark.parametrize("backend", ["enginery_fsdp2", "enginery_fsdp"])
@pytest.mark.parametrize("param_dtype, autocast, scaled", [
    ("bf16", torch.bfloat16, False),
    ("fp32", torch.float32, False),
    ("fp16", torch.float16, True),
])
def test_autocast_dtype_honors_mixed_precision(tiny_model_dir, backend, param_dtype, autocast, scaled):
    mixed = {"param_dtype": param_dtype, "reduce_dtype": "fp32", "buffer_dtype": "fp32"}
    engine = new_engine(tiny_model_dir, backend, engine=engine_config(strategy=backend, mixed_precision=mixed))
    engine.initialize()
    assert engine._autocast_dtype == autocast
    if scaled:
        assert isinstance(engine.scaler, ShardedGradScalerView)
        assert engine.scaler.get_scale() > 1.0 and engine.scaler.get_growth_interval() > 0
    else:
        assert engine.scaler is None


def test_no_mixed_precision_is_verls_default_bf16(tiny_model_dir):
    engine = new_engine(tiny_model_dir)
    engine.initialize()
    assert engine._autocast_dtype == torch.bfloat16 and engine.scaler is None
