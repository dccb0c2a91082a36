"""The real vLLM 0.33.0 scheduler against the reference, on the built-in workloads.

The vLLM tests need the separate vLLM venv (`conformance/vllm_env/setup_vllm_ref.sh`,
~60-90 s, 1.5 GB); they are skipped when it is absent, never built from here.
They get their engines from one `SharedDriverFactory`, as the harness does, so
one driver process serves the whole module (starting one costs ~5 s).

The pipe's failure modes (timeout, crash, garbage) are tested against fake
drivers, so they run everywhere.
"""

from __future__ import annotations

import os
import stat
import textwrap
from pathlib import Path

import pytest

from schedspec.conformance.engines.vllm import STAMP_NAME, VllmEngine, ensure_vllm_venv, vllm_venv_ready
from schedspec.conformance.engines.vllm_pool import SharedDriverFactory, vllm_engine_factory
from schedspec.conformance.workloads.builtin import BUILTIN
from schedspec.reference_impl import simulate
from schedspec.spec.config import SchedulerConfig
from schedspec.spec.engine import run
from schedspec.spec.errors import SpecError
from schedspec.spec.trace import Trace

needs_vllm = pytest.mark.skipif(
    not vllm_venv_ready(), reason="no vLLM venv; build it with conformance/vllm_env/setup_vllm_ref.sh"
)


@pytest.fixture(scope="module")
def factory():
    f = vllm_engine_factory()
    yield f
    f.close_all()


def _trace(factory: SharedDriverFactory, name: str) -> Trace:
    w = BUILTIN[name]()
    with factory(w.config) as engine:
        return run(engine, w)


