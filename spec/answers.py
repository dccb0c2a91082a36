"""The types an engine's answers must have, checked where they cross into the harness.

An engine that is not ours answers `schedule()`, `summary()`,
`update_from_output()` and `abort_request()` with values the harness has
not seen before. The differ, the monitors and the shrinker all assume the
spec's types: a token count that is the string `'1'` crashes a monitor
deep inside `spec/invariants/`, and one that is `True` or `1.0` compares
equal to `1` and passes. So each answer, in its JSON form, is checked here
before anything judges it, and a wrong one is the engine's malformed
output: an infrastructure error, never a divergence and never a pass.

The check is the step schema's own parts (`trace.schema.json` `$defs`:
`output`, `state`, `finished`, `finished_map`), read by the same strict validator `check`
reads a trace with (`jsonio.strict_validator`): what `check` refuses in a
trace file, the harness refuses from an engine, and the other way round.
The plain-loop test of `step_shape` answers first, because it is fast and
never more lenient; only an answer it doubts is walked by jsonschema, whose
verdict and message stand.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .jsonio import validate_with, validator
from .step_shape import (
    plainly_valid_finished,
    plainly_valid_finished_request,
    plainly_valid_output,
    plainly_valid_state,
)

# The engine method, the step schema's part its answer must match, and the quick test of that part.
ANSWERS: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "schedule": ("output", plainly_valid_output),
    "summary": ("state", plainly_valid_state),
    "update_from_output": ("finished_map", plainly_valid_finished),
    "abort_request": ("finished", plainly_valid_finished_request),
    "finish_request": ("finished", plainly_valid_finished_request),
}


def check_answer(method: str, data: Any, where: str) -> None:
    """Raise `SpecError` naming the field, the value and its type if `data` is not a valid answer of `method`.

    `data` is the answer's JSON form (`to_json`). `abort_request()` may also
    answer None: the request had already finished.
    """
    if method not in ANSWERS or (method in ("abort_request", "finish_request") and data is None):
        return  # add_request() and update_draft_token_ids() answer nothing the harness reads
    part, plainly_valid = ANSWERS[method]
    if plainly_valid(data):
        return
    validate_with(validator("trace", part), data, where)
