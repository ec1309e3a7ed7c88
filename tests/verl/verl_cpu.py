"""verl on the CPU, for tests and benchmarks: verl 0.9 has no CPU platform (on a machine without a GPU its platform
registry falls back to "nvidia", whose calls fail without a driver), and registers its own FSDP engine for cuda and
npu only. `use_cpu_platform()` registers and installs a CPU platform through verl's PlatformRegistry, as verl's
plugin mechanism allows; `register_verl_fsdp_on_cpu()` adds verl's FSDP engine under device "cpu" (fsdp2 only:
verl builds FSDP1 with sync_module_states, which torch refuses for CPU parameters). Call both before verl's engine
or trainer modules resolve the device (so: before they are imported)."""
import types
from contextlib import contextmanager

import torch


def _cpu_device_module():
    """What verl calls on get_torch_device() (torch.cuda's role), answered for the CPU: no caches, no memory
    counters (0), the CPU generator's state for the RNG."""
    nothing = lambda *args, **kwargs: None  # noqa: E731
    zero = lambda *args, **kwargs: 0  # noqa: E731
    return types.SimpleNamespace(
        is_available=lambda: True, current_device=lambda: "cpu", device_count=lambda: 1, set_device=nothing,
        synchronize=nothing, empty_cache=nothing, ipc_collect=nothing, manual_seed=torch.manual_seed,
        manual_seed_all=torch.manual_seed, get_rng_state=lambda *a, **k: torch.get_rng_state(),
        set_rng_state=lambda state, *a, **k: torch.set_rng_state(state), memory_allocated=zero,
        memory_reserved=zero, max_memory_allocated=zero, max_memory_reserved=zero,
        mem_get_info=lambda *a, **k: (0, 0), reset_peak_memory_stats=nothing,
        set_per_process_memory_fraction=nothing, get_device_name=lambda *a, **k: "cpu",
        current_stream=torch.cpu.current_stream, stream=torch.cpu.stream, Stream=torch.cpu.Stream,
        Event=torch.cpu.Event)


_installed = False


def use_cpu_platform():
    """Registers a "cpu" platform with verl's PlatformRegistry and makes it verl's platform (idempotent)."""
    global _installed
    if _installed:
        return
    from verl.plugin.platform import PlatformBase, PlatformRegistry, set_platform

    module = _cpu_device_module()

    @PlatformRegistry.register(platform="cpu")
    class PlatformCPU(PlatformBase):
        device_name = property(lambda self: "cpu")
        vendor_name = property(lambda self: "cpu")
        device_module = property(lambda self: module)

        def is_available(self):
            return True

        def is_platform_available(self, use_smi_check=False):
            return True

        def current_device(self):
            return "cpu"  # verl moves tensors with .to(get_device_id()): an int would mean cuda:<int>

        def device_count(self):
            return 1

        def set_device(self, device_index):
            pass

        def synchronize(self, device_index=None):
            pass

        def manual_seed(self, seed):
            torch.manual_seed(seed)

        def manual_seed_all(self, seed):
            torch.manual_seed(seed)

        def set_allocator_settings(self, settings):
            pass

        def empty_cache(self):
            pass

        def get_device_capability(self, device_index=0):
            return None, None

        def communication_backend_name(self):
            return "gloo"

        def visible_devices_envvar(self):
            return "CUDA_VISIBLE_DEVICES"

        @contextmanager
        def nvtx_range(self, msg):
            yield

        def profiler_start(self):
            pass

        def profiler_stop(self):
            pass

        def ray_resource_name(self):
            return "CPU"

        def ray_noset_envvars(self):
            return []

        def is_ipc_supported(self):
            return False

        def cudart(self):
            return None

    set_platform(PlatformCPU())
    _installed = True


def register_verl_fsdp_on_cpu():
    """verl's own FSDP engines (language and value model) registered for device "cpu" under fsdp2."""
    from verl.workers.engine.base import EngineRegistry
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead, FSDPEngineWithValueHead
    for model_type, engine in (("language_model", FSDPEngineWithLMHead), ("value_model", FSDPEngineWithValueHead)):
        if "cpu" not in EngineRegistry._engines.get(model_type, {}).get("fsdp2", {}):
            EngineRegistry.register(model_type=model_type, backend="fsdp2", device="cpu")(engine)
