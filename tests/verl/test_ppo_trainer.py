"""verl's PPO trainer configuration and workers driving enginery, as `python -m verl.trainer.main_ppo` would, on the
CPU in one process (no Ray: ray.init cannot run here) over a one-rank Gloo group with verl's CPU platform
(verl_cpu.py); verl's own fsdp2 engine runs the same flow as the control, and every assertion but the
enginery-only ones runs on both.

How a verl 0.9.1 user picks enginery for PPO: verl's engine workers take the backend from `actor.strategy` /
`critic.strategy` (verl's docs/workers/engine_workers.rst, "Backend Selection"). With verl's default
`model_engine=dp`, the actor, ref and critic sections are verl's FSDPActorConfig / FSDPCriticConfig, whose
__post_init__ copies that strategy into their engine section (actor.fsdp_config, ref.fsdp_config, critic.fsdp, each
verl's FSDPEngineConfig), and the worker's EngineRegistry.new looks the backend up by it; the ref's strategy follows
the actor's (ref.yaml: `strategy: ${actor_rollout_ref.actor.strategy}`). No config group is needed:

    python -m verl.trainer.main_ppo actor_rollout_ref.actor.strategy=enginery_fsdp2 critic.strategy=enginery_fsdp2 \
        '+actor_rollout_ref.actor.fsdp_config.mixed_precision={param_dtype: bf16, ...}' ...

(`engine=enginery`, the shipped conf/engine/enginery.yaml, is for verl's SFT trainer, whose config has an `engine`
group; ppo_trainer.yaml has none. Precision goes where verl's FSDP engine reads it: fsdp_config.mixed_precision,
ref.fsdp_config.mixed_precision, critic.fsdp.mixed_precision.)

The config is composed as main_ppo composes it (hydra compose of verl/trainer/config/ppo_trainer.yaml, then its
validate_config); the workers are built as verl's PPO trainer builds them (trainer/ppo/v1/trainer_base.py):
ActorRolloutRefWorker(config.actor_rollout_ref, role=...).init_model(), and for the critic a TrainingWorker of a
TrainingWorkerConfig made from the CriticConfig, reset(), set_loss_fn(value_loss). Without vLLM/SGLang the rollout
cannot be built, so the actor is verl's role "actor" (Role.Actor, what verl's v1 trainer builds when the rollout is
not colocated) and the rollout's output is a fixed batch of prompts and responses. The calls and the batches around
them are verl's trainer's (trainer/ppo/ray_trainer.py: DataProto -> to_tensordict -> left_right_2_no_padding ->
non-tensor metadata -> worker -> no_padding_2_padding), the advantages verl's GAE (core_algos).

The PPO step (verl's defaults: GAE with a critic, no KL, so no reference policy) checks, fp32:
- the engines built are the backend's registered classes (for enginery: those `import verl` registered through
  enginery's `verl.plugins` entry point), with the configured strategy, fp32 compute (_autocast_dtype) and the lr in
  the optimizer's param_groups;
- the actor's log-probs and entropy (compute_log_prob) and the critic's values (infer_batch) equal verl's fsdp2's;
- update_critic and update_actor (train_mini_batch over one mini-batch of two micro-batches) change every weight,
  report the metrics verl's reports (names, and loss, grad norm, lr, the losses' own values), and leave models whose
  weights, log-probs and values equal verl's.
With `actor.use_kl_loss=True` verl's trainer adds the reference policy (role "ref", its engine forward_only, as
ref/dp_ref.yaml sets it): its compute_ref_log_prob equals the actor's compute_log_prob before the update, bitwise.

Against older enginery: the lr check reads engine.optimizer.param_groups, which the adapter lacked before its
optimizer view (AttributeError in test_the_engines_have_the_configured_backend_precision_and_lr[enginery_fsdp2]).
The reference-policy test failed while enginery's FSDP engines refused engine.forward_only = true (the ref's engine
config): verl's PPO with a KL term could not build its reference policy on enginery."""
import os
from functools import partial

