"""The pure parts of `schedspec.live`: settings, capture rotation, scope detection, token hashing, step cutting.

They load without vLLM (the scheduler classes, which import it, are resolved lazily), so they are tested here
in the project venv; tests/campaigns/test_live_monitored.py runs the whole inside vLLM.
"""

import json
from types import SimpleNamespace

import pytest

from schedspec.live import capture, scope, settings
from schedspec.live.online import monitor_names
from schedspec.live.steps import StepAssembler
from schedspec.spec.capture_format import SPACE, TokenHasher
from schedspec.spec.output import ModelRunnerOutput, SchedulerOutput
from schedspec.spec.trace import StateSummary

# ---- settings -------------------------------------------------------------------------------------------------


def test_settings_parse_every_field():
    s = settings.parse(
        "mode=raise,capture=/tmp/c.jsonl,sample=3,invariants=a;b,hash_token_ids=1,max_bytes=8192,max_parts=2"
    )
    assert (s.mode, s.capture, s.sample, s.invariants, s.hash_token_ids, s.max_bytes, s.max_parts) == (
        "raise",
        "/tmp/c.jsonl",
        3,
        ("a", "b"),
        True,
        8192,
        2,
    )
    assert settings.parse("") == settings.LiveSettings()


@pytest.mark.parametrize(
    "text, field, value",
    [
        ("mode=loud", "mode", "loud"),
        ("sample=0", "sample", "0"),
        ("sample=x", "sample", "x"),
        ("hash_token_ids=maybe", "hash_token_ids", "maybe"),
        ("max_bytes=10", "max_bytes", "10"),
    ],
)
def test_a_bad_setting_is_one_line_naming_field_and_value(text, field, value):
    with pytest.raises(settings.LiveSettingsError) as e:
        settings.parse(text)
    msg = str(e.value)
    assert "\n" not in msg and f"field {field!r} = {value!r}" in msg


def test_unknown_fields_and_bad_syntax_are_refused():
    with pytest.raises(settings.LiveSettingsError, match="'mod' is not a setting"):
        settings.parse("mod=raise")
    with pytest.raises(settings.LiveSettingsError, match="not key=value"):
        settings.parse("raise")


def test_the_config_file_wins_over_the_env_var(tmp_path):
    path = tmp_path / "live.json"
    path.write_text(json.dumps({"mode": "off", "invariants": ["block-conservation"]}))
    s = settings.from_environ({settings.ENV: "mode=raise", settings.CONFIG_ENV: str(path)})
    assert s.mode == "off" and s.invariants == ("block-conservation",)
    path.write_text("[1]")
    with pytest.raises(settings.LiveSettingsError, match="JSON object"):
        settings.from_environ({settings.CONFIG_ENV: str(path)})


# ---- capture --------------------------------------------------------------------------------------------------


def lines(path):
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_capture_rotates_at_max_bytes_and_stops_at_max_parts(tmp_path):
    path = tmp_path / "cap.jsonl"
    w = capture.CaptureWriter(str(path), {"kind": "header", "session": "s"}, max_bytes=4096, max_parts=3)
    n = 0
    while w.write({"kind": "schedule", "step": n, "pad": "x" * 200}):
        n += 1
    assert w.full and n > 10
    parts = [path, tmp_path / "cap.jsonl.1", tmp_path / "cap.jsonl.2"]
    assert all(p.exists() for p in parts) and not (tmp_path / "cap.jsonl.3").exists()
    for i, p in enumerate(parts[:2]):
        assert p.stat().st_size <= 4096
        head = lines(p)[0]
        assert head["part"] == i and head["session"] == "s"
    assert lines(parts[1])[0]["first_step"] == lines(parts[0])[-1]["step"] + 1
    assert lines(parts[2])[-1] == {"kind": "end", "step": n - 1, "reason": "capture-full"}
    w.close(n)  # nothing after capture-full
    assert lines(parts[2])[-1]["reason"] == "capture-full"


