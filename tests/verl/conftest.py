"""Fixtures of the tests that drive enginery through verl's own code (verl 0.9 from PyPI, requirements.txt), on the
CPU: a tiny Qwen2 written by transformers (no hub), and verl's config objects for it as verl's workers build them."""
import os

import pytest
import torch

# Where the tests run: "cpu" (make test), or "cuda" (the ctest entries labelled gpu, which skip without CUDA).
DEVICE = os.environ.get("ENGINERY_VERL_DEVICE", "cpu")
# verl has no CPU platform: its registry would look engines up under "cuda" (its fallback) on a machine without a
# GPU. This selects the cpu registrations, as a CPU user of verl does.
if DEVICE == "cpu":
    os.environ.setdefault("VERL_ENGINE_DEVICE", "cpu")

import transformers  # noqa: E402


def pytest_collection_modifyitems(config, items):
    if DEVICE == "cuda" and not torch.cuda.is_available():
        skip = pytest.mark.skip(reason="ENGINERY_VERL_DEVICE=cuda and no CUDA device")
        for item in items:
            item.add_marker(skip)

ENGINE_YAML = os.path.join(os.path.dirname(__import__("enginery.verl").verl.__file__), "conf", "engine",
                           "enginery.yaml")


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """A Qwen2 of two layers in Hugging Face format (config.json + model.safetensors), random weights, seed 0."""
    path = tmp_path_factory.mktemp("tiny_qwen2")
    config = transformers.Qwen2Config(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                      tie_word_embeddings=False)
    torch.manual_seed(0)
    transformers.AutoModelForCausalLM.from_config(config).save_pretrained(path)
    return str(path)


def engine_config(**fields):
    """enginery's engine config as `engine=enginery` gives it: the shipped yaml through verl's
    omega_conf_to_dataclass, with `fields` merged in."""
    from omegaconf import OmegaConf
    from verl.utils.config import omega_conf_to_dataclass
    return omega_conf_to_dataclass(OmegaConf.merge(OmegaConf.load(ENGINE_YAML), fields))


def optimizer_config(**fields):
    """verl's own optimizer yaml (optim/fsdp.yaml -> FSDPOptimizerConfig), `fields` merged in."""
    import verl
    from omegaconf import OmegaConf
    from verl.utils.config import omega_conf_to_dataclass
    yaml = os.path.join(os.path.dirname(verl.__file__), "trainer", "config", "optim", "fsdp.yaml")
    return omega_conf_to_dataclass(OmegaConf.merge(OmegaConf.load(yaml), fields))


def model_config(path, **fields):
    """verl's HFModelConfig of a local directory without a tokenizer; sdpa as verl's own CPU runs need it."""
    from verl.workers.config import HFModelConfig
    return HFModelConfig(path=path, load_tokenizer=False, override_config={"attn_implementation": "sdpa"}, **fields)


def new_engine(path, backend="enginery_fsdp2", model_type="language_model", model=None, engine=None, optim=None):
    """EngineRegistry.new as verl's TrainingWorker calls it."""
    from verl.trainer.config import CheckpointConfig
    from verl.workers.engine.base import EngineRegistry
    return EngineRegistry.new(model_type=model_type, backend=backend,
                              model_config=model if model is not None else model_config(path),
                              engine_config=engine if engine is not None else engine_config(strategy=backend),
                              optimizer_config=optim if optim is not None else optimizer_config(),
                              checkpoint_config=CheckpointConfig())


@pytest.fixture(scope="session")
def tiny_value_model_dir(tmp_path_factory):
    """The same Qwen2 shape as a critic: transformers' token classification with one label (verl's value model)."""
    path = tmp_path_factory.mktemp("tiny_qwen2_value")
    config = transformers.Qwen2Config(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                      tie_word_embeddings=False, num_labels=1)
    torch.manual_seed(1)
    transformers.AutoModelForTokenClassification.from_config(config).save_pretrained(path)
    return str(path)


def one_rank_group():
    """A one-rank process group for verl's workers and engines, as verl's SPMD tests run them (a module fixture:
    `pytest.fixture(scope="module", autouse=True)(one_rank_group)`): Gloo with verl's CPU platform and its fsdp2
    engine registered for the CPU (the control) on the CPU; NCCL on cuda."""
    import socket

    import torch.distributed as dist

    import verl_cpu
    if DEVICE == "cpu":
        verl_cpu.use_cpu_platform()  # before verl's engine modules are imported
        verl_cpu.register_verl_fsdp_on_cpu()
    else:
        torch.cuda.set_device(0)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0", LOCAL_RANK="0", WORLD_SIZE="1")
    dist.init_process_group("gloo" if DEVICE == "cpu" else "nccl")
    yield
    dist.destroy_process_group()
