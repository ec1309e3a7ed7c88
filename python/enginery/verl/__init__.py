"""enginery's engines as verl engines (docs/ARCHITECTURE.md, "Plugins and packaging").

    from enginery.verl import LanguageModelEngine
    engine = LanguageModelEngine(model_config={"path": "..."}, engine_config={"strategy": "enginery_fsdp"},
                                 optimizer_config={"lr": 1e-6})
    engine.initialize()
    with engine.train_mode():
        out = engine.train_batch(data, loss_function)   # loss_function(model_output, data, dp_group)

With verl installed, `import verl` loads this package's `verl.plugins` entry point (enginery.verl.plugin), which
registers both engines with verl's EngineRegistry under the backends enginery_fsdp, enginery_fsdp2 and
enginery_veomni, for language_model and value_model, on cuda and cpu. The plugins are those of
ENGINERY_PLUGIN_PATH, then the package's own (enginery.bundled_plugin_dir()).
"""
from .engine import BACKEND_PREFIX, EngineryVerlEngine, LanguageModelEngine, ValueModelEngine  # noqa: F401

__all__ = ["BACKENDS", "EngineryVerlEngine", "LanguageModelEngine", "ValueModelEngine", "register"]

# The backends of the plugin this tree ships (plugin/fsdp/plugin_entry.cpp), under names verl does not use.
BACKENDS = tuple(BACKEND_PREFIX + name for name in ("fsdp", "fsdp2", "veomni"))
DEVICES = ("cuda", "cpu")

_registered = {}


def register(registry=None, base_class=None):
    """Registers the engines with verl's EngineRegistry (or `registry`, anything with its register(model_type,
    backend[, device]) decorator). verl's registry asserts subclasses of its BaseEngine, so the classes registered
    derive from `base_class` (verl's BaseEngine by default) too. Returns {model_type: class}; idempotent."""
    if registry is None:
        from verl.workers.engine.base import BaseEngine, EngineRegistry
        registry, base_class = EngineRegistry, BaseEngine
    key = id(registry)
    if key in _registered:
        return _registered[key]
    bases = () if base_class is None else (base_class,)
    classes = {}
    for engine in (LanguageModelEngine, ValueModelEngine):
        cls = type("Verl" + engine.__name__, (engine,) + bases, {"__module__": __name__})
        _decorator(registry, engine.model_type)(cls)
        classes[engine.model_type] = cls
    _registered[key] = classes
    return classes


def _decorator(registry, model_type):
    try:
        return registry.register(model_type=model_type, backend=list(BACKENDS), device=list(DEVICES))
    except TypeError:  # verl before per-device registration (2025): register(model_type, backend)
        return registry.register(model_type=model_type, backend=list(BACKENDS))
