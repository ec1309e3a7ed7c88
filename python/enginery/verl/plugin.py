"""The `verl.plugins` entry point's module: `import verl` imports it (verl/__init__.py loads every entry point of
that group), and importing it registers enginery's engines with verl's EngineRegistry. verl logs and skips a
plugin whose import fails, so a failure here never breaks verl; `enginery.verl.register()` can be called again
after `import verl` to see the error."""
from . import register

register()
