"""`schedspec simulate --out` streams the trace: the file is byte for byte what `Trace.to_json` gives, and atomic.

The reference for "byte for byte" is what the CLI wrote before streaming:
`write_json_atomic(path, simulate(workload).to_json())`. The workloads cover
every optional field a step record can write (async: `updated_step`,
`scheduled`, `in_flight`; spec decode: `draft_token_ids`), aborts, and both
ends (drained, max_steps).
"""

from __future__ import annotations

import json
import os

import pytest

from schedspec import cli
from schedspec.conformance.workloads.builtin import BUILTIN
from schedspec.conformance.workloads.families import generate
from schedspec.reference_impl import simulate
from schedspec.reference_impl.engine import ENGINE_NAME, simulate_steps
from schedspec.spec.config import SchedulerConfig
from schedspec.spec.engine import trace_end
from schedspec.spec.errors import SpecError
from schedspec.spec.jsonio import write_json_atomic
from schedspec.spec.request import Request
from schedspec.spec.trace import Trace
from schedspec.spec.trace_writer import TraceWriter
from schedspec.spec.workload import Workload, WorkloadRequest

D1 = Workload(
    SchedulerConfig(block_size=16, num_gpu_blocks=3),
    (WorkloadRequest(Request("0", (0,) * 32, max_tokens=16, ignore_eos=True)),),
    max_steps=12,
    name="d1",
)
WORKLOADS = {
    "seed-preemption": BUILTIN["seed-preemption"],
    "d1-max-steps": lambda: D1,
    "async": lambda: generate("async", 0, 3),
    "spec-decode": lambda: generate("spec-decode", 0, 1),
    "aborts": lambda: generate("aborts", 0, 2),
    "prefix-caching": lambda: generate("prefix-caching", 0, 4),
}


def expected_bytes(trace: Trace, tmp_path) -> bytes:
    path = tmp_path / "expected.json"
    write_json_atomic(path, trace.to_json())
    return path.read_bytes()


def streamed(workload: Workload, path) -> str:
    last = None
    with TraceWriter(path, workload, ENGINE_NAME) as writer:
        for last in simulate_steps(workload):
            writer.add(last)
        end = trace_end(last, workload)
        writer.finish(end)
    return end


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_the_streamed_trace_is_byte_equal_to_the_in_memory_one(name, tmp_path):
    workload = WORKLOADS[name]()
    trace = simulate(workload)
    end = streamed(workload, tmp_path / "t.json")
    assert end == trace.end
    assert (tmp_path / "t.json").read_bytes() == expected_bytes(trace, tmp_path)


def test_the_features_are_exercised():
    """The parametrised workloads above write every optional step field, so the byte test covers them."""
    fields = set()
    for make in WORKLOADS.values():
        for step in simulate(make()).to_json()["steps"]:
            fields |= step.keys()
    assert {"updated_step", "in_flight", "scheduled", "draft_token_ids"} <= fields
    assert {simulate(make()).end for make in WORKLOADS.values()} == {"drained", "max_steps"}


def test_a_trace_without_steps(tmp_path):
    workload = BUILTIN["seed-priority"]()
    with TraceWriter(tmp_path / "t.json", workload, ENGINE_NAME) as writer:
        writer.finish("max_steps")
    assert (tmp_path / "t.json").read_bytes() == expected_bytes(Trace(workload, (), ENGINE_NAME, "max_steps"), tmp_path)


def test_the_cli_streams_the_same_file(tmp_path, capsys):
    out = tmp_path / "sub" / "t.json"
    assert cli.main(["simulate", "seed-long-prompt", "--out", str(out)]) == 0
    assert out.read_bytes() == expected_bytes(simulate(BUILTIN["seed-long-prompt"]()), tmp_path)
    assert f"trace written to {out}" in capsys.readouterr().out
    assert json.loads(out.read_text())["end"] == "drained"


def test_the_file_gets_the_mode_the_umask_gives(tmp_path):
    streamed(BUILTIN["seed-preemption"](), tmp_path / "t.json")
    write_json_atomic(tmp_path / "plain.json", {})
    assert os.stat(tmp_path / "t.json").st_mode == os.stat(tmp_path / "plain.json").st_mode


def failing_steps(workload: Workload, error: BaseException, after: int = 3):
    for i, record in enumerate(simulate_steps(workload)):
        if i == after:
            raise error
        yield record


@pytest.mark.parametrize(
    "error, rc", [(SpecError("engine", "x", "crashed"), 2), (KeyboardInterrupt(), 130), (RuntimeError("a bug"), None)]
)
def test_a_run_that_fails_midway_leaves_no_file_and_no_temporaries(error, rc, tmp_path, monkeypatch, capsys):
    """Nothing at the target, nothing beside it; and an old file there (with --force) is left as it was."""
    monkeypatch.setattr("schedspec.cli.simulate.simulate_steps", lambda w: failing_steps(w, error))
    out = tmp_path / "t.json"
    argv = ["simulate", "seed-preemption", "--out", str(out)]
    for before in (None, b"the user's old trace"):
        if before is not None:
            out.write_bytes(before)
            argv.append("--force")
        if rc is None:
            with pytest.raises(RuntimeError):
                cli.main(argv)
        else:
            assert cli.main(argv) == rc
        assert os.listdir(tmp_path) == ([] if before is None else ["t.json"])
        assert before is None or out.read_bytes() == before
    capsys.readouterr()