def test_a_second_session_appends_and_never_overwrites(tmp_path):
    path = tmp_path / "cap.jsonl"
    for session in ("a", "b"):
        w = capture.CaptureWriter(str(path), {"kind": "header", "session": session}, 1 << 20, 8)
        w.write({"kind": "schedule", "step": 0})
        w.close(1)
    got = [(d["kind"], d.get("session")) for d in lines(path)]
    assert got == [
        ("header", "a"),
        ("schedule", None),
        ("end", None),
        ("header", "b"),
        ("schedule", None),
        ("end", None),
    ]


# ---- scope ----------------------------------------------------------------------------------------------------


def fake_config(**changes):
    base = {
        "lora_config": None,
        "kv_transfer_config": None,
        "model_config": SimpleNamespace(is_multimodal_model=False, is_encoder_decoder=False, runner_type="generate"),
        "parallel_config": SimpleNamespace(pipeline_parallel_size=1),
        "scheduler_config": SimpleNamespace(max_num_queued_reqs=None, prefill_schedule_interval=1),
        "speculative_config": None,
    }
    return SimpleNamespace(**{**base, **changes})


def test_scope_sees_nothing_in_what_the_spec_models():
    assert scope.config_features(fake_config()) == []
    assert scope.config_features(fake_config(parallel_config=SimpleNamespace(pipeline_parallel_size=4))) == []
    for method in ("ngram", "ngram_gpu"):  # the drafters without lookahead or draft slots (spec/config.py)
        assert scope.config_features(fake_config(speculative_config=SimpleNamespace(method=method))) == []


@pytest.mark.parametrize(
    "changes, name",
    [
        ({"kv_transfer_config": object()}, "kv-connector"),
        ({"parallel_config": SimpleNamespace(decode_context_parallel_size=2)}, "decode-context-parallel"),
        ({"model_config": SimpleNamespace(is_multimodal_model=True)}, "multimodal"),
        ({"model_config": SimpleNamespace(runner_type="draft")}, "runner_type draft"),
        ({"speculative_config": SimpleNamespace(method="eagle", max_num_new_slots_for_drafting=1)}, "method eagle"),
        ({"speculative_config": SimpleNamespace(method="suffix")}, "method suffix"),
        ({"speculative_config": SimpleNamespace(method="ngram", max_num_new_slots_for_drafting=1)}, "lookahead"),
        ({"diffusion_config": SimpleNamespace(canvas_length=8)}, "diffusion"),
    ],
)
def test_scope_names_each_unmodelled_feature(changes, name):
    (found,) = scope.config_features(fake_config(**changes))
    assert name in found


def test_scope_declares_async_pipeline_parallel_on_the_v1_model_runner():
    """AsyncScheduler stamps the PP decode cadence only for the V2 model runner, whose layout the spec models
    (vLLM 0.28.0's own PP test builds a V1 one); synchronous PP, or PP on the V2 runner, stays in scope."""
    pp = fake_config(parallel_config=SimpleNamespace(pipeline_parallel_size=2))
    v1, v2 = SimpleNamespace(use_v2_model_runner=False), SimpleNamespace(use_v2_model_runner=True)
    (found,) = scope.config_features(pp, None, v1, async_scheduling=True)
    assert "V1 model runner" in found
    assert scope.config_features(pp, None, v1, async_scheduling=False) == []
    assert scope.config_features(pp, None, v2, async_scheduling=True) == []


