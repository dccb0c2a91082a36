"""One monitored scheduler's session: its settings, scope, capture and monitors, fed by the scheduler's calls.

Design notes
------------
* The scheduler classes (`scheduler.py`) only forward calls here, so what a
  session does is written once for the sync and the async scheduler, and a
  planted-bug subclass composes with it like any other.
* It never changes a scheduling decision: it reads vLLM's objects after
  vLLM's own method has run (before it, for a record's state, which is
  read before the next call changes it) and writes nothing back.
* Cost when nothing is asked (`mode=off`, no capture): one attribute test per
  call. The capture alone converts each output once (`vllm_json`) and writes
  a line; the monitors also read a state summary per step and run the
  replay and the predicates, or with `sample=N` (N > 1) only in one step in
  N, reading vLLM's pool before it (`vllm_seed`).
* Failure policy: in `raise` mode every problem propagates (a violation as
  `LiveInvariantViolation`, naming the invariant and the step); in `log`
  mode a violation is one warning (the first of each invariant, then at
  10, 100, 1000, ... of it) and a count, and an error inside this code is
  logged once and switches the session off: a monitor must never take a
  serving vLLM down.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import datetime
import os
import uuid
import weakref
from collections.abc import Callable
from typing import Any

from ..spec.capture_format import CAPTURE_FORMAT, CAPTURE_VERSION, TokenHasher, identity
from ..spec.config import SchedulerConfig
from ..spec.controls import ControlCall, PauseState
from ..spec.errors import SpecError
from ..spec.invariants.monitor import Violation
from ..spec.output import ModelRunnerOutput, SchedulerOutput
from ..spec.request import GRAMMAR_COMPILED, GRAMMAR_COMPILING, GRAMMAR_FAILED, Request, RequestStatus
from ..spec.trace import FinishedRequest, StateSummary
from ..spec.versions import DEFAULT_RELEASE
from . import scope, vllm_json, vllm_seed
from .capture import CaptureWriter
from .online import OnlineMonitor, monitor_names
from .settings import LiveSettings, LiveSettingsError, from_environ
from .steps import StepAssembler


class LiveInvariantViolation(AssertionError):
    """A monitor's verdict in `raise` mode: `schedspec.live: invariant X broken at step S (...): detail`."""

    def __init__(self, violation: Violation, schedule_call: int) -> None:
        self.violation, self.schedule_call = violation, schedule_call
        super().__init__(
            f"schedspec.live: invariant {violation.invariant} broken at step {schedule_call} "
            f"(record {violation.step}): {violation.detail}"
        )


def _light_output(so: Any) -> SchedulerOutput:
    """What a light record keeps of vLLM's output (steps.py): the ids, none of the requests' data."""
    return SchedulerOutput(
        num_scheduled_tokens=dict(so.num_scheduled_tokens),
        preempted_req_ids=frozenset(so.preempted_req_ids or ()),
        finished_req_ids=frozenset(so.finished_req_ids),
    )


def _finished(r: Any) -> FinishedRequest:
    return FinishedRequest(RequestStatus[r.status.name], tuple(r.output_token_ids))


STARTED: list[Callable[[LiveSession], None]] = []  # called with each session as it starts (live/vllm_tests.py)