import pytest
import torch
from conftest import one_rank_group

FP32 = "{param_dtype: fp32, reduce_dtype: fp32, buffer_dtype: fp32}"
LR, CRITIC_LR = 1e-3, 1e-3
# The rollout's output: four rows of prompt (verl left-pads it) and response (right-padded), a reward each.
PROMPTS = [[5, 9, 3], [7, 2], [11, 4, 6, 8], [1, 17]]
RESPONSES = [[12, 30, 7, 2], [40, 3], [9, 9, 21], [6, 50, 8, 8, 2]]
REWARDS = [1.0, -0.5, 0.25, 0.75]

cpu_process_group = pytest.fixture(scope="module", autouse=True)(one_rank_group)


@pytest.fixture(scope="module", autouse=True)
def verl_fsdp2_on_the_cpu():
    """What the CPU forces on the control, verl's fsdp2 engine: its ref (forward_only) shards with
    CPUOffloadPolicy(pin_memory=True), and pinning needs a CUDA driver, so the policy stays without the pinning;
    its value model is loaded with attn_implementation="flash_attention_2" (verl/utils/model.py,
    load_valuehead_model), not installed here, so it is loaded the same way with sdpa, the attention the
    override_config below selects for its models."""
    import transformers
    from torch.distributed.fsdp import CPUOffloadPolicy
    from verl.utils import model as verl_model
    from verl.workers.engine.fsdp import transformer_impl

    def load_valuehead_model(local_path, torch_dtype, model_config, trust_remote_code):
        return transformers.AutoModelForTokenClassification.from_pretrained(
            local_path, torch_dtype=torch_dtype, config=model_config, attn_implementation="sdpa",
            trust_remote_code=trust_remote_code)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(transformer_impl, "CPUOffloadPolicy", lambda pin_memory=True: CPUOffloadPolicy(pin_memory=False))
        patch.setattr(verl_model, "load_valuehead_model", load_valuehead_model)
        yield