def test_scope_of_a_built_scheduler_changed_between_calls():
    """vLLM's tests turn these on after construction; the session reads them before every call."""
    plain = SimpleNamespace(defer_block_free=False, connector=None)
    assert scope.scheduler_features(plain) == []
    (deferred,) = scope.scheduler_features(SimpleNamespace(defer_block_free=True, connector=None))
    (bound,) = scope.scheduler_features(SimpleNamespace(defer_block_free=False, connector=object()))
    assert "deferred block frees" in deferred and "kv-connector" in bound
    pipeline = SimpleNamespace(defer_block_free=False, connector=None, pp_size=3, use_pp=True)
    assert scope.scheduler_features(pipeline) == []  # pipeline parallel is modelled (docs/features.md)

    class Manager:
        def allocate_slots(self):
            return None

    manager = Manager()
    spied = SimpleNamespace(defer_block_free=False, connector=None, kv_cache_manager=manager)
    assert scope.scheduler_features(spied) == []
    manager.allocate_slots = lambda: None  # what vLLM's test_prefix_cache_stats_... does with a spy
    (spy,) = scope.scheduler_features(spied)
    assert spy == "kv_cache_manager.allocate_slots replaced on the instance"


def test_scope_per_request_and_release():
    plain = SimpleNamespace(prompt_token_ids=[1], mm_features=[], sampling_params=object())
    assert scope.request_features(plain) == []
    grammar = SimpleNamespace(prompt_token_ids=[1], structured_output_request=object(), sampling_params=object())
    assert scope.request_features(grammar) == []  # structured output is judged (docs/live.md)
    lora = SimpleNamespace(prompt_token_ids=[1], lora_request=object(), sampling_params=object())
    assert scope.request_features(lora) == []  # LoRA is judged too
    pooling = SimpleNamespace(prompt_token_ids=[1], pooling_params=object(), sampling_params=None)
    assert scope.request_features(pooling) == []  # a pooling model's request: judged (spec/config.py `runner`)
    both = SimpleNamespace(prompt_token_ids=[1], pooling_params=object(), sampling_params=object())
    assert "both or neither" in scope.request_features(both)[0]
    assert scope.release_feature("0.33.0") is None and "0.34.0" in scope.release_feature("0.34.0")


# ---- hashing --------------------------------------------------------------------------------------------------


def test_hashing_is_keyed_deterministic_and_keeps_placeholders():
    h = TokenHasher(b"k" * 16)
    a = h.many([1, 2, 1, -1])
    assert a[0] == a[2] != a[1] and a[3] == -1 and all(0 <= t < SPACE for t in a[:3])
    assert TokenHasher(b"k" * 16).many([1]) == a[:1] != TokenHasher(b"j" * 16).many([1])
    assert len(set(h.many(range(20000)))) == 20000


# ---- step cutting ---------------------------------------------------------------------------------------------


def test_steps_are_cut_as_the_engine_loop_runs_them():
    """Async: A S | A S U | U — the schedule-only step waits for its own samples, which a later update brings."""
    out = []
    asm = StepAssembler(True, lambda step: StateSummary(), lambda rec, call: out.append((rec, call)))
    a, b = object(), object()
    o = SchedulerOutput(num_scheduled_tokens={"r": 1})
    asm.add("r")
    asm.prepare("S")
    asm.schedule(a, lambda: o)
    asm.prepare("A")
    asm.add("q")
    asm.schedule(b, lambda: o)
    asm.update(a, lambda: ModelRunnerOutput({"r": (5,)}), {})
    assert [(r.step, r.added, r.updated_step, r.in_flight, r.model_output.sampled_token_ids) for r, _ in out] == [
        (0, ("r",), None, (0,), {"r": (5,)})
    ]
    asm.prepare("U")
    asm.update(b, lambda: ModelRunnerOutput({"r": (6,)}), {})
    asm.close()
    got = [(r.step, r.added, r.updated_step, r.scheduled, r.in_flight) for r, _ in out]
    assert got == [(0, ("r",), None, True, (0,)), (1, ("q",), 0, True, (1,)), (2, (), 1, False, ())]


