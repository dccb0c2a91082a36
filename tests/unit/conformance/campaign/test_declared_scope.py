"""An engine declares the deployment features it models by their optional methods (`declared_scope.py`): a default
campaign leaves the others out and says so; one that asks for them is refused in one line."""

from __future__ import annotations

import json

import pytest

from schedspec.cli import main
from schedspec.conformance.engines.declared_scope import engine_class, missing_features
from schedspec.conformance.engines.engine_spec import parse_engine
from schedspec.reference_impl import ReferenceEngine
from schedspec.spec.config import SchedulerConfig

CONFIG = SchedulerConfig(max_num_batched_tokens=64, block_size=4, num_gpu_blocks=16)


def test_the_class_is_read_from_the_factory_or_its_return_annotation():
    def make(config) -> ReferenceEngine:
        return ReferenceEngine(config)

    def unannotated(config):
        return ReferenceEngine(config)

    assert engine_class(ReferenceEngine) is ReferenceEngine and engine_class(make) is ReferenceEngine
    assert engine_class(unannotated) is None  # says nothing: the core protocol only
    assert missing_features(parse_engine("torch")) == {} and missing_features(parse_engine("reference")) == {}


def test_an_engine_without_grammar_compiled_declares_it_out_of_scope(tmp_path, capsys, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "core_only.py").write_text(
        "from schedspec.reference_impl import ReferenceEngine\n"
        "class CoreOnly(ReferenceEngine):\n"
        "    grammar_compiled = None  # not callable: structured output declared out of scope\n"
    )
    out = tmp_path / "cert"
    argv = ["certify", "--engine", "core_only:CoreOnly", "--in-process", "--workloads", "17", "--out", str(out)]
    assert main([*argv[:6], "--family", "structured-output", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "outside the declared scope" in err[0] and "grammar_compiled" in err[0], err
    assert main(argv) == 0
    campaign = json.loads((out / "certificate.json").read_text())["campaign"]
    assert "structured-output" not in campaign["families"] and list(campaign["families_out_of_scope"]) == [
        "structured-output"
    ]
    assert "outside the engine's declared scope" in (out / "certificate.md").read_text()


def test_a_grammar_given_to_an_engine_without_the_method_is_one_line_naming_it():
    """The engine loop itself refuses, so a workload file run on such an engine never ends in an AttributeError."""
    import pytest

    from schedspec.spec.engine import run
    from schedspec.spec.errors import SpecError
    from schedspec.spec.request import Request
    from schedspec.spec.workload import Grammar, Workload, WorkloadRequest

    class CoreOnly(ReferenceEngine):
        grammar_compiled = None

    w = Workload(CONFIG, (WorkloadRequest(Request("g", (1, 2, 3), 2), 0, (), (), Grammar(1)),))
    with pytest.raises(SpecError, match="outside the engine's declared scope .*grammar_compiled"):
        run(CoreOnly(CONFIG), w)


def test_an_engine_that_does_not_name_pooling_is_refused_the_pooling_family_in_one_line(tmp_path, capsys, monkeypatch):
    """Pooling reaches an engine through the config and the pooled ids alone (`DECLARED_FEATURES`): an engine that
    names the other features but not `pooling` is refused the family before anything runs."""
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "no_pooling.py").write_text(
        "from schedspec.reference_impl import ReferenceEngine\n"
        "class NoPooling(ReferenceEngine):\n"
        "    features = frozenset({'lora', 'pipeline-parallel', 'prefill-cadence'})\n"
    )
    argv = ["certify", "--engine", "no_pooling:NoPooling", "--in-process", "--workloads", "22", "--family", "pooling"]
    assert main([*argv, "--out", str(tmp_path / "cert")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "outside the declared scope" in err[0] and "'pooling'" in err[0], err
    assert not (tmp_path / "cert" / "certificate.json").exists()


@pytest.mark.parametrize("isolate", [True, False], ids=["isolated", "in-process"])
def test_a_user_s_engine_gets_the_optional_calls_through_the_harness_s_wrappers(tmp_path, monkeypatch, isolate):
    """A third-party engine runs behind a wrapper (its own process, or answers copied in process): the wrapper
    passes the deployment features' calls on, the cache reset's answer included, and a finish from outside."""
    from schedspec.conformance.engines.registry import engine_factory
    from schedspec.spec.controls import Control
    from schedspec.spec.engine import run
    from schedspec.spec.request import Request, RequestStatus
    from schedspec.spec.workload import Abort, Workload, WorkloadRequest

    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "users_engine.py").write_text(
        "from schedspec.reference_impl import ReferenceEngine\nclass Users(ReferenceEngine):\n    name = 'users'\n"
    )
    requests = tuple(
        WorkloadRequest(Request(rid, tuple(range(10 + i, 16 + i)), 8, ignore_eos=True), i) for i, rid in enumerate("ab")
    )
    controls = (Control(2, "reset_prefix_cache", reset_running_requests=True), Control(3, "pause", mode="wait"))
    w = Workload(CONFIG, requests, (Abort(4, "a", status=RequestStatus.FINISHED_STOPPED),), max_steps=30)
    w = w.replace(controls=(*controls, Control(6, "resume")))
    factory = engine_factory(parse_engine("users_engine:Users"), isolate=isolate)
    engine = factory(w.config)
    try:
        got = run(engine, w)
    finally:
        getattr(engine, "close", lambda: None)()
    want = run(ReferenceEngine(w.config), w)
    assert [s.to_json() for s in got.steps] == [s.to_json() for s in want.steps]
    assert any(s.controls for s in got.steps) and got.steps[4].finished["a"].status == RequestStatus.FINISHED_STOPPED
