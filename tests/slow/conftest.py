"""Everything under tests/slow is marked `slow`: it runs only with `-m slow`."""

import pytest


def pytest_collection_modifyitems(items):
    for item in items:
        if "/tests/slow/" in str(item.fspath):
            item.add_marker(pytest.mark.slow)
