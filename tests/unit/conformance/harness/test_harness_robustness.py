"""An engine that fails as a program is an `error`, never a divergence, and never takes the run with it.

Each engine of `conformance/demo_engines/misbehaving.py` stands for a failure seen in
practice. Each test pins the outcome, the exit status, who is blamed (the
engine, never the oracle) and that the run ends in bounded time: the
deadlines are set low, so a harness that waited on a hang would blow the
test's own timeout rather than pass.
"""

import json
import os
import time

import pytest
from hypothesis import given, settings, strategies as st

from schedspec.cli import main
from schedspec.conformance.demo_engines.misbehaving import SLOW_START_ENV, mutating
from schedspec.conformance.demo_engines.planted import crashing, hanging, malformed
from schedspec.conformance.harness.counterexample import Counterexample
from schedspec.conformance.harness.differ import diff
from schedspec.conformance.workloads.builtin import BUILTIN
from schedspec.reference_impl import ReferenceEngine

M = "schedspec.conformance.demo_engines.misbehaving:"
P = "schedspec.conformance.demo_engines.planted:"
FAST = ["--family", "budget", "--step-timeout", "2", "--start-timeout", "3", "--no-plots"]


def certify(tmp_path, engine, *extra, workloads=3, name="cert"):
    out = tmp_path / name
    rc = main(["certify", "--engine", engine, "--workloads", str(workloads), "--out", str(out), *FAST, *extra])
    cert = json.loads((out / "certificate.json").read_text()) if (out / "certificate.json").exists() else None
    return rc, cert, out


def test_in_process_failures_sort_into_crash_timeout_and_malformed():
    w = BUILTIN["seed-preemption"]()
    crash = diff(w, ReferenceEngine, crashing, timeout=1.0)
    assert crash.outcome == "diverged" and crash.divergence.crash and crash.divergence.step == 2
    assert "raised RuntimeError: planted crash at step 2" in crash.divergence.b
    hang = diff(w, ReferenceEngine, hanging, timeout=1.0)
    assert hang.outcome == "error" and (hang.error.kind, hang.error.step, hang.error.side) == ("timeout", 2, "b")
    # Read raw, in process, a malformed answer crashes the comparison; through the registry it is snapshotted.
    assert diff(w, ReferenceEngine, malformed, timeout=1.0).outcome == "diverged"


@pytest.mark.parametrize(
    "engine,kind,cause",
    [
        (M + "raising_factory", "start", "RuntimeError: planted: the factory cannot build the engine"),
        (M + "none_factory", "start", "returned None, not an engine"),
        (M + "no_arguments", "start", "TypeError"),
        (M + "hanging_factory", "start", "timed out"),
        (P + "hanging", "timeout", "2 s"),
        (P + "malformed", "malformed", "returned dict, not SchedulerOutput"),
        (M + "exits_at_step_2", "died", "os._exit(3)"),
    ],
    ids=[
        "raising-factory",
        "none-factory",
        "wrong-signature",
        "hanging-factory",
        "hanging-step",
        "malformed",
        "os-exit",
    ],
)
def test_an_engine_that_fails_as_a_program_is_an_error(tmp_path, engine, kind, cause):
    t0 = time.monotonic()
    # A factory that never returns costs two tries of the start deadline per workload: 1 s, not FAST's 3.
    quick = ["--start-timeout", "1"] if engine == M + "hanging_factory" else []
    rc, cert, out = certify(tmp_path, engine, "--max-errors", "2", *quick)
    assert rc == 3 and cert["verdict"] == "error" and not cert["passed"]
    assert cert["errors"], cert
    e = cert["errors"][0]
    assert (e["side"], e["engine"], e["kind"]) == ("b", engine, kind) and cause in e["cause"] and e["fix"]
    assert not cert["counterexamples"] and not list(out.glob("counterexample-*"))  # errors are never shrunk
    assert cert["outcomes"]["error"] == 2 and cert["outcomes"]["skipped"] == 1  # --max-errors stopped the run
    assert "junit" and "<error" in (out / "junit.xml").read_text()
    assert time.monotonic() - t0 < 60


