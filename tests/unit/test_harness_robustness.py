"""An engine that crashes, hangs or returns garbage is reported at its step; the harness survives.

These are the three ways a third-party engine fails in practice. Each is
planted at step 2 of a small workload.
"""

import json

import pytest

from schedspec.cli import main
from schedspec.conformance.counterexample import Counterexample
from schedspec.conformance.differ import diff
from schedspec.conformance.planted import crashing, hanging, malformed
from schedspec.reference_impl import ReferenceEngine
from schedspec.workloads import BUILTIN


@pytest.mark.parametrize("engine,message", [
    (crashing, "raised RuntimeError at step 2: planted crash"),
    (hanging, "at step 2 timed out after 1 s"),
    (malformed, "raised AttributeError at step 2"),
], ids=["crash", "hang", "malformed"])
def test_engine_failure_is_a_finding(engine, message):
    d = diff(BUILTIN["seed-preemption"](), ReferenceEngine, engine, timeout=1.0).divergence
    assert d.step == 2 and d.field == "engine b"
    assert message in d.b


def test_certify_writes_counterexample_that_replays(tmp_path):
    out = tmp_path / "cert"
    rc = main(["certify", "--engine", "schedspec.conformance.planted:extra_token_at_step_3", "--workloads", "3",
               "--family", "budget", "--out", str(out)])
    assert rc == 1
    cert = json.loads((out / "certificate.json").read_text())
    assert not cert["passed"] and cert["counterexamples"]
    cx_file = cert["counterexamples"][0]["file"]
    cx = Counterexample.load(cx_file)
    assert cx.divergence["step"] == 3 and cx.divergence["field"] == "output.num_scheduled_tokens"
    assert "<testsuite" in (out / "junit.xml").read_text() and "<failure" in (out / "junit.xml").read_text()
    assert main(["replay", cx_file]) == 1  # still diverges
    assert main(["replay", cx_file, "--engine", "reference"]) == 0  # against a correct engine it agrees


def test_certify_reference_passes_and_refuses_to_overwrite(tmp_path):
    out = tmp_path / "cert"
    assert main(["certify", "--engine", "reference", "--workloads", "9", "--out", str(out)]) == 0
    assert json.loads((out / "certificate.json").read_text())["passed"]
    assert main(["certify", "--engine", "reference", "--workloads", "9", "--out", str(out)]) == 2


@pytest.mark.parametrize("argv,field", [
    (["certify", "--engine", "nope"], "--engine"),
    (["certify", "--engine", "reference", "--shard", "3/2"], "--shard"),
    (["certify", "--engine", "reference", "--family", "bogus"], "--family"),
    (["certify", "--engine", "no_such_module:f"], "--engine"),
])
def test_bad_certify_arguments_are_one_line_errors(argv, field, capsys, tmp_path):
    assert main(argv + ["--out", str(tmp_path / "c")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("schedspec: error: " + field) and "\n" not in err


def test_replay_rejects_a_file_that_is_not_a_counterexample(tmp_path, capsys):
    f = tmp_path / "x.json"
    f.write_text('{"version": 1, "steps": []}')
    assert main(["replay", str(f)]) == 2
    assert "is not a schedspec counterexample" in capsys.readouterr().err
