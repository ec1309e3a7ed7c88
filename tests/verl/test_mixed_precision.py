"""verl's test_fsdp2_autocast_dtype_honors_mixed_precision (tests/models/test_engine.py) on enginery's backend, on
the CPU over one process: built with verl's config objects through verl's EngineRegistry, then initialize(), then
what verl's test reads. bf16: autocast in bf16, no scaler; fp32: no autocast (the autocast dtype is fp32), no
scaler; fp16: a sharded grad scaler, an instance of torch's ShardedGradScaler (verl's own assertion) whose getters
read enginery's C++ scaler and whose scale() multiplies by its scale (enginery.verl.engine.EngineryGradScaler).
test_engine_ports.py runs verl's test itself over two ranks beside verl's engine."""
import pytest
import torch
from conftest import engine_config, new_engine

from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler


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
        assert isinstance(engine.scaler, ShardedGradScaler)
        scale = engine.scaler.get_scale()
        assert scale > 1.0 and engine.scaler.get_growth_interval() > 0
        assert engine.scaler.scale(torch.tensor(2.0)).item() == 2.0 * scale
        with pytest.raises(RuntimeError, match="optimizer_step"):
            engine.scaler.update(1.0)  # the engine updates its scale itself; a write here would be lost
    else:
        assert engine.scaler is None


def test_no_mixed_precision_is_verls_default_bf16(tiny_model_dir):
    engine = new_engine(tiny_model_dir)
    engine.initialize()
    assert engine._autocast_dtype == torch.bfloat16 and engine.scaler is None