def test_a_slow_start_survives_under_the_default_deadline_and_is_an_error_past_it(tmp_path, monkeypatch):
    monkeypatch.setenv(SLOW_START_ENV, "1.5")
    rc, cert, _ = certify(tmp_path, M + "slow_start", "--start-timeout", "10", workloads=2, name="patient")
    assert rc == 0 and cert["passed"]
    rc, cert, _ = certify(tmp_path, M + "slow_start", "--start-timeout", "0.5", workloads=1, name="impatient")
    assert rc == 3 and cert["errors"][0]["kind"] == "start" and cert["errors"][0]["engine"] == M + "slow_start"
    assert "retried" not in cert["errors"][0]["cause"] or "timed out" in cert["errors"][0]["cause"]


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_os_exit_in_its_own_process_costs_one_workload(tmp_path, jobs):
    rc, cert, _ = certify(tmp_path, M + "exits_at_step_2", "--jobs", jobs, "--max-errors", "9", workloads=4)
    assert rc == 3 and cert["outcomes"] == {
        "matched": 0,
        "diverged": 0,
        "nondeterministic": 0,
        "error": 4,
        "skipped": 0,
    }


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_os_exit_in_process_is_caught_as_the_engine_dying(tmp_path, jobs):
    """`os._exit(0)` under `--in-process --jobs 1` once ended the run itself with exit 0: read by CI as a pass."""
    rc, cert, _ = certify(
        tmp_path, M + "exits_at_step_2", "--jobs", jobs, "--in-process", "--max-errors", "9", workloads=2
    )
    assert rc == 3 and cert["outcomes"]["error"] == 2
    assert all(e["kind"] == "died" and "os._exit(3)" in e["cause"] for e in cert["errors"])


def test_a_crash_fails_even_under_allow_divergence(tmp_path):
    rc, cert, _ = certify(tmp_path, P + "crashing", "--allow-divergence", workloads=2)
    assert rc == 1 and not cert["passed"] and cert["verdict"] == "failed"
    assert all(c["crash"] for c in cert["counterexamples"]) and not cert["departures"]


def test_a_departure_of_values_is_forgiven_under_allow_divergence(tmp_path):
    rc, cert, _ = certify(tmp_path, P + "ghost_preemption_at_step_1", "--allow-divergence", workloads=2)
    assert cert["departures"] and not any(c["crash"] for c in cert["counterexamples"])
    assert rc == (0 if not cert["invariant_violations"] else 1)


def test_a_random_engine_is_reported_nondeterministic_and_its_counterexamples_replay(tmp_path):
    rc, cert, out = certify(tmp_path, M + "coin_flip", workloads=30, name="coin")
    det = cert["determinism"]
    assert rc == 1 and det["nondeterministic"]
    # Every workload whose two runs differed was run twice, and none of them reads as matched: a divergence
    # that did not come back once counted as `matched`, and the line could say more differed than ran twice.
    assert len(det["nondeterministic"]) <= det["checked"]
    assert cert["outcomes"]["nondeterministic"] == len(det["nondeterministic"])
    assert sum(cert["outcomes"].values()) == 30
    assert any(isinstance(n["first"], dict) for n in det["nondeterministic"])  # a divergence that did not return
    for n in det["nondeterministic"]:
        assert n["first"] != n["second"]  # both runs are in the report
    for c in cert["counterexamples"]:  # every one reported reproduced twice before it was shrunk or written
        assert Counterexample.load(c["file"]).divergence["field"] == c["field"]


def test_an_engine_that_mutates_what_it_returned_is_judged_on_what_it_returned(tmp_path):
    assert diff(BUILTIN["seed-preemption"](), ReferenceEngine, mutating).outcome == "diverged"  # read late: wrong
    for mode in ("--isolate", "--in-process"):
        rc, cert, _ = certify(tmp_path, M + "mutating", mode, workloads=3, name=mode.strip("-"))
        assert rc == 0 and cert["passed"], mode


def test_certify_writes_counterexample_that_replays(tmp_path):
    rc, cert, out = certify(tmp_path, P + "extra_token_at_step_3")
    assert rc == 1
    assert not cert["passed"] and cert["counterexamples"]
    cx_file = cert["counterexamples"][0]["file"]
    cx = Counterexample.load(cx_file)
    assert cx.divergence["step"] == 3 and cx.divergence["field"] == "output.num_scheduled_tokens"
    assert "<testsuite" in (out / "junit.xml").read_text() and "<failure" in (out / "junit.xml").read_text()
    assert main(["replay", cx_file]) == 1  # still diverges
    assert main(["replay", cx_file, "--engine", "reference"]) == 0  # against a correct engine it agrees


