"""An enginery engine behind verl's BaseEngine methods (verl/workers/engine/base.py): what verl's workers call, with
verl's data layout (layout.py), loss-function signature and result structure. docs/ARCHITECTURE.md, "The contract".
"""
import math
import warnings

import torch
from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

import enginery

from . import layout
from .config import FLAT_BACKEND_OPTIONS
from .config import error as _error
from .config import section as _section
from .layout import LayoutError

BACKEND_PREFIX = "enginery_"


def backend_of(strategy):
    """verl's backend name (enginery_fsdp) -> the enginery backend (fsdp)."""
    if not isinstance(strategy, str) or not strategy.startswith(BACKEND_PREFIX):
        raise _error(f"'{strategy}'", "engine_config.strategy", BACKEND_PREFIX + "<backend>, e.g. enginery_fsdp")
    return strategy[len(BACKEND_PREFIX):]


# verl's BaseEngineCtx keyword arguments (verl/workers/engine/base.py): what train_mode() / eval_mode() take. The
# engine's mode guards implement them (engine_driver/mode_guard.h): the mode, zeroing on exit, offload_outside_modes.
_MODE_KWARGS = ("zero_grad_on_exit", "disable_auto_offload")


def _mode_kwargs(kwargs, where):
    unknown = sorted(set(kwargs) - set(_MODE_KWARGS))
    if unknown:
        raise _error(f"{where}({', '.join(unknown)}=...) is not a verl context argument", f"enginery.verl {where}",
                     ", ".join(_MODE_KWARGS))
    return {key: bool(value) for key, value in kwargs.items()}


