"""The vLLM driver's line coverage ($SCHEDSPEC_VLLM_COVERAGE) and the changed hunks it reaches, on real vLLM.

One small workload runs through the 0.33.0 driver with coverage on: the lines it wrote must show
`Scheduler.schedule` run and a KV-connector-only method not. Then the hunks that changed from 0.32.0
to 0.33.0 are judged against those lines: some in `Scheduler.schedule` must be reached, and some
hunks must stay unreached (a single small workload cannot reach every change).

Skipped without the vLLM venvs (CI builds them first). About 15 s.
"""

import ast
import json

import pytest

from schedspec.conformance.changelog.source_hunks import changed_hunks, load_lines, package_root, reach, unreached_json
from schedspec.conformance.engines.engine_spec import parse_engine
from schedspec.conformance.engines.registry import engine_factory
from schedspec.conformance.engines.vllm import vllm_venv_path, vllm_venv_ready
from schedspec.conformance.harness.differ import diff
from schedspec.conformance.workloads.release_examples import VERSION_WORKLOADS
from schedspec.reference_impl import ReferenceEngine

pytestmark = pytest.mark.skipif(
    not vllm_venv_ready(), reason="no vLLM venv: run conformance/vllm_env/setup_vllm_ref.sh"
)
SCHEDULER = "v1/core/sched/scheduler.py"


def body_lines(root, qualname):
    """The lines of a method's body (not its def line, which runs at import) in the installed scheduler.py."""
    cls, name = qualname.split(".")
    tree = ast.parse((root / SCHEDULER).read_text())
    (node,) = [
        f
        for c in tree.body
        if isinstance(c, ast.ClassDef) and c.name == cls
        for f in c.body
        if isinstance(f, ast.FunctionDef) and f.name == name
    ]
    return set(range(node.body[0].lineno, node.end_lineno + 1))


@pytest.fixture(scope="module")
def lines_dir(tmp_path_factory):
    """The line files of one workload run through a fresh 0.33.0 driver with coverage on."""
    out = tmp_path_factory.mktemp("lines")
    factory = engine_factory(parse_engine("vllm"))
    # The factory is shared per process: an idle driver started by an earlier test, without the variable,
    # would be reused and measure nothing. Drop them, so this workload starts its own.
    factory.close_all()
    with pytest.MonkeyPatch.context() as env:
        env.setenv("SCHEDSPEC_VLLM_COVERAGE", str(out))
        try:
            r = diff(VERSION_WORKLOADS["version-self-preemption"](), ReferenceEngine, factory, "blocks")
            assert r.error is None and r.divergence is None, r.error or r.divergence
        finally:
            factory.close_all()  # a close saves the lines; and no measured driver is left for later tests
    return out


def test_the_driver_measures_the_scheduler_it_ran(lines_dir):
    root = package_root(vllm_venv_path())
    (path,) = lines_dir.glob("lines-0.33.0-*.json")
    doc = json.loads(path.read_text())
    assert doc["vllm_version"] == "0.33.0" and doc["vllm_root"] == str(root.resolve())
    assert {SCHEDULER, "v1/request.py", "v1/core/kv_cache_manager.py"} <= set(doc["files"])
    sched = doc["files"][SCHEDULER]
    executed = set(sched["executed"])
    assert executed <= set(sched["statements"]) and len(sched["statements"]) > 1000
    assert len(executed & body_lines(root, "Scheduler.schedule")) > 50
    assert len(executed & body_lines(root, "Scheduler.update_from_output")) > 20
    assert not executed & body_lines(root, "Scheduler._update_waiting_for_remote_kv")  # KV connectors only


@pytest.mark.skipif(not vllm_venv_ready(release="0.32.0"), reason="no vLLM 0.32.0 venv")
def test_the_changed_hunks_from_0_32_0_are_judged_against_the_lines(lines_dir):
    hunks = changed_hunks(package_root(vllm_venv_path("0.32.0")), package_root(vllm_venv_path()))
    got = reach(hunks, {}, load_lines(lines_dir)["0.33.0"])
    in_schedule = [r for r in got if r.hunk.file == SCHEDULER and r.hunk.qualname == "Scheduler.schedule"]
    assert in_schedule and any(r.reached for r in in_schedule)
    report = unreached_json(got)
    assert 0 < report["reached"] < report["hunks"] == len(hunks)
    assert report["never_entered"] > 0 and report["entered_not_reached"] > 0
