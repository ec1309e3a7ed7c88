"""enginery's engine config for verl: what `engine=enginery` (hydra) or `omega_conf_to_dataclass` builds, and what
verl's workers hand to `EngineRegistry.new(..., engine_config=...)`. verl's FSDPEngineConfig refuses any strategy
but its own (fsdp, fsdp2, fsdp_turbo), so a backend of another name needs a config class of its own: this one is
verl's EngineConfig (the fields every verl engine shares: offload, micro-batching, seed, ...) plus the FSDP fields
enginery's engines read (enginery/verl/config.py). Needs verl; `enginery.verl` itself does not."""
from dataclasses import dataclass
from typing import Any, Optional

from verl.workers.config import EngineConfig

from . import BACKENDS
from .config import error


@dataclass
class EngineryEngineConfig(EngineConfig):
    # verl's actor config writes its deprecated ulysses_sequence_parallel_size into the engine config after
    # construction, as verl's FSDPEngineConfig allows.
    _mutable_fields = EngineConfig._mutable_fields | {"ulysses_sequence_parallel_size"}

    strategy: str = "enginery_fsdp2"
    fsdp_size: int = -1
    reshard_after_forward: bool = True
    forward_prefetch: bool = False
    model_dtype: str = "fp32"
    # verl's key and shape: {"param_dtype": "bf16" | "fp16" | "fp32", "reduce_dtype": ..., "buffer_dtype": ...};
    # None is verl's default, bf16 compute with fp32 reductions and buffers.
    mixed_precision: Optional[dict[str, Any]] = None
    # verl's FSDPEngineConfig field and meaning: groups of this many consecutive ranks share each batch and split its
    # packed tokens, attention exchanging heads (docs/ARCHITECTURE.md, "Sequence parallelism"); needs
    # model use_remove_padding, as verl's engine does.
    ulysses_sequence_parallel_size: int = 1
    # The state in host memory outside train_mode()/eval_mode() (python/README.md, "enginery.verl in detail").
    offload_outside_modes: bool = False
    # What backward recomputes when the model config's enable_gradient_checkpointing is on: "layer" (whole decoder
    # layers, verl's meaning) or "mlp" (the MLP block only: attention's outputs are kept; docs/ARCHITECTURE.md,
    # "Activation checkpointing"). The engine checks the value, and refuses "mlp" without checkpointing.
    gradient_checkpointing_policy: str = "layer"

    def __post_init__(self):
        super().__post_init__()
        if self.strategy not in BACKENDS:
            raise error(f"strategy = {self.strategy!r}", "EngineryEngineConfig", ", ".join(BACKENDS))
