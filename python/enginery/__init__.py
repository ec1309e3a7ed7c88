"""enginery's C++ training engines, driven from Python (docs/ARCHITECTURE.md, "The contract").

    import enginery, torch.distributed as dist
    dist.init_process_group("gloo")                      # optional: one process needs no group
    enginery.load_plugins()                              # the package's own plugins (and ENGINERY_PLUGIN_PATH)
    engine = enginery.new_engine("language_model", "fsdp", "cpu", {"model.path": "builtin:qwen2-tiny"})
    engine.initialize()
    with engine.train_mode():
        out = engine.train_batch(batch, loss_fn)         # loss_fn(model_output, data[, ctx]) -> (loss, metrics)

Configuration keys are verl's, spelled as the dotted keys of the trainer's TOML file ("engine.micro_batch_size_per_gpu",
"optim.lr", ...), flat or as nested dicts ({"optim": {"lr": 1e-4}}); the same parser reads both, so an unknown
key, a wrong type, or a value the engine does not implement raises EngineryError naming the key.
"""
import os
import sys
import warnings

from . import _build_info
from ._torch_check import import_torch


def _imported_by_the_console_script():
    """Whether this process is the `enginery` console script, the wrapper pip writes (`from enginery._cli import
    main`), which imports this package on its way to _cli. _cli needs torch's version file only and then execs
    bin/enginery: importing torch there (numpy with it) cost over a second per call and failed under a 3 GB
    address-space limit that bin/enginery itself runs in. Read from the wrapper's text, not guessed from its name
    alone: a user's script called `enginery` that imports this package gets all of it."""
    command = sys.argv[0] if getattr(sys, "argv", None) else ""
    if os.path.basename(command) != "enginery":
        return False
    try:
        with open(command, encoding="utf-8", errors="replace") as wrapper:
            return "enginery._cli" in wrapper.read(4096)
    except OSError:
        return False


_FOR_THE_CONSOLE_SCRIPT = _imported_by_the_console_script()

if not _FOR_THE_CONSOLE_SCRIPT:
    # First, and only the torch it was built against (one line saying so otherwise): loads libtorch and registers
    # torch's Python types, which the extension converts to and from.
    try:
        torch = import_torch(_build_info.TORCH_VERSION)
        from ._enginery import (Engine, EngineryError, LossContext, ModeContext, ShardStream,  # noqa: F401
                               WeightBuckets, WeightStream)
    except ImportError as error:
        # A process named `enginery` and `python -m enginery.verl doctor` import this package first (sys.argv[0] is
        # "-m" while Python locates a -m module): there the one line is the whole output, as for the commands'
        # other errors, not the last line of a traceback.
        command = sys.argv[0] if sys.argv else ""
        if os.path.basename(command) == "enginery" or command == "-m":
            raise SystemExit(f"enginery: {error}") from None
        # Imported by `import verl` through the verl.plugins entry point, whose failures verl logs at DEBUG only.
        if getattr(getattr(sys.modules.get("verl"), "__spec__", None), "_initializing", False):
            warnings.warn(f"enginery: its engines were not registered with verl: {error}", RuntimeWarning,
                          stacklevel=2)
        raise

    from . import _enginery  # noqa: E402

__version__ = _build_info.VERSION
__all__ = ["Engine", "EngineryError", "LossContext", "ModeContext", "ShardStream", "WeightBuckets", "WeightStream",
           "load_plugins", "plugins", "new_engine", "engine_config_keys"]


def _get_per_tensor_param(self, dtype=None):
    """Every full weight as (Hugging Face name, tensor), one FSDP unit gathered at a time, in `dtype` (None: fp32,
    the master weights' precision; a rollout engine wants torch.bfloat16). Collective: every rank must exhaust the
    generator. Each tensor is the caller's: no later item reuses its memory and it never aliases the engine's
    weights (host_api/exports.h), so none is copied here; Engine.weight_buckets(dtype, bucket_bytes) packs them into
    flat buffers instead."""
    for group in self.weight_stream(torch.float32 if dtype is None else dtype):
        yield from group