def test_max_counterexamples_lists_the_rest_unshrunk(tmp_path):
    rc, cert, out = certify(tmp_path, P + "extra_token_at_step_3", "--max-counterexamples", "1", workloads=3)
    shrunk = [c for c in cert["counterexamples"] if c["shrunk"]]
    assert rc == 1 and len(shrunk) == 1 and len(cert["counterexamples"]) == 3
    assert all("max-counterexamples" in c["shrink_note"] for c in cert["counterexamples"] if not c["shrunk"])
    assert all(os.path.exists(c["file"]) for c in cert["counterexamples"])


@pytest.mark.parametrize(
    "argv,field",
    [
        (["certify", "--engine", "nope"], "--engine"),
        (["certify", "--engine", "reference", "--against", "nope"], "--against"),
        (["certify", "--engine", "reference", "--shard", "3/2"], "--shard"),
        (["certify", "--engine", "reference", "--family", "bogus"], "--family"),
        (["certify", "--engine", "no_such_module:f"], "--engine"),
        (["certify", "--engine", "reference", "--jobs", "0"], "--jobs"),
        (["certify", "--engine", "reference", "--jobs", "-1"], "--jobs"),
        (["certify", "--engine", "reference", "--step-timeout", "0"], "--step-timeout"),
        (["certify", "--engine", "reference", "--start-timeout", "-5"], "--start-timeout"),
        (["certify", "--engine", "reference", "--shrink-budget", "-1"], "--shrink-budget"),
        (["certify", "--engine", "reference", "--max-errors", "0"], "--max-errors"),
    ],
    ids=lambda x: x if isinstance(x, str) else "-".join(x[2:]),
)
def test_bad_certify_arguments_are_one_line_errors(argv, field, capsys, tmp_path):
    assert main(argv + ["--out", str(tmp_path / "c")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("schedspec: error: " + field) and "\n" not in err


def test_a_second_run_that_differs_is_nondeterminism_not_a_pass(tmp_path):
    rc, cert, _ = certify(tmp_path, M + "every_second_run_differs", workloads=1, name="flaky")
    assert rc == 1 and not cert["passed"] and cert["outcomes"]["matched"] == 0
    assert cert["outcomes"]["nondeterministic"] == 1 and cert["determinism"]["checked"] == 1
    (n,) = cert["determinism"]["nondeterministic"]
    assert n["first"] == "matched" and n["second"]["field"] == "output.num_scheduled_tokens"


@pytest.mark.parametrize("jobs", ["1", "2"])
@pytest.mark.parametrize("where", ["--isolate", "--in-process"])
def test_sys_exit_inside_an_engine_is_an_error_never_a_pass(tmp_path, where, jobs):
    """`sys.exit(0)` in schedule() once ended certify with exit 0 and an empty --out (in process), or read as a
    kill (in its own process). It is the engine dying, named as such, in every mode."""
    rc, cert, _ = certify(tmp_path, M + "sys_exit_at_step_2", where, "--jobs", jobs, "--max-errors", "9", workloads=2)
    assert rc == 3 and cert is not None and cert["verdict"] == "error" and cert["outcomes"]["error"] == 2
    assert all(e["kind"] == "died" and "sys.exit(0)" in e["cause"] for e in cert["errors"]), cert["errors"]


def test_a_shard_that_holds_no_workload_is_an_empty_passing_certificate(tmp_path):
    """A CI matrix with more shards than workloads: `--workloads 2 --shard 3/4` once raised IndexError (exit 1)."""
    rc, cert, out = certify(tmp_path, "reference", "--shard", "3/4", workloads=2)
    assert rc == 0 and cert["passed"] and cert["campaign"]["empty_shard"] and cert["workloads_run"] == 0
    assert cert["outcomes"] == {"matched": 0, "diverged": 0, "nondeterministic": 0, "error": 0, "skipped": 0}
    assert "empty: this shard holds no workload" in (out / "certificate.md").read_text()


@settings(max_examples=200, derandomize=True, deadline=None)
@given(workloads=st.integers(1, 60), parts=st.integers(1, 80), families=st.integers(1, 12))
def test_the_shards_of_a_campaign_partition_its_workloads(workloads, parts, families):
    """Any campaign, any split, more shards than workloads included: the shards' workloads are disjoint, together
    the whole campaign, and a shard past the workloads is empty, not an IndexError."""
    from schedspec.conformance.campaign.certify import FAMILIES, Shard, plan
    from schedspec.conformance.engines.engine_spec import parse_engine

    ref = parse_engine("reference")
    chosen = list(FAMILIES)[:families]

    def names(shard):
        return [f"{t.family}-{t.index}" for t in plan(ref, ref, "blocks", chosen, workloads, 0, shard, "x")]

    whole = names(Shard(0, 1))
    shares = [names(Shard(i, parts)) for i in range(parts)]
    assert sorted(x for p in shares for x in p) == sorted(whole) and len(set(whole)) == workloads
    assert all(not shares[i] for i in range(workloads, parts))


def test_replay_takes_the_step_timeout_its_hint_names(tmp_path, capsys):
    """A hanging engine's replay ends in the error whose fix says `--step-timeout`; replay once refused it."""
    rc, cert, _ = certify(tmp_path, P + "extra_token_at_step_3")
    cx_file = cert["counterexamples"][0]["file"]
    t0 = time.monotonic()
    assert main(["replay", cx_file, "--engine", P + "hanging", "--step-timeout", "1"]) == 3
    out = capsys.readouterr().out
    assert "--step-timeout" in out and time.monotonic() - t0 < 30
    assert main(["replay", cx_file, "--step-timeout", "0"]) == 2  # refused as certify refuses it


MISTYPED = {
    "token_count_as_string": ("schedule().num_scheduled_tokens", "' is of type str"),
    "token_count_as_bool": ("schedule().num_scheduled_tokens", "True is of type bool"),
    "token_count_as_float": ("schedule().num_scheduled_tokens", "is of type float"),
    "free_blocks_as_string": ("summary().num_free_blocks", "is of type str"),
    "block_id_none": ("schedule().scheduled_new_reqs[0].block_ids[0]", "None is of type NoneType"),
}


@pytest.mark.parametrize(
    "engine,mode", [(e, m) for e in MISTYPED for m in ("--isolate", "--in-process")] + [("token_count_as_bool", "-j2")]
)
def test_a_mistyped_answer_is_malformed_in_certify(tmp_path, engine, mode):
    """A string count once crashed a monitor (exit 1, no certificate); `True` and `1.0` passed."""
    extra = ["--jobs", "2", "--in-process"] if mode == "-j2" else [mode]
    rc, cert, _ = certify(tmp_path, M + engine, *extra, "--max-errors", "9", workloads=2)
    field, why = MISTYPED[engine]
    assert rc == 3 and cert["verdict"] == "error" and not cert["counterexamples"], cert
    assert all(e["kind"] == "malformed" and field in e["cause"] and why in e["cause"] for e in cert["errors"])


def test_a_mistyped_answer_is_malformed_in_hunt_and_replay(tmp_path, capsys):
    """hunt once reported `'1'` vs `1` as a divergence, and replay of it crashed."""
    engine = M + "token_count_as_string"
    assert main(["hunt", "--engine", engine, "--examples", "5", "--out", str(tmp_path / "hunt")]) == 3
    assert "malformed" in capsys.readouterr().out
    assert not list((tmp_path / "hunt").glob("counterexample*"))
    rc, cert, _ = certify(tmp_path, P + "extra_token_at_step_3")
    assert main(["replay", cert["counterexamples"][0]["file"], "--engine", engine]) == 3
    assert "' is of type str" in capsys.readouterr().out


def test_progress_and_summary_count_errors_and_skips_alike(tmp_path, capsys):
    """Progress once said "6 errors" where the certificate said "5 error, 1 skipped"."""
    rc, cert, _ = certify(tmp_path, M + "exits_at_step_2", "--max-errors", "2", workloads=3)
    captured = capsys.readouterr()
    assert rc == 3 and cert["outcomes"]["error"] == 2 and cert["outcomes"]["skipped"] == 1
    assert (
        captured.err.strip()
        .splitlines()[-1]
        .split(": ", 1)[1]
        .startswith("3/3 workloads, 0 failed, 2 errors, 1 skipped")
    )
    assert (
        "2 error, 1 skipped" in captured.out
        and "2 workloads ended in an engine error and 1 were skipped" in captured.out
    )


def test_hunt_of_an_engine_that_cannot_be_named_leaves_no_folder(tmp_path):
    assert main(["hunt", "--engine", "bogus", "--out", str(tmp_path / "h")]) == 2
    assert main(["hunt", "--engine", "no_such_module:make", "--out", str(tmp_path / "h")]) == 2
    assert not (tmp_path / "h").exists()