class EngineryVerlEngine:
    """verl's BaseEngine method set over an enginery engine. Constructed as verl's EngineRegistry constructs
    engines: EngineRegistry.new(model_type, "enginery_fsdp", model_config=..., engine_config=...,
    optimizer_config=..., checkpoint_config=...). Configs are dicts of enginery's keys (model.*, engine.*, optim.*,
    checkpoint.*, by section) or verl's config dataclasses. The process group is torch.distributed's default one."""

    model_type = None  # set by the subclasses: verl passes it to the registry, not to the constructor

    def __init__(self, model_config=None, engine_config=None, optimizer_config=None, checkpoint_config=None, *,
                 device=None, plugin_dirs=(), backend=None):
        # verl's trainers fill in some fields after construction (the SFT trainer sets
        # optimizer_config.total_training_steps), and its engines read their configs in initialize(): so does this
        # one, building the engine again there when a section changed. Built here too, so that a bad config stops
        # before any work.
        self._configs = {"model": model_config, "engine": engine_config, "optim": optimizer_config,
                         "checkpoint": checkpoint_config}
        sections = self._sections()
        strategy = sections["engine"].pop("strategy", None)
        self.backend = backend if backend is not None else backend_of(strategy or BACKEND_PREFIX + "fsdp")
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        enginery.load_plugins(list(plugin_dirs))
        device_type = self.device.split(":")[0]
        capabilities = {c for e in enginery.plugins() for c in e["capabilities"]
                        if (e["model_type"], e["backend"], e["device"]) == (self.model_type, self.backend, device_type)}
        self._exports_shards = "shard-export" in capabilities
        self._delta_shard_snap = {}  # HF name -> this rank's piece as last exported (prime_delta_snapshots)
        self._built_from = self._sections()
        self._engine = self._new_engine(sections)

    def _sections(self):
        return {name: _section(config, name) for name, config in self._configs.items()}

    def _new_engine(self, sections):
        sections = {name: dict(values) for name, values in sections.items()}
        sections["engine"].pop("strategy", None)
        # The backend options verl's engine config carries flat go to [engine.<backend>]. Each at its off value (of
        # its own type: True is not a size 1) is left out, so that a backend without the option accepts verl's
        # default.
        flat = {key: sections["engine"].pop(key) for key in FLAT_BACKEND_OPTIONS if key in sections["engine"]}
        for key, off in FLAT_BACKEND_OPTIONS.items():
            if key in flat and type(flat[key]) is type(off) and flat[key] == off:
                del flat[key]
        if flat:
            sections["engine"][self.backend] = {**sections["engine"].get(self.backend, {}), **flat}
        self._data_parallel = None  # built by initialize() (collective)
        return enginery.new_engine(self.model_type, self.backend, self.device, sections)

    # --- lifecycle and modes ---
    def initialize(self):
        now = self._sections()
        if now != self._built_from:
            self._engine = self._new_engine(now)
            self._built_from = now
        self._engine.initialize()
        self._data_parallel = _data_parallel_group(self._engine.get_data_parallel_size())

    def train_mode(self, **kwargs):
        """verl's train context: train_mode(zero_grad_on_exit=True, disable_auto_offload=False)."""
        return self._engine.train_mode(**_mode_kwargs(kwargs, "train_mode"))

    def eval_mode(self, **kwargs):
        """verl's eval context: eval_mode(disable_auto_offload=False); it never zeroes gradients."""
        kwargs = _mode_kwargs(kwargs, "eval_mode")
        kwargs.pop("zero_grad_on_exit", None)
        return self._engine.eval_mode(**kwargs)

    @property
    def mode(self):
        """verl's engine.mode: "train" or "eval" inside a context, None outside any."""
        return self._engine.mode

    @property
    def _offload_outside_modes(self):
        engine = self._built_from["engine"]
        return bool(engine.get("offload_outside_modes", engine.get(self.backend, {}).get("offload_outside_modes")))

    # engine.param_offload / engine.optimizer_offload keep that state in host memory for the whole run (the engine
    # brings units to the GPU as it needs them); engine_config offload_outside_modes moves the rest away between
    # phases (the engine's mode guards), else that is the caller's to().
    @property
    def is_param_offload_enabled(self):
        return bool(self._built_from["engine"].get("param_offload", False))

    @property
    def is_optimizer_offload_enabled(self):
        return bool(self._built_from["engine"].get("optimizer_offload", False))

    # --- precision, as verl's FSDP engine exposes it (verl's tests read these two) ---
    @property
    def _autocast_dtype(self):
        """The dtype the forward computes in: engine.mixed_precision.param_dtype (torch.float32: no autocast)."""
        return _TORCH_DTYPES[self._engine.precision["param_dtype"]]

    @property
    def scaler(self):
        """fp16: torch's ShardedGradScaler over the engine's own sharded scaler (EngineryGradScaler); bf16 and fp32:
        None, as verl's FSDP engine."""
        if self._engine.precision["grad_scaler"] is None:
            return None
        return EngineryGradScaler(self._engine, self.device.split(":")[0])

    # --- what verl's code reads off an FSDP engine: its module and its optimizer ---
    @property
    def module(self):
        """An nn.Module over this rank's parameters, built afresh on each access (the engine may replace the
        storage between steps): named_parameters() gives each Hugging Face name with this rank's piece of the fp32
        master weights, sharing the engine's storage (a write changes the model), and .grad this rank's piece of
        its gradient, or None while the engine holds none (after zero grad), as FSDP2's to_local() views read.
        Pieces of whole rows keep the rows' shape; the flat layout's are 1-D. Needs the capability 'train-state'."""
        return _local_module(self._engine.local_parameters())

    @property
    def optimizer(self):
        """The engine's AdamW as torch.optim sees one: param_groups (one group) of lr, betas, eps and weight_decay,
        written through to the engine for its next optimizer_step, and zero_grad(). Needs 'train-state'. None on
        a forward-only engine (verl's reference policy), which has none, as verl's."""
        if self._built_from["engine"].get("forward_only", False):
            return None
        return EngineryOptimizer(self)

    # --- steps ---
    def forward_backward_batch(self, data, loss_function, forward_only=False):
        """verl's forward_backward_batch: {"model_output": {name: per-row outputs in the batch's layout and row
        order}, "loss": [one float per micro-batch], "metrics": {name: [one value per micro-batch]}}."""
        try:
            call = _Call(self, data, loss_function, forward_only)
        except LayoutError as e:
            raise _error(e.what, "enginery.verl forward_backward_batch", e.allowed) from None
        out = self._engine.forward_backward_batch(call.batch, call.engine_loss if loss_function else None,
                                                  forward_only)
        return call.result(out)

    def train_batch(self, data, loss_function):
        """verl's train_batch: zero grad, forward and backward, optimizer step; metrics["grad_norm"] is the norm. The
        learning rate steps in lr_scheduler_step(), which verl's workers call themselves."""
        self.optimizer_zero_grad()
        outputs = self.forward_backward_batch(data, loss_function, forward_only=False)
        grad_norm = self.optimizer_step()
        if self.is_mp_src_rank_with_outputs():
            outputs["metrics"]["grad_norm"] = grad_norm
        return outputs

    def infer_batch(self, data, loss_function=None):
        with torch.no_grad():
            return self.forward_backward_batch(data, loss_function, forward_only=True)

    def optimizer_zero_grad(self):
        self._engine.optimizer_zero_grad()

    def optimizer_step(self):
        """The grad norm before clipping (a float); not finite: the step was skipped on every rank."""
        return self._engine.optimizer_step()

    def lr_scheduler_step(self):
        return self._engine.lr_scheduler_step()

    # --- weights, state, topology ---
    def get_per_tensor_param(self, dtype=None, **kwargs):
        """(generator of (HF name, full tensor), None): verl's pair, the second being the PEFT config enginery never
        has. Collective: every rank must exhaust the generator. With offload_outside_modes, outside the contexts
        the model comes to the GPU for the export and goes back once the generator is exhausted, as verl's engine
        loads an offloaded model for its weight sync."""
        return self._model_home(lambda: self._engine.get_per_tensor_param(dtype)), None

    def _model_home(self, tensors):
        away = self._offload_outside_modes and self.mode is None
        if away:
            self._engine.to(self.device, True, False, False)
        try:
            yield from tensors()
        finally:
            if away:
                self._engine.to("cpu", True, False, False)

    # verl's BaseEngine default: the delta diff base in pinned host memory where CUDA is available.
    delta_pin_snapshots = True

    def get_per_tensor_param_shard(self, dtype=None, **kwargs):
        """(generator of (HF name, this rank's piece, verl ShardSpec), None), nothing gathered: verl's shard export
        (verl/workers/engine/spec.py), in `dtype` (None: bf16, what verl's FSDP engine exports and the rollout
        loads). enginery's shards are flat ranges, so each spec carries the explicit placement spec.py provides for
        geometries beyond DTensor's: place = the piece's flat offset in the full tensor, gather_group = the
        process group of the ranks whose pieces make it up (None where this rank's piece is the whole tensor),
        contributes = False on an HSDP replica. The first call on an HSDP engine creates its groups: collective.
        An engine without the capability 'shard-export' yields its full tensors from get_per_tensor_param with
        specs of no placement, which spec.py defines as "the local tensor already is the whole parameter" (rank 0
        contributes): correct, but every rank gathers and holds full tensors; a RuntimeWarning says so once."""
        from verl.workers.engine.spec import ShardSpec
        dtype = torch.bfloat16 if dtype is None else dtype
        if not self._exports_shards:
            self._warn_full_tensor_shards()
            full, _ = self.get_per_tensor_param(dtype)
            return ((name, t.reshape(-1), ShardSpec(full_shape=tuple(t.shape))) for name, t in full), None
        placement = self._engine.shard_placement
        group = self._gather_group(placement["group_ranks"])
        contributes = placement["contributes"]
        return ((name, local, ShardSpec(full_shape=tuple(shape), place=int(offset), gather_group=group,
                                        contributes=contributes))
                for name, local, shape, offset in self._engine.local_shards(dtype)), None

    def prime_delta_snapshots(self):
        """Snapshots this rank's pieces (get_per_tensor_param_shard's, bf16) as the diff base of the next
        get_per_tensor_param_delta_shard, through verl's own helper, as verl's BaseEngine does. verl's delta
        checkpoint engine calls it right after the seed sync of get_per_tensor_param's full weights."""
        from verl.utils.device import is_cuda_available
        from verl.workers.engine.utils import prime_delta_snapshots
        gen, _ = self.get_per_tensor_param_shard()
        prime_delta_snapshots(gen, self._delta_shard_snap, pin=is_cuda_available and self.delta_pin_snapshots)

    def get_per_tensor_param_delta_shard(self, **kwargs):
        """(generator of verl's delta entries (slots, dtype_str, counts, hf_idx, hf_val, gather_group), None): the
        elements of this rank's pieces whose bf16 bytes changed since the last prime_delta_snapshots or delta
        export, at their flat positions in the full HF tensors, through verl's hf_delta_export (which also makes
        these pieces the next diff base). Every rank yields one entry per HF name, in the same order."""
        from verl.workers.engine.utils import hf_delta_export
        if not self._delta_shard_snap:
            raise _error("no snapshot of the weights to diff against", "enginery.verl get_per_tensor_param_delta_shard",
                         "prime_delta_snapshots() first (verl's delta checkpoint engine calls it after the seed sync)")
        gen, _ = self.get_per_tensor_param_shard()
        return hf_delta_export(gen, self._delta_shard_snap, _hf_delta_entry), None

    def _warn_full_tensor_shards(self):
        if not getattr(self, "_warned_full_tensor_shards", False):
            self._warned_full_tensor_shards = True
            warnings.warn(f"enginery.verl: engine {self.backend} ({self.model_type}) lacks the capability "
                          "'shard-export': get_per_tensor_param_shard yields full tensors (every rank gathers them)",
                          RuntimeWarning, stacklevel=3)

    def _gather_group(self, ranks):
        """The torch.distributed group of `ranks` (world ranks): None for this rank alone, the default group for all
        of them, else a group made by every rank at once for each distinct rank set (all_gather_object first, so
        every rank creates the same groups in the same order), cached."""
        import torch.distributed as dist
        ranks = tuple(ranks)
        if len(ranks) == 1:
            return None
        if ranks == tuple(range(dist.get_world_size())):
            return dist.group.WORLD
        groups = getattr(self, "_gather_groups", None)
        if groups is None:
            every = [None] * dist.get_world_size()
            dist.all_gather_object(every, ranks)
            groups = self._gather_groups = {r: dist.new_group(list(r)) for r in sorted(set(every))}
        return groups[ranks]

    def to(self, device, model=True, optimizer=True, grad=True):
        if not model and (optimizer or grad):
            raise _error("optimizer or grad moved without the model", "enginery.verl to", "model=True with them")
        self._engine.to(device, model=model, optimizer=optimizer, grad=grad)

    def save_checkpoint(self, local_path, hdfs_path=None, global_step=0, max_ckpt_to_keep=None, **kwargs):
        _no_hdfs(hdfs_path, "save_checkpoint")
        self._engine.save_checkpoint(local_path, global_step, max_ckpt_to_keep)

    def load_checkpoint(self, local_path, hdfs_path=None, del_local_after_load=True, **kwargs):
        # del_local_after_load deletes verl's local copy of an HDFS checkpoint; with no HDFS there is no copy.
        _no_hdfs(hdfs_path, "load_checkpoint")
        self._engine.load_checkpoint(local_path)

    def get_data_parallel_rank(self):
        return self._engine.get_data_parallel_rank()

    def get_data_parallel_size(self):
        return self._engine.get_data_parallel_size()

    def get_data_parallel_group(self):
        """torch.distributed's default group, which the engine was built on, or with Ulysses sequence parallelism
        one rank of each sequence group (as verl's engine's "dp" mesh dimension); None without torch.distributed."""
        import torch.distributed as dist
        if not (dist.is_available() and dist.is_initialized()):
            return None
        return self._data_parallel if self._data_parallel is not None else dist.group.WORLD

    def is_mp_src_rank_with_outputs(self):
        """True on the first rank of each Ulysses sequence group (all of whose ranks hold the same outputs), as
        verl's engine; on every rank without it."""
        import torch.distributed as dist
        if not (dist.is_available() and dist.is_initialized()):
            return True
        return dist.get_rank() % (dist.get_world_size() // self._engine.get_data_parallel_size()) == 0


def _data_parallel_group(data_parallel_size):
    """With Ulysses sequence parallelism (world / data_parallel_size ranks per sequence group of consecutive ranks),
    the torch.distributed group of this rank's data-parallel peers, the ranks r with r % size == this rank % size
    (what the engine's own host loop counts tokens over); None without it. Collective: every rank builds every
    group, as torch.distributed.new_group requires."""
    import torch.distributed as dist
    if not (dist.is_available() and dist.is_initialized()):
        return None
    world = dist.get_world_size()
    size = world // data_parallel_size
    if size == 1:
        return None
    mine = None
    for first in range(size):
        group = dist.new_group(list(range(first, world, size)))
        if dist.get_rank() % size == first:
            mine = group
    return mine


def _hf_delta_entry(name, spec, place, lidx, lval):
    """verl's delta entry of an identity parameter (the HF tensor itself is the one slot): the changed elements'
    positions in the full tensor (int32, the wire's type) and their values."""
    from verl.workers.engine.spec import translate_flat_indices
    hf_idx = translate_flat_indices(lidx, place).to(torch.int32)
    counts = torch.tensor([hf_idx.numel()], dtype=torch.int64)
    return [(name, tuple(spec.full_shape))], str(lval.dtype).replace("torch.", ""), counts, hf_idx, lval


_TORCH_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def _rows(piece, full_shape, offset):
    """A piece of whole rows in their shape (FSDP2's dim-0 shards); any other piece as it is (1-D)."""
    row = math.prod(full_shape[1:]) if len(full_shape) > 1 else 1
    if len(full_shape) == 0 or offset % row or piece.numel() % row:
        return piece
    return piece.view(piece.numel() // row, *full_shape[1:])


def _local_module(pieces):
    root = torch.nn.Module()
    for name, full_shape, offset, piece, grad in pieces:
        *path, leaf = name.split(".")
        module = root
        for part in path:
            if part not in module._modules:
                module.add_module(part, torch.nn.Module())
            module = module._modules[part]
        parameter = torch.nn.Parameter(_rows(piece, full_shape, offset))  # shares the piece's storage
        if grad is not None:
            parameter.grad = _rows(grad, full_shape, offset)
        module.register_parameter(leaf, parameter)
    return root


class EngineryOptimizer:
    """torch.optim's face of the engine's AdamW (docs/ARCHITECTURE.md, "The contract", train state). The step itself
    is the engine's optimizer_step (unscale, clip, skip on non-finite, step), not a method here."""

    def __init__(self, owner):
        self._owner = owner

    @property
    def param_groups(self):
        values = self._owner._engine.optimizer_hyperparameters
        return [_ParamGroup(self._owner._engine, values, list(self._owner.module.parameters()))]

    def zero_grad(self, set_to_none=True):
        if not set_to_none:
            raise _error("zero_grad(set_to_none=False)", "enginery.verl optimizer",
                         "set_to_none=True (the engine releases its gradients, as FSDP2's zero_grad)")
        self._owner.optimizer_zero_grad()

    def state_dict(self):
        raise _error("optimizer.state_dict()", "enginery.verl optimizer",
                     "save_checkpoint(), which writes the sharded optimizer state")


class _ParamGroup(dict):
    """One torch param group; a write of lr, betas, eps or weight_decay reaches the engine at once, any other key
    is refused by name (AdamW's other options are not implemented)."""
    WRITABLE = ("lr", "betas", "eps", "weight_decay")

    def __init__(self, engine, values, params):
        super().__init__(values, params=params)
        self._engine = engine

    def __setitem__(self, key, value):
        self.update({key: value})

    def update(self, other=(), **kwargs):
        changes = dict(other, **kwargs)
        refused = sorted(set(changes) - set(self.WRITABLE))
        if refused:
            raise _error(f"param_group[{', '.join(map(repr, refused))}] written", "enginery.verl optimizer",
                         ", ".join(self.WRITABLE))
        values = self._engine.optimizer_hyperparameters  # now, not when this group was read: a step may have passed
        values.update(changes)
        values["betas"] = tuple(float(b) for b in values["betas"])
        self._engine.optimizer_hyperparameters = values  # checked there, each field by name
        super().update(self._engine.optimizer_hyperparameters)


class EngineryGradScaler(ShardedGradScaler):
    """torch's ShardedGradScaler whose state is the engine's C++ sharded scaler (found-inf agreed across ranks;
    docs/ARCHITECTURE.md, "Precision"): its getters read it and scale() multiplies by its current scale, so verl's
    isinstance checks and readers see the truth. The engine's optimizer_step runs unscale, step-or-skip and update
    itself, so the methods that would drive a torch optimizer are refused by name. torch's own state is set up
    (enabled, on the engine's device) for what reads it directly; every public reader is answered here."""

    def __init__(self, engine, device):
        state = engine.precision["grad_scaler"]
        super().__init__(device=device, init_scale=state["scale"], growth_factor=state["growth_factor"],
                         backoff_factor=state["backoff_factor"], growth_interval=state["growth_interval"],
                         enabled=True)
        self._engine = engine

    def _state(self):
        return self._engine.precision["grad_scaler"]

    def is_enabled(self):
        return True

    def get_scale(self):
        return self._state()["scale"]

    def get_growth_factor(self):
        return self._state()["growth_factor"]

    def get_backoff_factor(self):
        return self._state()["backoff_factor"]

    def get_growth_interval(self):
        return self._state()["growth_interval"]

    def _get_growth_tracker(self):
        return self._state()["growth_tracker"]

    def last_step_skipped(self):
        return self._state()["last_step_skipped"]

    def state_dict(self):
        state = self._state()
        return {"scale": state["scale"], "growth_factor": state["growth_factor"],
                "backoff_factor": state["backoff_factor"], "growth_interval": state["growth_interval"],
                "_growth_tracker": state["growth_tracker"]}

    def scale(self, outputs):
        factor = self.get_scale()
        if isinstance(outputs, torch.Tensor):
            return outputs * factor
        return type(outputs)(self.scale(o) for o in outputs)

    def _driven_by_the_engine(self, name):
        raise _error(f"scaler.{name}()", "enginery.verl scaler",
                     "engine.optimizer_step(), which unscales, skips a non-finite step on every rank and updates the "
                     "scale itself")

    def unscale_(self, optimizer):
        self._driven_by_the_engine("unscale_")

    def step(self, optimizer, *args, **kwargs):
        self._driven_by_the_engine("step")

    def update(self, new_scale=None):
        self._driven_by_the_engine("update")

    def load_state_dict(self, state_dict):
        self._driven_by_the_engine("load_state_dict")

    def set_growth_factor(self, new_factor):
        self._driven_by_the_engine("set_growth_factor")

    def set_backoff_factor(self, new_factor):
        self._driven_by_the_engine("set_backoff_factor")

    def set_growth_interval(self, new_interval):
        self._driven_by_the_engine("set_growth_interval")


def _no_hdfs(hdfs_path, where):
    if hdfs_path is not None:
        raise _error(f"hdfs_path = '{hdfs_path}'", f"enginery.verl {where}", "None (local paths only)")


class LanguageModelEngine(EngineryVerlEngine):
    model_type = "language_model"


class ValueModelEngine(EngineryVerlEngine):
    model_type = "value_model"


_MICRO_BATCHING = ("micro_batch_size_per_gpu", "use_dynamic_bsz", "max_token_len_per_gpu")


# Batch metadata the adapter reads; everything else in the batch goes to the loss function untouched.
def _temperature(data):
    """verl's batch['temperature'] as the contract's one value per call: a number, or a tensor of one value per row,
    which must all be the same (the engines scale a whole call's logits alike). The engine's loop checks the value
    and refuses one other than 1 for an engine that did not declare the capability `temperature`
    (docs/ARCHITECTURE.md, "One step")."""
    temperature = layout.get(data, "temperature", 1.0)
    if isinstance(temperature, torch.Tensor):
        values = temperature.flatten().unique() if temperature.numel() else torch.ones(1)
        if values.numel() != 1:
            raise _error(f"batch['temperature'] has {values.numel()} different values",
                         "enginery.verl forward_backward_batch", "one temperature per batch")
        temperature = values.item()
    return temperature


def _check_metadata(data):
    pad_mode = layout.get(data, "pad_mode")
    if pad_mode is not None and "no_padding" not in str(getattr(pad_mode, "value", pad_mode)).lower():
        raise _error(f"batch['pad_mode'] = {pad_mode}", "enginery.verl forward_backward_batch", "no_padding")
    entropy = layout.get(data, "calculate_entropy", False)
    if not isinstance(entropy, bool):
        raise _error(f"batch['calculate_entropy'] is a {type(entropy).__name__}",
                     "enginery.verl forward_backward_batch", "True, False")
    return entropy


def _micro_batch(data, rows, size, device, **metadata):
    """verl's rows `rows` of the batch on the engine's device, as verl's own engine hands them to its loss (its
    forward_step moves each micro-batch there): a TensorDict stays one (verl's losses call its
    select(...).to_padded_tensor()), cut by verl's index_select_tensor_dict, with `metadata` as non-tensor entries;
    a dict stays a dict."""
    if type(data).__name__ == "TensorDict":
        from verl.utils import tensordict_utils as tu
        micro = tu.index_select_tensor_dict(data, rows).to(device)
        tu.assign_non_tensor(micro, **metadata)
        return micro
    micro = layout.select_rows(data, rows, size)
    micro = {key: v.to(device, non_blocking=True) if isinstance(v, torch.Tensor) else v for key, v in micro.items()}
    micro.update(metadata)
    return micro


def _append_metrics(into, metrics):
    """One micro-batch's metrics into the call's, as verl's engine gathers them (its append_to_dict): a verl Metric
    starts one Metric per key that takes every micro-batch's values, so its aggregation (mean, sum, min, max) is kept
    for the trainer's reduce; a list extends the key's list; any other value is appended to it."""
    for name, value in (metrics or {}).items():
        if name not in into:
            into[name] = value.init_list() if hasattr(value, "init_list") else []
        if isinstance(value, list):
            into[name].extend(value)
        else:
            into[name].append(value)


class _Call:
    """One forward_backward_batch: the engine's batch (views of verl's), the loss function as the engine calls it,
    and verl's result put together from what each micro-batch's loss saw."""

    def __init__(self, owner, data, loss_function, forward_only):
        calculate_entropy = _check_metadata(data)
        temperature = _temperature(data)
        self.batch, self.shape = layout.to_engine_batch(data)
        self.batch["calculate_entropy"] = calculate_entropy
        if isinstance(temperature, bool) or temperature != 1:
            self.batch["temperature"] = temperature
        # verl's per-call micro-batching: the engine's host loop honours it for this call (docs/ARCHITECTURE.md,
        # "One step"); a wrong type comes back as an error naming the entry.
        for key in _MICRO_BATCHING:
            value = layout.get(data, key)
            if value is not None:
                self.batch[key] = int(value) if isinstance(value, torch.Tensor) else value
        # verl's engine drops a training call's model outputs unless the caller asks for them (its Tinker worker
        # does): they are full-length per-token tensors, not returned here either.
        self.keep_outputs = forward_only or bool(layout.get(data, "return_model_output", False))
        self.data = data
        self.loss_function = loss_function
        self.owner = owner
        self.losses = []
        self.metrics = {}

    def engine_loss(self, model_output, micro, ctx):
        """The engine's loss callback: verl's loss_function(model_output=, data=, dp_group=) on verl's rows of this
        micro-batch (ctx.rows, moved to the engine's device), its outputs nested on the micro-batch's own offsets.
        verl's losses multiply by dp_size because FSDP averages gradients over ranks; enginery sums them
        (docs/ARCHITECTURE.md, "One step"), so the loss handed back for backward is divided by dp_size. The value
        reported is the loss function's own."""
        # The engine's loop never hands a filler to the loss (docs/ARCHITECTURE.md, "One step"): these are rows of
        # verl's batch. The losses are read back once per call, in result().
        offsets = micro.get("cu_seqlens")
        verl_output = {name: self.shape.output(value, name, offsets) for name, value in model_output.items()}
        device = next(iter(model_output.values())).device
        verl_data = _micro_batch(self.data, ctx.rows, self.shape.rows, device,
                                 batch_num_tokens=ctx.global_num_tokens, dp_size=ctx.dp_size)
        returned = self.loss_function(model_output=verl_output, data=verl_data,
                                      dp_group=self.owner.get_data_parallel_group())
        loss, metrics = returned if isinstance(returned, tuple) else (returned, {})
        if not isinstance(loss, torch.Tensor):
            raise _error(f"loss_function returned a {type(loss).__name__} loss", "enginery.verl loss_function",
                         "(torch.Tensor, dict)")
        self.losses.append(loss.detach())
        _append_metrics(self.metrics, metrics)
        return loss / ctx.dp_size

    def result(self, out):
        model_output = ({name: self.shape.output(value, name) for name, value in out["model_output"].items()}
                        if self.keep_outputs else {})
        losses = torch.stack(self.losses).tolist() if self.losses else []
        return {"model_output": model_output, "loss": losses, "metrics": self.metrics}
