"""Which of the scheduler's changed hunks a changelog's campaign reached (`schedspec changelog`).

A changelog can only report what its workloads made both sides do. So while
it runs, every vLLM driver measures the lines of the scheduler's source it
ran ($SCHEDSPEC_VLLM_COVERAGE, `vllm_env/line_coverage.py`), and afterwards
the hunks that differ between A's and B's sources (`source_hunks.py`) are
held against those lines: a changed hunk that no workload ran is a change
the changelog could not have seen, and is listed as such.

The drivers are pooled per process and outlive a run, so the idle ones of
both sides are closed before (one started without the variable would measure
nothing) and after (one left measuring would write into a folder that is
gone). Each side's lines are told apart by the package folder the driver
imported, which is what the diff reads too: a release's venv, or a tree's
`vllm/`.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..engines.registry import engine_factory
from .clusters import Side
from .source_hunks import HunkReach, changed_hunks, load_lines, package_root, reach

ENV = "SCHEDSPEC_VLLM_COVERAGE"


def source_root(side: Side) -> Path:
    """The `vllm` package folder a side's driver imports."""
    from ..engines.vllm import vllm_venv_path

    if side.engine.source is not None:
        return Path(side.engine.source).resolve() / "vllm"
    return package_root(vllm_venv_path(release=side.release)).resolve()


def _close_idle(sides: tuple[Side, ...]) -> None:
    for side in sides:
        getattr(engine_factory(side.engine), "close_all", lambda: None)()


@contextmanager
def measuring(*sides: Side) -> Iterator[Path]:
    """A folder the drivers of `sides` started inside the block write their line files to; removed after."""
    folder = Path(tempfile.mkdtemp(prefix="schedspec-lines-"))
    before = os.environ.get(ENV)
    _close_idle(sides)
    os.environ[ENV] = str(folder)
    try:
        yield folder
    finally:
        _close_idle(sides)  # a close saves the driver's lines
        if before is None:
            os.environ.pop(ENV, None)
        else:
            os.environ[ENV] = before


def source_reach(a: Side, b: Side, folder: Path) -> list[HunkReach] | None:
    """Each changed hunk from A to B, reached or not by the lines in `folder`; None if nothing was measured
    (a venv without coverage: rebuild it with `conformance/vllm_env/setup_vllm_ref.sh`)."""
    try:
        lines = load_lines(folder, by="vllm_root")
        root_a, root_b = source_root(a), source_root(b)
        runs = {str(Path(k).resolve()): v for k, v in lines.items()}
        if str(root_a) not in runs or str(root_b) not in runs:
            return None
        return reach(changed_hunks(root_a, root_b), runs[str(root_a)], runs[str(root_b)])
    finally:
        shutil.rmtree(folder, ignore_errors=True)