def _local_shards(self, dtype=None):
    """This rank's piece of every weight, nothing gathered (host_api/exports.h): (Hugging Face name, local,
    full_shape, flat_offset), `local` 1-D in `dtype` (None: fp32) holding the elements [flat_offset, flat_offset +
    local.numel()) of the full tensor flattened, possibly none. Every rank yields the same names in the same order;
    Engine.shard_placement says which ranks' pieces make up the full tensors. Not collective. EngineryError for an
    engine without the capability 'shard-export'."""
    for group in self.shard_stream(torch.float32 if dtype is None else dtype):
        yield from group


# Generators are simplest written in Python; the pybind11 class takes them as methods.
if not _FOR_THE_CONSOLE_SCRIPT:
    Engine.get_per_tensor_param = _get_per_tensor_param
    Engine.local_shards = _local_shards


def bundled_plugin_dir():
    """The folder of the plugins installed with this package (<package>/lib/enginery/plugins, as `enginery`'s
    <prefix>/lib/enginery/plugins), or in a build tree (<build>/python/enginery -> <build>/plugins)."""
    here = os.path.dirname(os.path.abspath(__file__))
    installed = os.path.join(here, "lib", "enginery", "plugins")
    return installed if os.path.isdir(installed) else os.path.normpath(os.path.join(here, "..", "..", "plugins"))


def load_plugins(dirs=()):
    """Loads the plugins found in `dirs` (a path or a list; each a plugin folder or a folder of them), then in
    ENGINERY_PLUGIN_PATH, then the package's own (bundled_plugin_dir()). A folder already searched in this process
    is skipped. Returns the names of the plugins loaded; a plugin that fails a check is skipped with a
    RuntimeWarning saying why. A folder of `dirs` that does not exist, or from which no plugin loads, raises
    EngineryError naming it (the other folders' plugins are loaded all the same)."""
    if isinstance(dirs, (str, bytes, os.PathLike)):
        dirs = [dirs]
    report = _enginery._load_plugins([os.fsdecode(d) for d in dirs], bundled_plugin_dir())
    for path, reason in report["rejected"]:
        warnings.warn(f"enginery: plugin at {path} skipped: {reason}", RuntimeWarning, stacklevel=2)
    return list(report["loaded"])


def plugins():
    """Every registered engine: dicts with model_type, backend, device, plugin, manifest, capabilities."""
    return _enginery._plugins()


def engine_config_keys():
    """The dotted keys of new_engine's config that engines read ("engine.mixed_precision.param_dtype", ...; the
    backend tables [engine.<backend>] aside): what a host maps its own configuration onto (enginery.verl)."""
    return list(_enginery._engine_config_keys())


def new_engine(model_type, backend, device="cpu", config=None):
    """Builds the engine registered for (model_type, backend, device) from `config` (verl's keys; None values mean
    the default). Over several processes it uses the default group of torch.distributed.init_process_group, which
    must exist before this call; alone, none is needed. Call initialize() next."""
    values = [(key, value) for key, value in _flatten(config or {}, "").items() if value is not None]
    group, store = _default_group(device)
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    return _enginery._new_engine(model_type, backend, device, values, group, store, local_rank)


def _flatten(config, prefix):
    flat = {}
    for key, value in config.items():
        if not isinstance(key, str):
            raise EngineryError(f"new_engine config: key {key!r} is not a string")
        name = prefix + key
        if isinstance(value, dict):
            flat.update(_flatten(value, name + "."))
        else:
            flat[name] = value
    return flat


def _default_group(device):
    """The caller's default process group as the c10d class the engines talk to, and its store; (None, None) when
    torch.distributed has none."""
    import torch.distributed as dist
    if not (dist.is_available() and dist.is_initialized()):
        return None, None
    from torch.distributed import distributed_c10d
    group = distributed_c10d._get_default_group()
    # The default group dispatches to one backend per device type; the engines talk to that backend
    # (host_api/comm_group.h).
    group = group._get_backend(torch.device(device))
    return group, distributed_c10d._get_default_store()