def compose(strategy, model_dir, value_dir, *extra):
    """ppo_trainer.yaml as main_ppo's hydra.main composes it, with what a user sets on the command line; then
    verl's validate_config, as main_ppo runs it."""
    import verl
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config
    overrides = [
        f"actor_rollout_ref.model.path={model_dir}", f"critic.model.path={value_dir}",
        f"actor_rollout_ref.actor.strategy={strategy}", f"critic.strategy={strategy}",
        f"+actor_rollout_ref.actor.fsdp_config.mixed_precision={FP32}",
        f"+actor_rollout_ref.ref.fsdp_config.mixed_precision={FP32}", f"+critic.fsdp.mixed_precision={FP32}",
        # verl's default attention, flash_attention_2, is not installed on the CPU; enginery has its own.
        "+actor_rollout_ref.model.override_config.attn_implementation=sdpa",
        "+critic.model.override_config.attn_implementation=sdpa",
        f"actor_rollout_ref.actor.optim.lr={LR}", f"critic.optim.lr={CRITIC_LR}",
        "data.train_batch_size=4", "actor_rollout_ref.rollout.n=1", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=2", "critic.ppo_micro_batch_size_per_gpu=2",
        "trainer.n_gpus_per_node=1", "trainer.nnodes=1", "trainer.device=cpu", *extra]
    config_dir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        config = hydra_compose(config_name="ppo_trainer", overrides=overrides)
    validate_config(config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
    return config


def critic_worker(config):
    """The critic as verl's PPO trainer builds it: a TrainingWorker for the value model from its CriticConfig."""
    from verl.utils.config import omega_conf_to_dataclass
    from verl.workers.config import CriticConfig
    from verl.workers.engine_workers import TrainingWorker, TrainingWorkerConfig
    from verl.workers.utils.losses import value_loss
    critic_cfg: CriticConfig = omega_conf_to_dataclass(config.critic)
    critic_cfg.engine.infer_max_token_len_per_gpu = critic_cfg.ppo_infer_max_token_len_per_gpu
    critic_cfg.engine.max_token_len_per_gpu = critic_cfg.ppo_max_token_len_per_gpu
    worker = TrainingWorker(TrainingWorkerConfig(
        model_type="value_model", model_config=critic_cfg.model, engine_config=critic_cfg.engine,
        optimizer_config=critic_cfg.optim, checkpoint_config=critic_cfg.checkpoint))
    worker.reset()
    worker.set_loss_fn(partial(value_loss, config=critic_cfg))
    return worker


def rollout_batch(temperature=1.0):
    """What the rollout hands the trainer: a DataProto of left-padded prompts, right-padded responses, their
    attention mask, position ids and response mask, the sampling temperature in its meta_info."""
    from verl.protocol import DataProto
    rows, p_len, r_len = len(PROMPTS), max(map(len, PROMPTS)), max(map(len, RESPONSES))
    prompts = torch.zeros(rows, p_len, dtype=torch.long)
    responses = torch.zeros(rows, r_len, dtype=torch.long)
    attention = torch.zeros(rows, p_len + r_len, dtype=torch.long)
    for i, (p, r) in enumerate(zip(PROMPTS, RESPONSES)):
        prompts[i, p_len - len(p):] = torch.tensor(p)
        responses[i, :len(r)] = torch.tensor(r)
        attention[i, p_len - len(p):p_len + len(r)] = 1
    return DataProto.from_dict(
        tensors={"prompts": prompts, "responses": responses, "input_ids": torch.cat([prompts, responses], -1),
                 "attention_mask": attention, "position_ids": (attention.cumsum(-1) - 1).clamp(min=0),
                 "response_mask": attention[:, p_len:].float()},
        meta_info={"temperature": temperature})


# The positions of the response tokens in verl's (rows, longest response) layout, those the asserts compare.
RESPONSE_TOKENS = torch.tensor([[t < len(r) for t in range(max(map(len, RESPONSES)))] for r in RESPONSES])


def no_padding(batch, **metadata):
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.padding import left_right_2_no_padding
    data = left_right_2_no_padding(batch.to_tensordict())
    tu.assign_non_tensor(data, **metadata)
    return data


def padded(output, key, data):
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.padding import no_padding_2_padding
    return no_padding_2_padding(tu.get(output, key), data).float()


def weights(engine):
    generator, _ = engine.get_per_tensor_param()
    return {name: tensor.detach().clone().float() for name, tensor in generator}


def run_ppo_step(strategy, model_dir, value_dir):
    """One PPO step of verl's trainer over the workers: old log-probs, values, GAE, update_critic, update_actor;
    then the log-probs and values of the updated models on the same batch."""
    from verl.trainer.ppo.core_algos import compute_gae_advantage_return
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils import tensordict_utils as tu
    from verl.workers.engine_workers import ActorRolloutRefWorker
    config = compose(strategy, model_dir, value_dir)
    assert need_critic(config) and not need_reference_policy(config)  # verl's defaults: GAE, no KL
    actor = ActorRolloutRefWorker(config=config.actor_rollout_ref, role="actor")
    actor.init_model()
    critic = critic_worker(config)
    batch = rollout_batch(config.actor_rollout_ref.rollout.temperature)
    run = {"strategy": strategy, "actor": actor, "critic": critic,
           "actor_weights": weights(actor.actor.engine), "critic_weights": weights(critic.engine)}

    def log_probs(entropy):
        data = no_padding(batch, calculate_entropy=entropy, compute_loss=False)
        output = actor.compute_log_prob(data)
        return padded(output, "log_probs", data), padded(output, "entropy", data) if entropy else None

    def values():
        data = no_padding(batch, compute_loss=False)
        return padded(critic.infer_batch(data), "values", data)

    run["old_log_probs"], run["entropy"] = log_probs(entropy=True)
    run["values"] = values()

    mask = batch.batch["response_mask"]
    rewards = torch.zeros_like(mask)  # the reward on each response's last token
    rewards[torch.arange(len(REWARDS)), mask.sum(-1).long() - 1] = torch.tensor(REWARDS)
    advantages, returns = compute_gae_advantage_return(rewards, run["values"], mask, config.algorithm.gamma,
                                                       config.algorithm.lam)
    batch.batch.update({"old_log_probs": run["old_log_probs"], "values": run["values"], "advantages": advantages,
                        "returns": returns})

    critic_config, actor_config = config.critic, config.actor_rollout_ref.actor
    mini_batch = critic_config.ppo_mini_batch_size * config.actor_rollout_ref.rollout.n
    run["critic_metrics"] = tu.get(critic.train_mini_batch(no_padding(
        batch, global_batch_size=mini_batch, mini_batch_size=mini_batch, epochs=critic_config.ppo_epochs,
        seed=critic_config.data_loader_seed, dataloader_kwargs={"shuffle": critic_config.shuffle})), "metrics")
    mini_batch = actor_config.ppo_mini_batch_size * config.actor_rollout_ref.rollout.n
    run["actor_metrics"] = tu.get(actor.update_actor(no_padding(
        batch, calculate_entropy=actor_config.calculate_entropy or actor_config.entropy_coeff != 0.0,
        distillation_use_topk=False, distillation_only=False, global_batch_size=mini_batch,
        mini_batch_size=mini_batch, epochs=actor_config.ppo_epochs, seed=actor_config.data_loader_seed,
        dataloader_kwargs={"shuffle": actor_config.shuffle}, compute_loss=True)), "metrics")

    run["trained_actor_weights"] = weights(actor.actor.engine)
    run["trained_critic_weights"] = weights(critic.engine)
    run["new_log_probs"], _ = log_probs(entropy=False)
    run["new_values"] = values()
    return run


@pytest.fixture(scope="module")
def verl_run(tiny_model_dir, tiny_value_model_dir):
    return run_ppo_step("fsdp2", tiny_model_dir, tiny_value_model_dir)


@pytest.fixture(scope="module")
def enginery_run(tiny_model_dir, tiny_value_model_dir):
    return run_ppo_step("enginery_fsdp2", tiny_model_dir, tiny_value_model_dir)


@pytest.fixture(params=["fsdp2", "enginery_fsdp2"])
def either_run(request):
    return request.getfixturevalue("verl_run" if request.param == "fsdp2" else "enginery_run")


def test_enginerys_engines_are_those_its_entry_point_registered(enginery_run):
    import sys

    import enginery.verl
    assert "enginery.verl.plugin" in sys.modules  # imported by verl's loader of `verl.plugins` entry points
    registered = enginery.verl.register()  # idempotent: the classes registered at `import verl`
    assert type(enginery_run["actor"].actor.engine) is registered["language_model"]
    assert type(enginery_run["critic"].engine) is registered["value_model"]
    assert issubclass(registered["language_model"], enginery.verl.LanguageModelEngine)
    assert issubclass(registered["value_model"], enginery.verl.ValueModelEngine)


def test_the_engines_have_the_configured_backend_precision_and_lr(either_run):
    from verl.workers.engine.base import EngineRegistry
    strategy = either_run["strategy"]
    for worker, model_type, lr in ((either_run["actor"].actor, "language_model", LR),
                                   (either_run["critic"], "value_model", CRITIC_LR)):
        assert type(worker.engine) is EngineRegistry.get_engine_cls(model_type, strategy)
        assert worker.engine_config.strategy == strategy and worker.engine_config.forward_only is False
        assert worker.engine._autocast_dtype == torch.float32
        assert [group["lr"] for group in worker.engine.optimizer.param_groups] == [pytest.approx(lr)]


def test_log_probs_entropy_and_values_equal_verls_fsdp2(verl_run, enginery_run):
    for key in ("old_log_probs", "entropy", "values"):
        torch.testing.assert_close(enginery_run[key][RESPONSE_TOKENS], verl_run[key][RESPONSE_TOKENS],
                                   rtol=1e-5, atol=1e-5, msg=key)
    assert (verl_run["old_log_probs"][RESPONSE_TOKENS] < 0).all()


def test_one_update_changes_every_weight(either_run):
    for before, after in (("actor_weights", "trained_actor_weights"), ("critic_weights", "trained_critic_weights")):
        assert set(either_run[before]) == set(either_run[after])
        for name, tensor in either_run[before].items():
            assert not torch.equal(tensor, either_run[after][name]), f"{after}: {name} was not trained"
    for before, after in (("old_log_probs", "new_log_probs"), ("values", "new_values")):
        assert not torch.equal(either_run[before][RESPONSE_TOKENS], either_run[after][RESPONSE_TOKENS]), after


def test_the_update_equals_verls_fsdp2(verl_run, enginery_run):
    """train_mini_batch's metrics (its worker's loss, grad_norm, lr; the loss functions' own pg/vf losses, kl, clip
    fractions), then the updated weights, and the log-probs and values of the updated models on the same batch."""
    from verl.utils.metric import reduce_metrics
    for key in ("actor_metrics", "critic_metrics"):
        got, want = reduce_metrics(dict(enginery_run[key])), reduce_metrics(dict(verl_run[key]))
        assert set(got) == set(want), key
        for name, value in want.items():
            if not name.startswith("perf/"):
                # The actor's losses are ~1e-7 (GAE whitens the advantages and the ratio is 1): hence abs.
                assert got[name] == pytest.approx(value, rel=1e-4, abs=1e-6), (key, name)
        assert got["lr"] == pytest.approx(LR if key == "actor_metrics" else CRITIC_LR)
    for key in ("trained_actor_weights", "trained_critic_weights"):
        assert set(enginery_run[key]) == set(verl_run[key])
        for name, tensor in verl_run[key].items():
            torch.testing.assert_close(enginery_run[key][name], tensor, rtol=1e-5, atol=1e-5, msg=f"{key}: {name}")
    for key in ("new_log_probs", "new_values"):
        torch.testing.assert_close(enginery_run[key][RESPONSE_TOKENS], verl_run[key][RESPONSE_TOKENS],
                                   rtol=1e-5, atol=1e-5, msg=key)


def test_the_reference_policy_equals_the_actor_before_the_update(either_run, tiny_model_dir, tiny_value_model_dir):
    """actor.use_kl_loss=True: verl's trainer then builds the reference policy, ActorRolloutRefWorker role "ref"
    (its TrainingWorker's engine forward_only, from ref/dp_ref.yaml), on the actor's model; its
    compute_ref_log_prob, with the metadata verl's trainer sets, gives the actor's log-probs of that batch."""
    from verl.trainer.ppo.utils import need_reference_policy
    from verl.workers.engine.base import EngineRegistry
    from verl.workers.engine_workers import ActorRolloutRefWorker
    strategy = either_run["strategy"]
    config = compose(strategy, tiny_model_dir, tiny_value_model_dir, "actor_rollout_ref.actor.use_kl_loss=True")
    assert need_reference_policy(config)
    ref = ActorRolloutRefWorker(config=config.actor_rollout_ref, role="ref")
    ref.init_model()
    assert type(ref.ref.engine) is EngineRegistry.get_engine_cls("language_model", strategy)
    assert ref.ref.engine_config.strategy == strategy and ref.ref.engine_config.forward_only is True
    assert ref.ref.engine._autocast_dtype == torch.float32
    data = no_padding(rollout_batch(config.actor_rollout_ref.rollout.temperature), calculate_entropy=False,
                      compute_loss=False)
    ref_log_prob = padded(ref.compute_ref_log_prob(data), "log_probs", data)
    assert torch.equal(ref_log_prob[RESPONSE_TOKENS], either_run["old_log_probs"][RESPONSE_TOKENS])