def _first_divergence(a: object, b: object, path: str = "") -> str | None:
    """The first path at which two JSON values differ, with both values: what a failure should say."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in list(a) + [k for k in b if k not in a]:
            if k not in a or k not in b:
                return f"{path}.{k}: vllm={a.get(k, '<absent>')!r} reference={b.get(k, '<absent>')!r}"
            d = _first_divergence(a[k], b[k], f"{path}.{k}")
            if d:
                return d
        return None
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            d = _first_divergence(x, y, f"{path}[{i}]")
            if d:
                return d
        return None
    return None if a == b else f"{path}: vllm={a!r} reference={b!r}"


@needs_vllm
@pytest.mark.parametrize("name", sorted(BUILTIN))
def test_vllm_matches_the_reference(factory: SharedDriverFactory, name: str) -> None:
    ours = _trace(factory, name).to_json()
    theirs = simulate(BUILTIN[name]()).to_json()
    assert ours.pop("engine") == "vllm" and theirs.pop("engine") == "reference"
    assert ours == theirs, f"first divergence at {_first_divergence(ours, theirs)}"


@needs_vllm
def test_long_prompt_is_chunked_around_the_decodes(factory: SharedDriverFactory) -> None:
    # vllm-0.33-on-cpu.md section 9, scenario 1: 8192 - 200 decodes = 7992 per step.
    steps = _trace(factory, "seed-long-prompt").steps
    assert [s.output.num_scheduled_tokens.get("long") for s in steps[1:5]] == [7992, 7992, 4016, 1]
    assert all(len(s.output.num_scheduled_tokens) == 201 for s in steps[1:5])


@needs_vllm
def test_preemption_trace_matches_the_guide(factory: SharedDriverFactory) -> None:
    # vllm-0.33-on-cpu.md section 9, scenario 2, step by step.
    t = _trace(factory, "seed-preemption")
    preempted = [(s.step, sorted(s.output.preempted_req_ids)) for s in t.steps if s.output.preempted_req_ids]
    assert preempted == [(5, ["p3"]), (37, ["p2"])]
    s40 = t.steps[40]
    assert dict(s40.output.num_scheduled_tokens) == {"p2": 97, "p3": 65}
    assert [(r.req_id, r.resumed) for r in s40.output.scheduled_new_reqs] == [("p2", True), ("p3", True)]
    assert s40.output.finished_req_ids == {"p0", "p1"}
    assert [t.steps[i].state.num_free_blocks for i in (0, 5, 37, 40, 43, 75)] == [3, 4, 5, 7, 14, 19]
    assert (len(t.steps), t.end) == (76, "drained")


@needs_vllm
def test_abort_reports_the_request_once(factory: SharedDriverFactory) -> None:
    w = BUILTIN["seed-preemption"]()
    with factory(w.config) as engine:
        engine.add_request(w.requests[0].request)
        first = engine.abort_request("p0")
        assert first is not None and first.status.name == "FINISHED_ABORTED"
        assert engine.abort_request("p0") is None
        assert engine.summary().requests == {}


@needs_vllm
def test_the_factory_reuses_one_driver(factory: SharedDriverFactory) -> None:
    with factory(SchedulerConfig()) as a:
        pid = a._proc.pid
    with factory(SchedulerConfig(policy="priority")) as b:
        assert b._proc.pid == pid and b.config.policy == "priority"
    with pytest.raises(SpecError, match="used after close"):
        b.schedule()


@needs_vllm
def test_async_outputs_are_absorbed_oldest_first(factory: SharedDriverFactory) -> None:
    """The driver keeps every scheduled output until it is updated; an update must name the oldest, as
    vLLM's batch queue does (vllm/v1/engine/core.py:EngineCore.step_with_batch_queue), and a refused update leaves the
    driver serving."""
    from schedspec.spec.output import ModelRunnerOutput
    from schedspec.spec.request import Request

    with factory(SchedulerConfig(async_scheduling=True)) as engine:
        engine.add_request(Request(request_id="a", prompt_token_ids=(1,) * 10, max_tokens=4, ignore_eos=True))
        first, second = engine.schedule(), engine.schedule()
        assert (dict(first.num_scheduled_tokens), dict(second.num_scheduled_tokens)) == ({"a": 10}, {"a": 1})
        with pytest.raises(SpecError, match="oldest pending"):
            engine.update_from_output(second, ModelRunnerOutput({"a": (5,)}))
        engine.update_from_output(first, ModelRunnerOutput({"a": (5,)}))
        assert engine.summary().requests["a"].num_tokens == 11


@needs_vllm
def test_the_driver_builds_the_features_the_spec_assumes(factory: SharedDriverFactory) -> None:
    """init refuses a vLLM that would not honour a knob; here every combination builds (k up to 4)."""
    for k in (0, 1, 4):
        for caching in (False, True):
            for async_scheduling in (False, True):
                cfg = SchedulerConfig(
                    num_speculative_tokens=k, enable_prefix_caching=caching, async_scheduling=async_scheduling
                )
                with factory(cfg) as engine:
                    assert engine.schedule().num_scheduled_tokens == {}


# ---- the pipe's failure modes, against fake drivers --------------------------------


def _fake_venv(tmp_path: Path, body: str) -> Path:
    """A "venv" whose python is a shell script: enough to test the engine's side of the pipe."""
    (tmp_path / "bin").mkdir()
    python = tmp_path / "bin" / "python"
    python.write_text("#!/bin/sh\n" + textwrap.dedent(body))
    python.chmod(python.stat().st_mode | stat.S_IEXEC)
    (tmp_path / STAMP_NAME).write_text("fake\n")
    return tmp_path


@pytest.mark.parametrize(
    "body, why",
    [
        ("sleep 30\n", "no reply within 0.5 s"),
        ("echo 'oops: fatal' >&2; exit 3\n", "the driver exited"),  # before or after the write
        ("echo 'not json'; sleep 30\n", "malformed reply"),
        (
            "read line; echo '{\"ok\": true}'; read line; echo '{\"num_scheduled_tokens\": 1}'; sleep 30\n",
            "malformed reply",
        ),
    ],
)
def test_a_broken_driver_is_a_one_line_spec_error(tmp_path: Path, body: str, why: str) -> None:
    venv = _fake_venv(tmp_path, body)
    with pytest.raises(SpecError) as err:
        with VllmEngine(SchedulerConfig(), venv=venv, init_timeout_s=0.5, step_timeout_s=0.5) as e:
            e.schedule()
    message = str(err.value)
    assert why in message and "\n" not in message
    assert ("op 'schedule' at step 0" if "num_scheduled" in body else "op 'init'") in message
    if "oops" in body:
        assert "exit code 3" in message and "oops: fatal" in message


