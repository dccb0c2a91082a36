"""Fixtures of the unit tests.

A fixture imported into a test module is an import that looks unused (and a
parameter that looks like it redefines it), so linters flag every such test;
pytest finds fixtures here without an import.
"""

from __future__ import annotations

import pytest

from both_engines import ENGINES, Driven

from schedspec.spec.config import SchedulerConfig


@pytest.fixture(params=ENGINES)
def make(request):
    """`make(config) -> Driven` on the reference, then on vLLM (skipped without its venv)."""
    opened: list[Driven] = []

    def _make(config: SchedulerConfig) -> Driven:
        opened.append(Driven(request.param, config))
        return opened[-1]

    yield _make
    for d in opened:
        d.close()
