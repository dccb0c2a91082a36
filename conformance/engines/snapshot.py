"""What an engine returns, frozen the moment it returns it.

The loop keeps each step's `SchedulerOutput` and `StateSummary` in the
step record and hands the same output back to `update_from_output`. An
engine that keeps a reference to what it returned, and mutates it later
(a reused dict, a list it appends to), would change the record after the
fact: the harness would then compare what the engine *ends up* holding,
not what it *decided*. So an engine that is not ours is read through its
JSON form at the boundary: `to_json` on the engine's object, `from_json`
into the spec's frozen types, a fresh copy that shares nothing.

The same round trip is the protocol of the isolated engine host
(`isolated.py`): the child sends `to_json`, the parent builds with
`from_json`. An object that has no JSON form is malformed output, an
infrastructure `error` for the harness, never a divergence.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...spec.answers import check_answer
from ...spec.config import SchedulerConfig
from ...spec.engine import FEATURE_METHODS, Engine, EngineFactory
from ...spec.errors import InfrastructureError, SpecError, short_repr
from ...spec.output import ModelRunnerOutput, SchedulerOutput
from ...spec.request import Request, RequestStatus
from ...spec.trace import FinishedRequest, StateSummary

PROTOCOL = ("add_request", "abort_request", "schedule", "summary", "update_from_output")


def _malformed(op: str, e: Exception) -> InfrastructureError:
    return InfrastructureError(
        f"{op}()",
        None,
        f"answered malformed output ({type(e).__name__}: {e}); "
        "it must return the spec's types (spec/output.py, spec/trace.py)",
        kind="malformed",
    )


def finished_json(f: Any) -> dict[str, Any]:
    return {"status": RequestStatus(f.status).name, "output_token_ids": [int(t) for t in f.output_token_ids]}


def finished_of(d: Mapping[str, Any]) -> FinishedRequest:
    return FinishedRequest(RequestStatus[d["status"]], tuple(d["output_token_ids"]))


def encode(op: str, value: Any) -> Any:
    """An engine's return value in JSON form; raises `InfrastructureError(kind="malformed")` if it has none."""
    try:
        if op == "schedule":
            if not isinstance(value, SchedulerOutput):
                raise TypeError(f"returned {type(value).__name__}, not SchedulerOutput")
            return value.to_json()
        if op == "summary":
            if not isinstance(value, StateSummary):
                raise TypeError(f"returned {type(value).__name__}, not StateSummary")
            return value.to_json()
        if op == "update_from_output":
            return {str(rid): finished_json(f) for rid, f in dict(value).items()}
        if op in ("abort_request", "finish_request"):
            return None if value is None else finished_json(value)
        if op == "reset_prefix_cache":  # whether the cache was emptied: a bool, which the engine loop checks
            return value
        return None
    except Exception as e:  # noqa: BLE001 - any shape we cannot read is the engine's malformed output
        raise _malformed(op, e) from None


def decode(op: str, data: Any) -> Any:
    """An answer in the spec's frozen types, once its JSON form has the spec's types (`spec/answers.py`).

    A wrong type (a token count `'1'`, `True` or `1.0`, a block id None) is
    `InfrastructureError(kind="malformed")` naming the field, the value and
    its type, before the differ or a monitor sees it.
    """
    try:
        check_answer(op, data, f"{op}()")
    except SpecError as e:
        raise InfrastructureError(
            e.where,
            e.value,
            f"answered malformed output: {short_repr(e.value)} {e.why}; it must return the spec's types "
            "(docs/engines.md)",
            kind="malformed",
        ) from None
    try:
        if op == "schedule":
            return SchedulerOutput.from_json(data)
        if op == "summary":
            return StateSummary.from_json(data)
        if op == "update_from_output":
            return {rid: finished_of(f) for rid, f in data.items()}
        if op in ("abort_request", "finish_request"):
            return None if data is None else finished_of(data)
        if op == "reset_prefix_cache":
            return data  # `spec.controls.EngineControls` refuses anything but a bool, as malformed
        return None
    except Exception as e:  # noqa: BLE001
        raise _malformed(op, e) from None


def check_engine(engine: Any, what: str) -> Engine:
    """The factory's product must at least have the protocol's methods: a start-up error otherwise."""
    if engine is None:
        raise InfrastructureError(
            what, None, "returned None, not an engine: it must return the engine it built", kind="start"
        )
    missing = [m for m in PROTOCOL if not callable(getattr(engine, m, None))]
    if missing:
        raise InfrastructureError(
            what,
            None,
            f"returned a {type(engine).__name__}, which has no method {missing[0]}() of spec.engine.Engine",
            kind="start",
        )
    return engine


class Snapshotting:
    """An in-process engine whose every answer is copied into the spec's frozen types as it is returned."""

    def __init__(self, engine: Any, name: str) -> None:
        self._engine = check_engine(engine, f"engine {name!r}")
        self.name = str(getattr(engine, "name", name))

    def add_request(self, request: Request) -> None:
        self._engine.add_request(request)

    def abort_request(self, request_id: str) -> FinishedRequest | None:
        return decode("abort_request", encode("abort_request", self._engine.abort_request(request_id)))

    def schedule(self, throttle_prefills: bool = False) -> SchedulerOutput:
        out = self._engine.schedule(throttle_prefills=True) if throttle_prefills else self._engine.schedule()  # type: ignore[call-arg]
        return decode("schedule", encode("schedule", out))

    def summary(self) -> StateSummary:
        return decode("summary", encode("summary", self._engine.summary()))

    def update_from_output(
        self, output: SchedulerOutput, model_output: ModelRunnerOutput
    ) -> dict[str, FinishedRequest]:
        got = self._engine.update_from_output(output, model_output)
        return decode("update_from_output", encode("update_from_output", got))

    def update_draft_token_ids(self, draft_token_ids: Mapping[str, tuple[int, ...]]) -> None:
        method = getattr(self._engine, "update_draft_token_ids", None)
        if method is not None:
            method(draft_token_ids)

    def grammar_compiled(self, request_id: str, compiled: bool) -> None:
        self._optional("grammar_compiled")(request_id, compiled)

    def reset_prefix_cache(self, reset_running_requests: bool) -> bool:
        got = self._optional("reset_prefix_cache")(reset_running_requests)
        return decode("reset_prefix_cache", encode("reset_prefix_cache", got))

    def set_pause_state(self, pause_state: Any) -> None:
        self._optional("set_pause_state")(pause_state)

    def finish_request(self, request_id: str, status: RequestStatus) -> FinishedRequest | None:
        got = self._optional("finish_request")(request_id, status)
        return decode("finish_request", encode("finish_request", got))

    def _optional(self, method: str) -> Any:
        """The engine's optional method of a deployment feature (`spec.engine.FEATURE_METHODS`), or one line saying
        the feature is outside its declared scope."""
        fn = getattr(self._engine, method, None)
        if not callable(fn):
            raise SpecError(
                f"engine {self.name!r}",
                method,
                f"is missing: {FEATURE_METHODS[method]} is outside the engine's declared scope (docs/engines.md)",
            )
        return fn

    def close(self) -> None:
        close = getattr(self._engine, "close", None)
        if close is not None:
            close()


def snapshotting(factory: EngineFactory, name: str) -> EngineFactory:
    def make(config: SchedulerConfig) -> Snapshotting:
        return Snapshotting(factory(config), name)

    return make