class LiveSession:
    def __init__(
        self, scheduler: Any, logger: Any, async_scheduling: bool, settings: LiveSettings | None = None
    ) -> None:
        self.sched, self.logger, self.async_scheduling = scheduler, logger, async_scheduling
        self.settings = settings if settings is not None else from_environ()
        self.on = True
        self.mode = self.settings.mode
        self.judged_before_off = 0  # steps a monitor judged before a declaration switched it off
        self.reports: dict[str, int] = {}  # every monitor report, by invariant, the ones raised included
        self.wrapper_error: str | None = None
        self.session = uuid.uuid4().hex
        self.hasher = TokenHasher() if self.settings.hash_token_ids else None
        self.tokens = self.hasher.many if self.hasher is not None else identity
        self.out_of_scope: list[str] = []
        self.live: dict[str, Any] = {}  # vLLM requests added and not yet seen finished: their final state is read
        # Structured output: each live request's grammar as the scheduler last found it (the summary reports this,
        # not the compile future, which finishes on its own time: `vllm_json.grammar_events`).
        self.grammar_seen: dict[str, str] = {}
        self.aborts_in_step = 0  # aborts since the last schedule() or update: a reset before them is `before_inputs`
        release = self._release()
        self.config_json = vllm_json.config(
            scheduler.vllm_config, scheduler.kv_cache_config.num_blocks, scheduler.block_size, async_scheduling, release
        )
        features = scope.config_features(scheduler.vllm_config, scheduler.kv_cache_config, scheduler, async_scheduling)
        why = scope.release_feature(getattr(self._vllm(), "__version__", "unknown"))
        features += [why] if why else []
        self.config: SchedulerConfig | None = None
        try:
            self.config = SchedulerConfig.from_dict(self.config_json)
        except SpecError as e:
            features.append(f"a config the spec refuses ({e})")
        self.monitor: OnlineMonitor | None = None
        if self.settings.monitoring and self.config is not None:
            try:
                self.monitor = OnlineMonitor(self.config, self.settings.invariants, self.settings.sample, self._report)
            except ValueError as e:
                raise LiveSettingsError(
                    f"{self.settings.source}: field 'invariants' = {e.args[0]!r}: names no invariant "
                    f"(known: {', '.join(monitor_names())})"
                ) from None
        # The engine loop's shape: a batch queue under async scheduling or pipeline parallel (the config's).
        self.batch_queue = async_scheduling or _pp_size(scheduler) > 1
        self.assembler = (
            StepAssembler(self.batch_queue, self._summary, self._judge, self.monitor.full) if self.monitor else None
        )
        for feature in features:
            self.scope_out(feature)
        self.capture: CaptureWriter | None = None
        if self.settings.capture:
            self.capture = CaptureWriter(
                self.settings.capture, self._header(), self.settings.max_bytes, self.settings.max_parts
            )
        if self.capture is not None and self.capture.path != self.settings.capture:
            self.logger.warning(
                "schedspec.live: another scheduler of this process captures to %s; this one writes %s",
                self.settings.capture,
                self.capture.path,
            )
        self.pipeline_parallel_size = _pp_size(scheduler)
        self.awaiting = 0  # outputs that scheduled something, not yet updated (synchronous: at most one)

        self.seen: set[str] = set()  # every request id added through add_request, finished or not
        self.schedule_calls = 0
        self._steps_of: dict[int, int] = {}  # id of a vLLM output in flight -> its step (the capture's of_step)
        self._warned_full = False
        atexit.register(_close_at_exit, weakref.ref(self))
        for started in STARTED:
            started(self)

    # ---- scope, reporting ---------------------------------------------------------------------------------

    def scope_out(self, feature: str) -> None:
        """One log line per feature; the monitors go off (all of them: see scope.py), and the capture declares
        it with a `scope` line, so a replay stops there instead of judging what the spec does not model.
        Called from the scheduler's overrides outside any other guard, so it guards itself."""
        if feature in self.out_of_scope:
            return
        try:
            self.out_of_scope.append(feature)
            if getattr(self, "monitor", None) is not None:
                self.judged_before_off += self.monitor.steps_judged  # type: ignore[union-attr]
            capture = getattr(self, "capture", None)  # None while __init__ declares the config's features
            if capture is not None:
                self._write({"kind": "scope", "step": self.schedule_calls, "feature": feature})
            was_on = getattr(self, "monitor", None) is not None
            self.monitor, self.assembler = None, None
            self.logger.warning(
                "schedspec.live: %s is outside what the spec models; %s",
                feature,
                "all invariant monitors are off (which ones depend on it cannot be told), the capture goes on"
                if was_on or self.settings.monitoring
                else "the capture goes on",
            )
        except Exception as e:  # noqa: BLE001 - see guard
            self.guard(e)

    @property
    def steps_judged(self) -> int:
        return self.judged_before_off + (self.monitor.steps_judged if self.monitor is not None else 0)

    def _report(self, v: Violation, schedule_call: int) -> None:
        self.reports[v.invariant] = self.reports.get(v.invariant, 0) + 1
        if self.mode == "raise":
            raise LiveInvariantViolation(v, schedule_call)
        n = self.monitor.counts[v.invariant] if self.monitor is not None else 1
        if n == 1 or _power_of_ten(n):
            self.logger.warning(
                "schedspec.live: invariant %s broken at step %d (%d times so far): %s",
                v.invariant,
                schedule_call,
                n,
                v.detail,
            )

    @property
    def violation_counts(self) -> dict[str, int]:
        return dict(self.monitor.counts) if self.monitor is not None else {}

    @property
    def monitors_off(self) -> list[str]:
        return list(monitor_names()) if self.monitor is None and self.settings.monitoring else []

    def guard(self, e: Exception) -> None:
        """An exception inside the session: a monitor's verdict in `raise` mode goes to the caller; anything
        else switches this session off with one warning naming it, in every mode, and the scheduler goes on
        exactly as without the wrapper. Public: the scheduler mixin's own hook calls it too."""
        if isinstance(e, LiveInvariantViolation):
            raise e
        self.logger.warning(
            "schedspec.live: internal error, monitoring and capture are off for this scheduler: %s: %s",
            type(e).__name__,
            e,
        )
        self.wrapper_error = f"{type(e).__name__}: {e}"
        self.on = False
        capture = getattr(self, "capture", None)  # absent while __init__ runs
        if capture is not None:
            with contextlib.suppress(Exception):  # the end line says why the capture stops here
                capture.close(getattr(self, "schedule_calls", 0), reason="wrapper-error")

    # ---- the scheduler's calls ----------------------------------------------------------------------------

    def check_scope(self, event: str) -> None:
        """Before each call: what a caller did to the scheduler behind its API, which the spec cannot follow."""
        if not self.on:
            return
        try:
            if event == "S" and not self.batch_queue and self.awaiting > 0:
                self.scope_out(
                    "a synchronous scheduler with two batches in flight (schedule() again before the update of "
                    "its last output) though the engine has no batch queue (pipeline_parallel_size 1)"
                )
            for feature in scope.scheduler_features(self.sched):
                self.scope_out(feature)
            if _pp_size(self.sched) != self.pipeline_parallel_size:
                self.scope_out("the pipeline-parallel size changed after the scheduler was built")
            requests = getattr(self.sched, "requests", None) or {}
            if len(requests) > len(self.live) and any(rid not in self.seen for rid in requests):
                self.scope_out("requests put into scheduler.requests without add_request()")
        except Exception as e:  # noqa: BLE001 - see guard
            self.guard(e)

    def on_add(self, request: Any) -> None:
        if not self.on:
            return
        try:
            for feature in scope.request_features(request):
                self.scope_out(feature)
            if getattr(request, "num_computed_tokens", 0):  # a request arrives with nothing computed
                self.scope_out("a request added with num_computed_tokens already set (a disaggregated decode's)")
            if request.request_id in self.live:
                self.scope_out("streaming input (a request id added again)")
            pooling = getattr(request, "pooling_params", None) is not None
            if self.config is not None and pooling != (self.config.runner == "pooling"):
                kind = "a pooling" if pooling else "a sampling"
                self.scope_out(f"{kind} request on a {self.config.runner} model")
            d = vllm_json.request(request)
            if d.get("structured_output"):  # it waits for its grammar; the scheduler will find it compiling
                self.grammar_seen[request.request_id] = GRAMMAR_COMPILING
            self.live[request.request_id] = request
            self.seen.add(request.request_id)
            if self.assembler is not None and self.monitor is not None:
                self.assembler.add(request.request_id)
                self.monitor.add(Request.from_json(d), request.block_hashes if self.monitor.sampled else None)
            if self.capture is not None:
                d["prompt_token_ids"] = self.tokens(d["prompt_token_ids"])
                d["stop_token_ids"] = self.tokens(d["stop_token_ids"])
                if d["eos_token_id"] is not None:
                    d["eos_token_id"] = self.tokens([d["eos_token_id"]])[0]
                self._write({"kind": "add", "step": self.schedule_calls, "request": d})
        except Exception as e:  # noqa: BLE001 - see guard
            self.guard(e)

    def on_finish(self, request_ids: Any, status: Any, finished: list[Any]) -> None:
        if not self.on:
            return
        try:
            self.aborts_in_step += 1  # any finished status: an abort, or a finish from outside (`Abort.status`)
            if self.assembler is not None and self.assembler.abort_follows_reset():
                self.scope_out(
                    "an abort after a cache reset that followed an abort, in one step (a record orders "
                    "a step's aborts before such a reset)"
                )
            # In the order vLLM freed them (`finished` is in its processing order, which may be a set's), then the
            # ids that finished nothing: the order decides the free queue, and so the next step's block ids.
            done = {r.request_id: _finished(r) for r in finished}
            named = [request_ids] if isinstance(request_ids, str) else list(request_ids or done)
            asked = list(done) + sorted({rid for rid in named if rid not in done})
            for rid in done:
                self.live.pop(rid, None)
            if self.assembler is not None:
                # An id never added did nothing in vLLM (a client's abort that raced its own add): a record lists
                # a step's aborts as applied after its arrivals, so it would abort the arrival that came later.
                self.assembler.abort([rid for rid in asked if rid in self.seen], done)
            if self.capture is not None:
                self._write(
                    {
                        "kind": "abort",
                        "step": self.schedule_calls,
                        "request_ids": asked,
                        "finished": {k: self._finished_json(v) for k, v in done.items()},
                    }
                )
        except Exception as e:  # noqa: BLE001 - see guard
            self.guard(e)

    def on_reset(self, args: tuple[Any, ...], kwargs: dict[str, Any], done: Any) -> None:
        """vLLM's `reset_prefix_cache(reset_running_requests=False, reset_connector=False)` returned `done`."""
        try:
            running = bool(kwargs.get("reset_running_requests", args[0] if args else False))
            self.on_control(ControlCall("reset_prefix_cache", running, bool(done)))
        except Exception as e:  # noqa: BLE001 - see guard
            self.guard(e)

    def on_pause(self, pause_state: Any) -> None:
        """vLLM's `set_pause_state(pause_state)` (a `PauseState`, an IntEnum)."""
        try:
            self.on_control(ControlCall("set_pause_state", pause_state=PauseState(int(pause_state))))
        except Exception as e:  # noqa: BLE001 - see guard
            self.guard(e)

    def on_control(self, call: ControlCall) -> None:
        """A call outside schedule(): `reset_prefix_cache` (with what it answered) or `set_pause_state`
        (`spec.controls`), an input of the next step, judged with it (`controls-exact`)."""
        if not self.on:
            return
        try:
            if not self.aborts_in_step:  # before the step's aborts, as the record keeps it (`spec.controls`)
                call = dataclasses.replace(call, before_inputs=True)
            if self.assembler is not None and not self.assembler.control(call):
                self.scope_out("a call outside schedule() between a synchronous step's schedule and its update")
                return
            if self.capture is not None:
                self._write({"kind": "control", "step": self.schedule_calls, "call": call.to_json()})
        except Exception as e:  # noqa: BLE001 - see guard
            self.guard(e)

    def on_schedule(self, so: Any, throttled: bool = False) -> None:
        """`throttled`: the call had `throttle_prefills=True` (`Workload.throttle_prefills`)."""
        if not self.on:
            return
        try:
            step = self.schedule_calls
            self.schedule_calls += 1
            self.aborts_in_step = 0
            self.awaiting += so.total_num_scheduled_tokens > 0
            if self.assembler is None and self.capture is None:
                return
            grammars = self._grammars_found()
            d = vllm_json.scheduler_output(so, self.sched) if self.capture is not None else None
            if self.assembler is not None:
                self.assembler.schedule(
                    so,
                    lambda: SchedulerOutput.from_json(
                        d if d is not None else vllm_json.scheduler_output(so, self.sched)
                    ),
                    lambda: _light_output(so),
                    grammars,
                    throttled,
                )
            if d is not None and self.capture is not None:
                spec = d["scheduled_spec_decode_tokens"]
                if self.hasher is not None and spec:
                    d["scheduled_spec_decode_tokens"] = {k: self.tokens(v) for k, v in spec.items()}
                self._steps_of[id(so)] = step
                if len(self._steps_of) > 8:  # outputs that scheduled nothing may never be absorbed
                    del self._steps_of[next(iter(self._steps_of))]
                self._write(
                    {
                        "kind": "schedule",
                        "step": step,
                        "output": d,
                        **({"grammars": grammars} if grammars else {}),
                        **({"throttle_prefills": True} if throttled else {}),
                    }
                )
                self.capture.flush()
        except Exception as e:  # noqa: BLE001 - see guard
            self.guard(e)

    def model_answer(self, so: Any, runner_output: Any) -> tuple[dict[str, list[int]], list[str]] | None:
        """What the model sampled, and (a pooling model) which requests it pooled, read BEFORE vLLM's
        update_from_output, which trims a stopped request's list."""
        if not self.on or (self.assembler is None and self.capture is None):
            return None
        try:
            sampled = vllm_json.sampled(so, runner_output)
            self._check_model_output(so, sampled)
            return sampled, vllm_json.pooled(so, runner_output)
        except Exception as e:  # noqa: BLE001 - see guard
            self.guard(e)
            return None

    def _check_model_output(self, so: Any, sampled: dict[str, list[int]]) -> None:
        """A model output no model makes (a test's hand-made one) is declared: the spec's model samples one token
        per request whose step reaches its last known token, plus its accepted drafts, and nothing for a step
        still inside the prompt."""
        spec = getattr(so, "scheduled_spec_decode_tokens", None) or {}
        requests = getattr(self.sched, "requests", {})
        for rid, toks in sampled.items():
            if len(toks) > 1 + len(spec.get(rid) or ()):
                self.scope_out("a model output with more tokens for a request than its step scheduled")
            request = requests.get(rid)
            # Without a batch queue only: with outputs in flight, a later step (or a preemption) has moved the count.
            inside = request is not None and request.num_computed_tokens < request.num_prompt_tokens
            if toks and inside and not self.batch_queue:
                self.scope_out("a model output with a token for a request still inside its prompt")

    def on_update(self, so: Any, answer: tuple[dict[str, list[int]], list[str]] | None) -> None:
        if not self.on or answer is None:
            return
        sampled, pooled = answer
        self.awaiting = max(0, self.awaiting - 1)
        self.aborts_in_step = 0
        if self.schedule_calls == 0:  # an output no schedule() of this scheduler made: nothing to judge it by
            self.scope_out("update_from_output() before any schedule()")
            return
        try:
            spec = getattr(so, "scheduled_spec_decode_tokens", None) or {}
            if any(spec.get(rid) and not toks for rid, toks in sampled.items()):
                self.scope_out("a model output with no token for a request verifying drafts (an error or abort's)")
            # vLLM notes every request it frees since the last schedule() (Scheduler._free_request); scanning
            # only those keeps this O(finished), not O(running).
            freed = getattr(self.sched, "finished_req_ids", None)
            candidates = list(self.live) if freed is None else [rid for rid in freed if rid in self.live]
            done = {rid: self.live[rid] for rid in candidates if self.live[rid].is_finished()}
            for rid in done:
                del self.live[rid]
            finished = {rid: _finished(r) for rid, r in done.items()}
            if self.assembler is not None:
                self.assembler.update(
                    so,
                    lambda: ModelRunnerOutput(
                        ModelRunnerOutput.from_json(sampled).sampled_token_ids, frozenset(pooled)
                    ),
                    finished,
                )
                if not self.async_scheduling and self.config is not None and self.config.num_speculative_tokens == 0:
                    self.assembler.close()  # no drafts can follow: judge the step now
            if self.capture is not None:
                of_step = self._steps_of.pop(id(so), self.schedule_calls - 1)
                self._write(
                    {
                        "kind": "update",
                        "step": self.schedule_calls - 1,
                        "of_step": of_step,
                        "sampled": sampled if self.hasher is None else {k: self.tokens(v) for k, v in sampled.items()},
                        **({"pooler_output": pooled} if pooled else {}),
                        "finished": {k: self._finished_json(v) for k, v in finished.items()},
                    }
                )
                self.capture.flush()
        except Exception as e:  # noqa: BLE001 - see guard
            self.guard(e)

    def on_drafts(self, draft_token_ids: Any) -> None:
        if not self.on:
            return
        if self.async_scheduling:  # vllm/v1/engine/core.py:EngineCore.post_step never does: drafts stay on the device
            self.scope_out("drafts handed to an async scheduler (update_draft_token_ids)")
            return
        try:
            # What vLLM kept, not what was offered: it drops drafts for a finished request and for one still in
            # its prefill (vllm/v1/core/sched/scheduler.py:Scheduler.update_draft_token_ids), and the
            # monitors judge the next grant by the drafts the request holds.
            requests = getattr(self.sched, "requests", {})
            drafts = {}
            for rid, ids in zip(draft_token_ids.req_ids, draft_token_ids.draft_token_ids):
                request = requests.get(rid)
                if request is None or request.is_finished():
                    continue
                held = getattr(request, "spec_token_ids", ids)
                drafts[rid] = [int(t) for t in held]
            if self.assembler is not None:
                self.assembler.drafts({k: tuple(v) for k, v in drafts.items()})
            if self.capture is not None:
                self._write(
                    {
                        "kind": "drafts",
                        "step": self.schedule_calls - 1,
                        "draft_token_ids": {k: self.tokens(v) for k, v in drafts.items()},
                    }
                )
        except Exception as e:  # noqa: BLE001 - see guard
            self.guard(e)

    def close(self) -> None:
        """Shutdown: judge the last record, write the `end` line. Idempotent; never raises (atexit calls it too)."""
        if not self.on:
            return
        self.on = False
        try:
            if self.assembler is not None and self.mode != "raise":
                self.assembler.shutdown()
        except Exception as e:  # noqa: BLE001 - a shutdown must finish
            self.logger.warning("schedspec.live: at shutdown: %s", e)
        if self.capture is not None:
            self.capture.close(self.schedule_calls)

    # ---- helpers ------------------------------------------------------------------------------------------

    def _judge(self, record: Any, schedule_call: int) -> None:
        if self.monitor is not None:
            self.monitor.step(record, schedule_call)

    def _grammars_found(self) -> dict[str, bool]:
        """The grammars the schedule() just returned found done (`vllm_json.grammar_events`), now seen."""
        compiling = {
            rid: self.live[rid] for rid, g in self.grammar_seen.items() if g == GRAMMAR_COMPILING and rid in self.live
        }
        found = vllm_json.grammar_events(self.sched, compiling) if compiling else {}
        for rid, compiled in found.items():
            self.grammar_seen[rid] = GRAMMAR_COMPILED if compiled else GRAMMAR_FAILED
        for rid in [rid for rid in self.grammar_seen if rid not in self.live]:
            del self.grammar_seen[rid]
        return found

    def _summary(self, step: int) -> StateSummary:
        """The state as record `step` closes; and the pool, when the next record is judged after skipped ones."""
        if self.monitor is not None and self.monitor.wants_seed(step + 1):
            self.monitor.seed(step + 1, vllm_seed.replay_seed(self.sched, self.monitor.hashes_of))
        return StateSummary.from_json(vllm_json.summary(self.sched, self.grammar_seen))

    def _finished_json(self, f: FinishedRequest) -> dict[str, Any]:
        return {"status": f.status.name, "output_token_ids": self.tokens(f.output_token_ids)}

    def _write(self, line: dict[str, Any]) -> None:
        assert self.capture is not None
        if not self.capture.write(line) and self.capture.full and not self._warned_full:
            self._warned_full = True
            self.logger.warning(
                "schedspec.live: capture %s is full (%d parts of at most %d bytes); capturing stopped, the monitors go on",
                self.settings.capture,
                self.settings.max_parts,
                self.settings.max_bytes,
            )

    def _header(self) -> dict[str, Any]:
        cls = type(self.sched)
        named = getattr(self.sched.vllm_config.scheduler_config, "scheduler_cls", None)
        return {
            "kind": "header",
            "format": CAPTURE_FORMAT,
            "version": CAPTURE_VERSION,
            "session": self.session,
            "pid": os.getpid(),
            "started": datetime.datetime.now(datetime.UTC).isoformat(),
            "vllm_version": getattr(self._vllm(), "__version__", "unknown"),
            "scheduler_class": named if isinstance(named, str) else f"{cls.__module__}.{cls.__qualname__}",
            "async_scheduling": self.async_scheduling,
            # The engine's own flag: the loop it runs may be synchronous with the async class (vLLM on CPU).
            "engine_async_scheduling": _engine_flag(self.sched),
            "config": self.config_json,
            "hashed_token_ids": self.hasher is not None,
            "out_of_scope": list(self.out_of_scope),
            "monitors_off": self.monitors_off,
        }

    def _vllm(self) -> Any:
        import sys

        return sys.modules.get("vllm")

    def _release(self) -> str:
        version = getattr(self._vllm(), "__version__", DEFAULT_RELEASE)
        return version if scope.release_feature(version) is None else DEFAULT_RELEASE


def _close_at_exit(ref: weakref.ref[LiveSession]) -> None:
    """atexit: the `end` line of a session vLLM never shut down (a weak reference: atexit must not keep it alive)."""
    session = ref()
    if session is not None:
        session.close()


def _engine_flag(scheduler: Any) -> bool | None:
    flag = getattr(getattr(scheduler.vllm_config, "scheduler_config", None), "async_scheduling", None)
    return flag if isinstance(flag, bool) else None


def _pp_size(scheduler: Any) -> int:
    parallel = getattr(getattr(scheduler, "vllm_config", None), "parallel_config", None)
    return int(getattr(parallel, "pipeline_parallel_size", 1) or 1)


def _power_of_ten(n: int) -> bool:
    while n >= 10 and n % 10 == 0:
        n //= 10
    return n == 1
