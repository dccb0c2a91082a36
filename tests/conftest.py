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


OVER_S = 10.0  # a default-tier test slower than this carries `slow_ok` and is named in tests/README.md


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Name the default-tier tests that ran over 10 s without `slow_ok`: make them cheaper, or mark and list them.

    A report, never a failure: how long a test takes depends on the
    machine, and a verdict must not. `tests/unit/project/test_tier_budget.py` checks
    the part that does not: every `slow_ok` test is named in tests/README.md.
    """
    seconds: dict[str, float] = {}
    for reports in terminalreporter.stats.values():
        for r in reports:
            keywords = getattr(r, "keywords", {})
            if getattr(r, "when", None) and "slow" not in keywords and "slow_ok" not in keywords:
                seconds[r.nodeid] = seconds.get(r.nodeid, 0.0) + getattr(r, "duration", 0.0)  # setup + call + teardown
    over = [(s, nodeid) for nodeid, s in seconds.items() if s > OVER_S]
    if over:
        terminalreporter.section(f"default-tier tests over {OVER_S:.0f} s without slow_ok (see tests/README.md)")
        for s, nodeid in sorted(over, reverse=True):
            terminalreporter.line(f"{s:6.1f} s  {nodeid}")
