"""enginery built from verl's own config objects: the shipped engine yaml and verl's optimizer yaml through verl's
omega_conf_to_dataclass, HFModelConfig of a local transformers directory, EngineRegistry.new with verl's keyword
arguments, then initialize(). Each of verl's fields is read, or not read by verl's FSDP engine either, or accepted
only at its default and otherwise refused by name (enginery/verl/config.py)."""
import os

import pytest
import torch
from conftest import ENGINE_YAML, engine_config, model_config, new_engine, optimizer_config

import enginery
from enginery.verl.engine_config import EngineryEngineConfig


def lr_curve(engine, steps):
    engine.initialize()
    return [engine.lr_scheduler_step() for _ in range(steps)]


def test_verls_configs_build_and_initialize(tiny_model_dir):
    from verl.workers.config import FSDPOptimizerConfig
    engine = new_engine(tiny_model_dir)
    assert isinstance(engine._configs["engine"], EngineryEngineConfig)
    assert isinstance(engine._configs["optim"], FSDPOptimizerConfig)
    engine.initialize()
    names = [name for name, _ in engine.get_per_tensor_param()[0]]
    assert "model.embed_tokens.weight" in names and "lm_head.weight" in names


def test_total_training_steps_set_after_construction_is_honoured(tiny_model_dir):
    """verl's SFT trainer sets optimizer_config.total_training_steps after EngineRegistry.new (it is -1 before) and
    its engines read it in initialize(): a cosine schedule over the steps set late equals one given them at once."""
    schedule = dict(lr_scheduler_type="cosine", lr_warmup_steps_ratio=0.25, min_lr_ratio=0.1)
    late_optim = optimizer_config(**schedule)
    assert late_optim.total_training_steps == -1
    late = new_engine(tiny_model_dir, optim=late_optim)
    late_optim.total_training_steps = 8
    at_once = new_engine(tiny_model_dir, optim=optimizer_config(total_training_steps=8, **schedule))
    longer = new_engine(tiny_model_dir, optim=optimizer_config(total_training_steps=100, **schedule))
    late_lrs = lr_curve(late, 8)
    assert late_lrs == pytest.approx(lr_curve(at_once, 8), rel=1e-12)
    assert late_lrs != pytest.approx(lr_curve(longer, 8), rel=1e-3)


def test_engine_enginery_through_hydra(tiny_model_dir):
    """`engine=enginery` with the package's config folder on hydra's search path, in verl's own SFT trainer
    config: the engine group resolves to enginery's yaml and its dataclass, strategy a backend verl registers."""
    import verl
    from hydra import compose, initialize_config_dir
    from verl.utils.config import omega_conf_to_dataclass
    config_dir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        cfg = compose(config_name="sft_trainer_engine",
                      overrides=["hydra.searchpath=[pkg://enginery.verl.conf]", "engine=enginery",
                                 "engine.strategy=enginery_fsdp"])
    engine = omega_conf_to_dataclass(cfg.engine)
    assert isinstance(engine, EngineryEngineConfig) and engine.strategy == "enginery_fsdp"


def test_the_shipped_yaml_lists_every_field_of_the_dataclass():
    from omegaconf import OmegaConf
    import dataclasses
    yaml = OmegaConf.to_container(OmegaConf.load(ENGINE_YAML))
    own = {f.name for f in dataclasses.fields(EngineryEngineConfig)} - {f.name for f in dataclasses.fields(
        __import__("verl.workers.config", fromlist=["EngineConfig"]).EngineConfig)}
    assert own <= set(yaml), own - set(yaml)


@pytest.mark.parametrize("section, change, named", [
    ("model", {"lora_rank": 8}, "lora_rank = 8 is not implemented"),
    ("model", {"trust_remote_code": True}, "trust_remote_code = True is not implemented"),
    ("model", {"override_config": {"attn_implementation": "sdpa", "rope_theta": 5.0}}, "override_config sets rope_theta"),
    ("engine", {"full_determinism": True}, "full_determinism = True is not implemented"),
    ("engine", {"router_replay": None}, None),  # verl's FSDP engine does not read it either
    ("model", {"lora": {"rank": 0, "merge": False}}, None),  # Megatron's LoRA section, as hf_model.yaml fills it
    ("optim", {"optimizer_impl": "bitsandbytes.optim"}, "optimizer_impl = 'bitsandbytes.optim' is not implemented"),
    ("optim", {"override_optimizer_config": {"eps": 1e-6}}, "override_optimizer_config"),
])
def test_fields_enginery_does_not_read_are_refused_by_name(tiny_model_dir, section, change, named):
    if section == "model":
        fields = dict(change)
        override = fields.pop("override_config", None)
        from verl.workers.config import HFModelConfig
        config = HFModelConfig(path=tiny_model_dir, load_tokenizer=False,
                               override_config=override or {"attn_implementation": "sdpa"}, **fields)
        build = lambda: new_engine(tiny_model_dir, model=config)  # noqa: E731
    elif section == "engine":
        build = lambda: new_engine(tiny_model_dir, engine=EngineryEngineConfig(**change))  # noqa: E731
    else:
        build = lambda: new_engine(tiny_model_dir, optim=optimizer_config(**change))  # noqa: E731
    if named is None:
        build()
        return
    with pytest.raises(enginery.EngineryError, match=named):
        build()


