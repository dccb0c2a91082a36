"""Wherever and however an engine ends its program, the run ends in an error (exit 3), never a pass.

Property-style: Hypothesis draws the way (`sys.exit` with 0, 1 or a text,
`os._exit` with 0 or 3, a `KeyboardInterrupt` of the engine's own), the
call it happens in (the factory, `add_request`, `schedule`, `summary`,
`update_from_output`), the step, and how the engine runs (in its own
process or in the harness's, one job or two). `os._exit(0)` in process
once ended certify itself with status 0; `sys.exit(0)` once did too.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings, strategies as st

from schedspec.cli import main
from schedspec.conformance.demo_engines.misbehaving import EXIT_ENV, EXITS

ENGINE = "schedspec.conformance.demo_engines.misbehaving:exits_as_told"
METHODS = ["factory", "add_request", "schedule", "summary", "update_from_output"]


# The plan goes through a file: the harness keeps engine hosts between runs, each started with the environment
# of its time, and each reads the file anew as it builds an engine.
@pytest.fixture(scope="module")
def plan_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("plan") / "exit-plan"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(EXIT_ENV, f"@{path}")
        yield path


@pytest.mark.slow_ok("every way an engine ends its program, in both modes and both job counts: 40 drawn cases")
@settings(max_examples=40, derandomize=True, deadline=None)
@given(
    way=st.sampled_from(sorted(EXITS)),
    method=st.sampled_from(METHODS),
    call=st.integers(0, 1),
    mode=st.sampled_from(["--in-process", "--isolate"]),
    jobs=st.sampled_from(["1", "2"]),
)
def test_an_engine_that_ends_its_program_is_an_error_never_a_pass(
    tmp_path_factory, plan_file, way, method, call, mode, jobs
):
    # The second call of a method happens in every workload of this family (two or more steps, each
    # summarised twice), except add_request in a workload of one request: that one only ever fires first.
    plan_file.write_text(f"{way}:{method}:{call if method != 'add_request' else 0}")
    out = tmp_path_factory.mktemp("cert")
    argv = ["certify", "--engine", ENGINE, mode, "--jobs", jobs, "--workloads", "2", "--family", "budget"]
    rc = main([*argv, "--max-errors", "9", "--no-plots", "--out", str(out), "--force", "--start-timeout", "20"])
    cert = json.loads((out / "certificate.json").read_text())
    assert rc == 3 and cert["verdict"] == "error" and not cert["passed"], cert["outcomes"]
    assert cert["outcomes"]["matched"] + cert["outcomes"]["diverged"] == 0
    kinds = {e["kind"] for e in cert["errors"]}
    assert kinds == ({"start"} if method == "factory" else {"died"}), cert["errors"]
    assert all(("exit" in e["cause"] or "KeyboardInterrupt" in e["cause"]) for e in cert["errors"]), cert["errors"]
