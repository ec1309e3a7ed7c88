"""verl's configs as enginery's config sections (docs/ARCHITECTURE.md, "Configuration").

A section comes as a dict of enginery's keys (passed whole: an unknown key is an error naming it), or as one of
verl's config dataclasses (HFModelConfig, EngineConfig and its subclasses, OptimizerConfig, CheckpointConfig, or
enginery's own EngineryEngineConfig, `enginery.verl.engine_config`). verl's dataclasses are Mappings too, and carry
every field of every verl backend, so each of their fields is one of three kinds here:
- read: handed to the engine under its own name, the engine's key (enginery's keys follow verl's names);
- not read by verl's own FSDP engine either (derived by verl, or taken from the batch's metadata rather than the
  config): accepted with any value, as verl's engine accepts it;
- anything else: accepted only at its dataclass default, otherwise refused by name, so a knob that would change
  training is never dropped in silence.
"""
import dataclasses

import enginery

# Backend options of enginery's ([engine.<backend>]) that verl's engine configs carry flat in their engine section,
# each with its off value: verl's FSDPEngineConfig field ulysses_sequence_parallel_size, and EngineryEngineConfig's
# offload_outside_modes and gradient_checkpointing_policy (what backward recomputes).
FLAT_BACKEND_OPTIONS = {"ulysses_sequence_parallel_size": 1, "offload_outside_modes": False,
                        "gradient_checkpointing_policy": "layer"}
# A field is read when the engine reads the key of its name in its section: the keys new_engine's config takes
# (config/schema.cpp, through the extension), and the flat backend options above in the engine section.
# model.trust_remote_code is a key enginery parses but only at false (it runs its own model code, never a
# checkpoint's): as a verl field it follows the default-or-refused rule below.
_ONLY_AT_DEFAULT = {"model.trust_remote_code"}
_engine_keys = []  # filled on first use: the extension's list


def _read_by_the_engine(section, name):
    if not _engine_keys:
        _engine_keys.extend(enginery.engine_config_keys())
    key = f"{section}.{name}"
    if key in _ONLY_AT_DEFAULT or name in _NOT_READ_BY_VERL[section]:
        return False
    return ((section == "engine" and name in FLAT_BACKEND_OPTIONS) or key in _engine_keys
            or any(k.startswith(key + ".") for k in _engine_keys))


# Fields verl's own FSDP engine does not read from the config either (verl/workers/engine/fsdp/transformer_impl.py):
# derived by verl's __post_init__ (the local copies, the loaded HF objects), deprecated aliases verl folds into
# their successors, batch knobs the worker puts into each batch's metadata, and speed- or memory-only switches of
# its kernels (entropy_from_logits_with_chunking: the same entropy either way; enginery's head always chunks).
# model.lora is Megatron's LoRA section (verl's hf_model.yaml fills it in for every trainer): verl's FSDP engine reads
# lora_rank, and lora["merge"] only for a PEFT model, which lora_rank > 0 (refused) would make.
_NOT_READ_BY_VERL = {
    "model": {"_target_", "local_path", "hf_config_path", "local_hf_config_path", "tokenizer_path",
              "local_tokenizer_path", "model_type", "load_tokenizer", "hf_config", "generation_config", "tokenizer",
              "processor", "architectures", "use_shm", "custom_chat_template", "use_fused_kernels",
              "fused_kernel_options", "use_liger", "lora"},
    "engine": {"_target_", "dtype", "router_replay", "turbo_config", "infer_max_token_len_per_gpu",
               "infer_micro_batch_size_per_gpu", "use_fused_kernels", "use_remove_padding", "use_torch_compile",
               "use_orig_params", "use_no_sync_for_gradient_accumulation", "entropy_from_logits_with_chunking",
               "entropy_from_logits_chunk_size",
               "entropy_checkpointing", "wrap_policy"},
    "optim": {"_target_", "grad_clip", "warmup_style"},
    "checkpoint": {"_target_"},
}

# HFModelConfig.override_config keys that only choose verl's attention kernel: enginery has its own.
_ATTENTION_OVERRIDES = {"attn_implementation"}


def error(what, where, allowed):
    return enginery.EngineryError(f"{where}: {what} (allowed: {allowed})")


def _default(field):
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return dataclasses.MISSING


def _same(value, default):
    try:
        return bool(value == default)
    except Exception:  # tensors or other values without a plain equality: not the default
        return False


def section(config, name):
    """One section as a dict of enginery keys; verl's dataclasses by the rules above."""
    if config is None:
        return {}
    if isinstance(config, dict):
        return dict(config)
    if dataclasses.is_dataclass(config):  # before Mapping: verl's BaseConfig is both
        return _from_dataclass(config, name)
    if hasattr(config, "items") and hasattr(config, "keys"):  # OmegaConf DictConfig and other mappings
        return {key: config[key] for key in config.keys()}
    raise error(f"a {type(config).__name__}", f"enginery.verl {name} config",
                "a dict, or verl's config dataclass")


def _from_dataclass(config, name):
    where = f"enginery.verl {name}_config ({type(config).__name__})"
    out = {}
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        if _read_by_the_engine(name, field.name):
            if value is not None:
                out[field.name] = dict(value) if hasattr(value, "keys") else value
        elif name == "model" and field.name == "override_config":
            unknown = sorted(set(value or {}) - _ATTENTION_OVERRIDES)
            if unknown:
                raise error(f"override_config sets {', '.join(unknown)}, which enginery's models do not read",
                            where, "override_config with attn_implementation only (enginery has its own attention)")
        elif hasattr(value, "enable"):  # a switched feature (verl's QAT): off is the only value enginery has
            if value.enable:
                raise error(f"{field.name}.enable = True is not implemented by enginery", where,
                            f"{field.name}.enable = False")
        elif field.name not in _NOT_READ_BY_VERL[name] and not _same(value, _default(field)):
            raise error(f"{field.name} = {value!r} is not implemented by enginery", where,
                        f"{field.name} = {_default(field)!r} (its default), or leave it out")
    if name == "model" and getattr(config, "local_path", None):
        out["path"] = config.local_path  # verl's copy of `path` on this machine
    if name == "optim" and out.get("total_training_steps") == -1:
        del out["total_training_steps"]  # verl's "not known yet": the trainer sets it before initialize()
    if name == "model" and out.get("path") is not None:
        out["path"] = str(out["path"])
    return out
