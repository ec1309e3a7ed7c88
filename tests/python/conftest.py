import pytest

import common


@pytest.fixture(scope="module", autouse=True)
def plugins_loaded(request):
    # A module that sets NEEDS_ENGINE = False is pure Python (package metadata): it must run without the extension.
    if getattr(request.module, "NEEDS_ENGINE", True):
        common.require_plugins()
