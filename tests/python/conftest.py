import pytest

import common


@pytest.fixture(scope="session", autouse=True)
def plugins_loaded():
    common.require_plugins()