def test_a_light_record_runs_no_converter():
    """Sampled monitoring: a record no judged step needs keeps only the ids, and never converts vLLM's objects."""
    out, called = [], []
    full = SchedulerOutput(num_scheduled_tokens={"r": 1}, finished_req_ids=frozenset({"q"}))
    light = SchedulerOutput(num_scheduled_tokens={"r": 1}, finished_req_ids=frozenset({"q"}))

    def summary(step):
        called.append(("summary", step))
        return StateSummary(running=("r",))

    def sampled():
        called.append("sampled")
        return ModelRunnerOutput({"r": (5,)})

    asm = StepAssembler(False, summary, lambda rec, call: out.append(rec), full=lambda step: step == 1)
    for _ in range(2):
        asm.prepare("S")
        asm.schedule(object(), lambda: full, lambda: light)
        key = asm.flight[-1][1]
        asm.update(key, sampled, {})
        asm.close()
    assert called == ["sampled", ("summary", 1)]
    assert [r.state for r in out] == [StateSummary(), StateSummary(running=("r",))]
    assert [r.model_output for r in out] == [ModelRunnerOutput(), ModelRunnerOutput({"r": (5,)})]
    assert out[0].output.finished_req_ids == {"q"} and out[0].output is light and out[1].output is full


def test_monitor_names_cover_the_catalogue():
    names = monitor_names()
    assert "no-starvation-after-prepend" in names and "finished-reported-once" in names


def test_live_imports_only_spec_and_itself():
    """README's layout row for `live/` (`spec` only, plus vLLM at run time), checked as test_layers.py checks the
    others: `live` is not among test_layers.py's LAYERS, so it is checked here."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[3] / "live"
    broken = []
    for path in root.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                target = (node.module or "").split(".")[0] if node.level == 2 else "live"
                if node.level > 2 or (node.level == 2 and target != "spec"):
                    broken.append(f"{path.name}: {'.' * node.level}{node.module}")
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            names += [node.module] if isinstance(node, ast.ImportFrom) and not node.level and node.module else []
            for name in names:
                parts = name.split(".")
                if parts[0] == "schedspec" and (len(parts) < 2 or parts[1] not in ("spec", "live")):
                    broken.append(f"{path.name}: {name}")
                if parts[0] not in ("schedspec", "vllm") and name.split(".")[0] in ("torch", "jsonschema", "rich"):
                    broken.append(f"{path.name}: {name} (not in vLLM's venv)")
    assert not broken


class BrokenCapture:
    """A capture whose every write fails (a full disk)."""

    full = False

    def write(self, line):
        raise OSError("disk full")

    def close(self, step, reason="shutdown"):
        self.reason = reason


def broken_session():
    """A live session, built without vLLM, whose capture cannot be written."""
    import logging

    from schedspec.live.session import LiveSession

    s = object.__new__(LiveSession)
    s.out_of_scope, s.monitor, s.assembler, s.capture = [], None, None, BrokenCapture()
    s.schedule_calls, s.on, s.wrapper_error, s.logger = 3, True, None, logging.getLogger("test")
    s.aborts_in_step = 0
    return s


def test_a_declaration_that_fails_switches_the_session_off_and_raises_nothing():
    """`scope_out` is called from the scheduler's overrides outside any other guard: a capture that cannot be
    written there must switch the session off, never raise into vLLM's call."""
    s = broken_session()
    s.scope_out("schedule(throttle_prefills=True)")  # raises nothing
    assert not s.on and "OSError: disk full" in s.wrapper_error and s.capture.reason == "wrapper-error"


def test_a_control_the_session_cannot_read_switches_it_off_and_raises_nothing():
    """`reset_prefix_cache` and `set_pause_state` reach the session from vLLM's own calls: a pause state that is no
    PauseState, or a capture that cannot be written, must switch the session off, never raise into vLLM."""
    s = broken_session()
    s.on_pause("sideways")  # raises nothing
    assert not s.on and "ValueError" in s.wrapper_error
    s = broken_session()
    s.on_reset((True,), {}, True)  # the capture fails: raises nothing
    assert not s.on and "OSError: disk full" in s.wrapper_error and s.capture.reason == "wrapper-error"