def test_a_strategy_verl_would_not_route_to_enginery_is_refused():
    with pytest.raises(enginery.EngineryError, match="strategy = 'fsdp2'.*enginery_fsdp, enginery_fsdp2"):
        EngineryEngineConfig(strategy="fsdp2")


def test_verls_fsdp_engine_config_is_read_for_the_fields_enginery_has(tiny_model_dir):
    """verl's own FSDPEngineConfig, as a user's existing `engine=fsdp` yaml makes it, handed to enginery's backend:
    its fsdp2 strategy names verl's engine, so the backend comes from the registry key, and its other fields follow
    the same rules (reshard_after_forward read, use_torch_compile not read by verl's engine either)."""
    from verl.workers.config import FSDPEngineConfig
    from enginery.verl import LanguageModelEngine
    config = FSDPEngineConfig(strategy="fsdp2", reshard_after_forward=False, use_torch_compile=False,
                              mixed_precision={"param_dtype": "fp32"})
    engine = LanguageModelEngine(model_config=model_config(tiny_model_dir), engine_config=config,
                                 optimizer_config=optimizer_config(), backend="fsdp2", device="cpu")
    engine.initialize()
    assert engine._autocast_dtype == torch.float32


def test_ulysses_size_is_verls_field_and_reaches_the_engine(tiny_model_dir):
    """verl's ulysses_sequence_parallel_size: a field of enginery's config (mutable, as verl's actor config writes
    its deprecated copy into it) and of verl's FSDPEngineConfig, handed to the engine, which refuses a size that
    does not divide the world (one process here) by name; a backend without Ulysses (veomni) refuses it too."""
    from verl.workers.config import FSDPEngineConfig
    from enginery.verl import LanguageModelEngine
    config = EngineryEngineConfig()
    config.ulysses_sequence_parallel_size = 3
    with pytest.raises(enginery.EngineryError, match=r"engine\.fsdp2\.ulysses_sequence_parallel_size.*allowed: 1\)"):
        new_engine(tiny_model_dir, engine=config)
    with pytest.raises(enginery.EngineryError, match=r"engine\.fsdp\.ulysses_sequence_parallel_size.*allowed: 1\)"):
        LanguageModelEngine(model_config=model_config(tiny_model_dir), optimizer_config=optimizer_config(),
                            engine_config=FSDPEngineConfig(strategy="fsdp2", ulysses_sequence_parallel_size=2),
                            backend="fsdp", device="cpu")
    with pytest.raises(enginery.EngineryError, match=r"ulysses_sequence_parallel_size"):
        new_engine(tiny_model_dir, backend="enginery_veomni",
                   engine=EngineryEngineConfig(strategy="enginery_veomni", ulysses_sequence_parallel_size=2))




def test_gradient_checkpointing_policy_is_a_field_of_enginerys_config_and_reaches_the_engine(tiny_model_dir):
    """Selective recomputation inside verl: enginery's engine config carries [engine.<backend>]
    gradient_checkpointing_policy beside verl's enable_gradient_checkpointing switch. With checkpointing on, an SFT
    step under "mlp" (the MLP block recomputed) gives the loss, grad norm and log-probs after the step of "layer" (the
    whole layer, verl's meaning); the engine refuses an unknown policy, and "mlp" without checkpointing, by name."""
    from functools import partial

    import verl_batches
    from test_losses import FP32, PROMPTS, RESPONSES, ppo_batch
    from verl.workers.utils.losses import sft_loss

    def step(policy, checkpointing=True):
        engine = new_engine(tiny_model_dir,
                            model=model_config(tiny_model_dir, enable_gradient_checkpointing=checkpointing),
                            engine=engine_config(strategy="enginery_fsdp2", mixed_precision=FP32,
                                                 gradient_checkpointing_policy=policy),
                            optim=optimizer_config(lr=1e-3, total_training_steps=4))
        engine.initialize()
        with engine.train_mode():
            out = engine.train_batch(verl_batches.sft_batch(PROMPTS, RESPONSES, micro_batch=2),
                                     partial(sft_loss, config=None))
        with engine.eval_mode():
            after = engine.infer_batch(ppo_batch([torch.zeros(len(r)) for r in RESPONSES]))["model_output"]
        return out, [after["log_probs"][row] for row in range(len(PROMPTS))]

    layer, layer_after = step("layer")
    mlp, mlp_after = step("mlp")
    assert mlp["loss"] == pytest.approx(layer["loss"], rel=1e-6)
    assert mlp["metrics"]["grad_norm"] == pytest.approx(layer["metrics"]["grad_norm"], rel=1e-5)
    assert layer["metrics"]["grad_norm"] > 0
    for a, b in zip(mlp_after, layer_after):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    with pytest.raises(enginery.EngineryError,
                       match=r"engine\.fsdp2\.gradient_checkpointing_policy.*unknown policy 'attention'"):
        step("attention")
    with pytest.raises(enginery.EngineryError,
                       match=r"engine\.fsdp2\.gradient_checkpointing_policy.*enable_gradient_checkpointing is false"):
        step("mlp", checkpointing=False)
