"""The `verl.plugins` entry point's module: `import verl` imports it (verl/__init__.py loads every entry point of
that group), and importing it registers enginery's engines with verl's EngineRegistry. verl logs a plugin whose
import fails at DEBUG only and goes on, so a failure here would surface later as "Unknown backend": it is warned
about here, loudly, and `python -m enginery.verl doctor` says why step by step."""
import warnings

try:
    from . import register

    register()
except Exception as error:
    warnings.warn(f"enginery: its engines were not registered with verl ({type(error).__name__}: {error}); run "
                  f"`python -m enginery.verl doctor` to see why", RuntimeWarning, stacklevel=2)
    raise