def test_an_error_reply_keeps_the_driver(tmp_path: Path) -> None:
    venv = _fake_venv(
        tmp_path,
        """\
        read line; echo '{"ok": true, "vllm_version": "fake"}'
        read line; echo '{"error": "AssertionError: nope"}'
        read line; echo '{"finished": null}'
        read line; echo '{"ok": true}'
        """,
    )
    with VllmEngine(SchedulerConfig(), venv=venv, init_timeout_s=5, step_timeout_s=5) as e:
        with pytest.raises(SpecError, match="op 'abort' at step 0: vLLM refused it: AssertionError: nope"):
            e.abort_request("x")
        assert e.abort_request("x") is None


def test_a_missing_venv_says_how_to_build_it(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="setup_vllm_ref.sh"):
        VllmEngine(SchedulerConfig(), venv=tmp_path / "nowhere")


def test_a_failed_build_says_what_to_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHON", str(tmp_path / "no-such-python"))
    with pytest.raises(SpecError, match=r"could not be built \(exit \d+: .*\); run `bash .*setup_vllm_ref.sh` by hand"):
        ensure_vllm_venv(tmp_path / "venv")
    assert not os.path.exists(tmp_path / "venv" / STAMP_NAME)


def test_a_broken_driver_is_not_reused(tmp_path: Path) -> None:
    venv = _fake_venv(
        tmp_path,
        """\
        while read line; do
            case "$line" in
                *close*) echo '{"ok": true}'; exit 0;;
                *init*) echo '{"ok": true, "vllm_version": "fake"}';;
                *) sleep 30;;
            esac
        done
        """,
    )
    f = SharedDriverFactory(venv=venv, init_timeout_s=5, step_timeout_s=0.5)
    with f(SchedulerConfig()) as a:
        pid = a._proc.pid
    with f(SchedulerConfig()) as b:
        assert b._proc.pid == pid
        with pytest.raises(SpecError, match="no reply within 0.5 s"):
            b.summary()
    with f(SchedulerConfig()) as c:
        assert c._proc.pid != pid
    f.close_all()


@needs_vllm
@pytest.mark.parametrize("family", ["aborts", "async", "kv-pressure", "spec-decode"])
def test_vllm_agrees_on_aborts_between_the_schedule_and_the_update(factory: SharedDriverFactory, family: str) -> None:
    """EngineCore drains its aborts queue after the model ran and before `update_from_output`
    (vllm/v1/engine/core.py:EngineCore.step): vLLM itself, driven so, agrees with the reference's mid-step aborts."""
    from schedspec.conformance.harness.differ import diff
    from schedspec.conformance.workloads.families import generate
    from schedspec.reference_impl import ReferenceEngine
    from schedspec.spec.workload import Abort

    mid_steps = 0
    for i in range(3):
        w = generate(family, 5, i)
        extra = tuple(Abort(1 + (k % 4), r.request_id, True) for k, r in enumerate(w.requests[:4]))
        w = w.replace(aborts=w.aborts + extra)
        result = diff(w, ReferenceEngine, factory, "blocks", keep_records=True)
        assert result.outcome == "matched", (w.name, result.divergence, result.error)
        mid_steps += sum(1 for r in result.records_b if r.aborted_mid_step)
    assert mid_steps > 0


@needs_vllm
@pytest.mark.parametrize(
    ("family", "index"),
    [("pipeline-parallel", 4), ("pipeline-parallel", 8), ("prefill-cadence", 0), ("prefill-cadence", 3)],
)
def test_vllm_agrees_on_the_pipeline_and_the_prefill_cadence(
    factory: SharedDriverFactory, family: str, index: int
) -> None:
    """Pipeline parallel (a batch queue of pp, the async decode cadence) and the prefill cadence (the local one, and
    a DP engine core's `schedule(throttle_prefills=True)`), through the driver at level `blocks`."""
    from schedspec.conformance.harness.differ import diff
    from schedspec.conformance.workloads.families import generate
    from schedspec.reference_impl import ReferenceEngine

    w = generate(family, 0, index)
    result = diff(w, ReferenceEngine, factory, "blocks", keep_records=True)
    assert result.outcome == "matched", (w.name, result.divergence, result.error)
    flags = [r.throttle_prefills for r in result.records_b]
    assert any(flags) == bool(w.throttle_prefills)
