"""The whole of `schedspec vllm-tests`, as a library call: fetch, prepare, run twice, replay, tabulate."""

from __future__ import annotations

import shutil
from pathlib import Path

from ...spec.errors import SpecError
from ...spec.versions import RELEASES
from ..engines.vllm_venvs import ensure_vllm_venv, vllm_venv_path
from .environment import hub_cache, pytest_tools, schedspec_path, test_environment
from .report import Row, rows, totals
from .run import replay_captures, run_tests, scheduler_test_files
from .sdist import fetch_tests

MODES = ("log", "raise")


def run_suite(
    release: str, mode: str, k: str | None, jobs: int, out: Path, files: list[str] | None = None
) -> tuple[list[Row], dict[str, object]]:
    """`release`'s scheduler tests (or `files` of them), plain and in `mode`, replayed; the rows and totals."""
    if release not in RELEASES:
        raise SpecError("--vllm-version", release, f"must be one of {', '.join(RELEASES)}")
    if mode not in MODES:
        raise SpecError("--mode", mode, f"must be one of {', '.join(MODES)}")
    if jobs < 1:
        raise SpecError("--jobs", jobs, "must be >= 1")
    venv = ensure_vllm_venv(release=release)
    root = fetch_tests(release)
    for f in files or ():
        if not (root / f).is_file():
            raise SpecError("--file", f, f"is not a file of vLLM {release}'s tests (under {root})")
    files = files or scheduler_test_files(root)
    work = vllm_venv_path(release).with_name(vllm_venv_path(release).name + "-tests")
    env = test_environment(
        root,
        pytest_tools(venv, work / "pytest"),
        schedspec_path(out / "pythonpath"),
        hub_cache(work / "hf"),
        work / "vllm-cache",
    )
    python = venv / "bin" / "python"
    shutil.rmtree(out / "runs", ignore_errors=True)  # this command's own folder: captures append, never mix runs
    plain = run_tests(python, root, files, env, out / "runs", "plain", k, jobs)
    monitored = run_tests(python, root, files, env, out / "runs", mode, k, jobs)
    captures = sorted(str(p) for p in (out / "runs").glob(f"{mode}-*/captures/*.jsonl*") if _first_part(p))
    table = rows(plain, monitored, replay_captures(captures))
    return table, totals(table)


def _first_part(path: Path) -> bool:
    """A capture's first part (`x.jsonl`, or `x.jsonl-2` for a second scheduler), not its rotations (`.1`)."""
    return not path.name.rsplit(".", 1)[-1].isdigit()
