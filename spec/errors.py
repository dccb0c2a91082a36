"""The one error type that user input can raise.

Every bad input a user can write (a config, a workload, a trace, an engine
that misbehaves) ends in a `SpecError` whose message is one line naming the
field and the value. The CLI prints that line and exits non-zero; it never
shows a traceback for a user's mistake.
"""

from __future__ import annotations

from typing import Any


class SpecError(ValueError):
    """A user-facing error: `where` names the field, `value` is what was found."""

    def __init__(self, where: str, value: Any, why: str) -> None:
        self.where, self.value, self.why = where, value, why
        super().__init__(f"{where}: {why} (got {short_repr(value)})")


def short_repr(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class InfrastructureError(SpecError):
    """The engine's process, not its decisions: it could not start, died, hung, or spoke garbage.

    The harness keeps these apart from divergences. A driver killed by a
    loaded machine says nothing about the scheduler inside it, so it must
    never be shrunk, listed as a departure or forgiven by
    `--allow-divergence`; it is an `error`, with its own exit status.
    `kind` says which: start, died, timeout or malformed.
    """

    def __init__(self, where: str, value: Any, why: str, kind: str = "died") -> None:
        super().__init__(where, value, why)
        self.kind = kind
