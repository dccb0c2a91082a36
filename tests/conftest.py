"""The test tiers, marked by folder, so that any tier runs alone: `pytest -m quality`.

* `unit`: fast checks of one piece each.
* `quality`: each test pins "this checker finds this planted bug, and shrinks it to this".
* `campaigns`: certificates of the reference, the torch engine and vLLM, on small campaigns.
* `slow`: long campaigns and proofs; excluded by default (`addopts`), run with `-m slow`.

A tier is a folder rather than a decorator on each test, so a test cannot
land in the default run by forgetting its mark: moving it to tests/slow is
what makes it slow.
"""

from pathlib import Path

import pytest

TIERS = ("unit", "quality", "campaigns", "slow")
HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        relative = item.path.relative_to(HERE) if item.path.is_relative_to(HERE) else None
        if relative is not None and relative.parts[0] in TIERS:
            item.add_marker(getattr(pytest.mark, relative.parts[0]))
