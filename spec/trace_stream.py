"""Reading a trace a step at a time, so that checking it costs one step's memory, not the run's.

`Trace.load` holds the whole document three ways (the text, the parsed
JSON, every `StepRecord`): over a GB for a run of 10,000 requests. A
`StreamedTrace` parses the head (version, engine, end, workload) once, and
its `steps` re-read the file on each pass, decoding one step at a time with
`JSONDecoder.raw_decode` over a window of the text that is refilled a chunk
at a time. What it holds is the window and the step being read.

This needs `steps` to be the last key, as in every trace schedspec writes
(`TraceWriter`, `write_json_atomic(trace.to_json())`). JSON allows any
order, and correctness comes first: `open_trace` loads a file whole when
its head does not come before `steps`, and a pass that finds keys after
`steps` (only the end of the file can show that) raises `KeysAfterSteps`,
on which the caller loads it whole and starts again.

Validation is the schema's, in two parts: the head against the trace
schema less `steps`, each step against the step sub-schema, with the same
one-line paths (`t.json:trace.steps[12].state.running`). A step that
`step_shape.plainly_valid` passes needs no jsonschema; any other gets
jsonschema's verdict. Bad JSON inside the steps (a cut file, garbage) is a
`SpecError` naming the step and the line; bad JSON in the head is left to
`Trace.load`, which words it as it always has.
"""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Iterator
from functools import cache
from typing import Any, BinaryIO

from .errors import SpecError
from .jsonio import schema, strict_validator, validate_with
from .step_shape import plainly_valid
from .trace import StepRecord, Trace, check_step_ids
from .workload import Workload

CHUNK = 1 << 20
_HEAD = ("version", "engine", "end", "workload")
_WS = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()


class KeysAfterSteps(SpecError):
    """Keys follow `steps`, so a later one may override what the head said: the file must be loaded whole."""


@cache
def validators() -> tuple[Any, Any]:
    full = schema("trace")
    head = {
        **full,
        "required": [k for k in full["required"] if k != "steps"],
        "properties": {k: v for k, v in full["properties"].items() if k != "steps"},
    }
    step = {"$schema": full["$schema"], "$defs": full["$defs"], **full["properties"]["steps"]["items"]}
    return strict_validator(head), strict_validator(step)


class _Window:
    """The unread text of a file, `text[pos:]`; `byte` and `line` say where `text[0]` is in the file."""

    def __init__(self, f: BinaryIO, byte: int = 0, line: int = 0) -> None:
        self.f, self.byte, self.line, self.read = f, byte, line, byte
        self.decoder = codecs.getincrementaldecoder("utf-8")()
        self.text, self.pos, self.eof = "", 0, False
        self.broken: UnicodeDecodeError | None = None

    def more(self) -> bool:
        """Drop what was read and read on, at least doubling what is unread: a big value is re-parsed O(1) times."""
        if self.broken is not None:
            raise self.broken
        if self.eof:
            return False
        done, rest = self.text[: self.pos], self.text[self.pos :]
        self.byte += len(done) if done.isascii() else len(done.encode())
        self.line += done.count("\n")
        chunk = self.f.read(max(CHUNK, len(rest)))
        pending = self.decoder.getstate()[0]
        self.eof = not chunk
        try:
            new = self.decoder.decode(chunk, final=self.eof)
        except UnicodeDecodeError as e:
            # The bad byte belongs to whatever is being read when it is reached: keep the text before it.
            e.file_byte = self.read - len(pending) + e.start  # type: ignore[attr-defined]
            new, self.broken, self.eof = (pending + chunk)[: e.start].decode(), e, False
        self.read += len(chunk)
        self.text, self.pos = rest + new, 0
        return bool(chunk)

    def next_char(self) -> str:
        """Skip whitespace; the next character, "" at the end of the file."""
        while True:
            self.pos = _WS.match(self.text, self.pos).end()  # type: ignore[union-attr]  # \s* matches anywhere
            if self.pos < len(self.text):
                return self.text[self.pos]
            if not self.more():
                return ""

    def value(self) -> Any:
        """The JSON value at `pos`, reading on until it is whole."""
        if len(self.text) - self.pos < CHUNK // 4 and self.broken is None:
            self.more()
        while True:
            try:
                value, end = _DECODER.raw_decode(self.text, self.pos)
            except json.JSONDecodeError as e:
                cut = e.pos >= len(self.text) - 32 or e.msg.startswith("Unterminated string")
                if cut and self.more():
                    continue
                raise
            # A number at the window's edge parses as a shorter number; an object or a string cannot.
            if end < len(self.text) or self.broken is not None or not self.more():
                self.pos = end
                return value

    def mark(self) -> tuple[int, int]:
        """(byte, line) of `pos` in the file."""
        done = self.text[: self.pos]
        return self.byte + len(done.encode()), self.line + done.count("\n")

    def line_of(self, pos: int) -> int:
        return self.line + self.text.count("\n", 0, pos) + 1


def _read_head(w: _Window) -> dict[str, Any] | None:
    """The keys before `steps`, leaving `w` just inside its `[`; None unless the head comes first."""
    if w.next_char() != "{":
        return None
    w.pos += 1
    head: dict[str, Any] = {}
    while w.next_char() == '"':
        key = w.value()
        if w.next_char() != ":":
            return None
        w.pos += 1
        if key == "steps":
            if w.next_char() != "[" or not set(_HEAD) <= head.keys():
                return None
            w.pos += 1
            return head
        w.next_char()
        head[key] = w.value()
        if w.next_char() != ",":
            return None
        w.pos += 1
    return None


def open_trace(path: str) -> StreamedTrace | Trace:
    """The trace at `path`, streamed when its head comes first (every trace schedspec writes), else loaded whole."""
    try:
        f = open(path, "rb")
    except OSError:
        return Trace.load(path)  # which words it: no such file, a folder, unreadable
    with f:
        w = _Window(f)
        try:
            head = _read_head(w)
        except (json.JSONDecodeError, UnicodeDecodeError):
            head = None
        if head is None:
            return Trace.load(path)
        steps_at = w.mark()
    where = f"{path}:trace"
    validate_with(validators()[0], head, where)
    workload = Workload.from_json(head["workload"], f"{where}.workload")
    return StreamedTrace(path, workload, head["engine"], head["end"], steps_at)


class StreamedTrace:
    """A `Trace` whose steps stay in the file: `workload`, `engine` and `end` as there, `steps` re-iterable."""

    def __init__(self, path: str, workload: Workload, engine: str, end: str, steps_at: tuple[int, int]) -> None:
        self.path, self.workload, self.engine, self.end = path, workload, engine, end
        self.where = f"{path}:trace"
        self.steps = Steps(self)
        self._steps_at = steps_at
        self._known = frozenset(r.request_id for r in workload.requests)

    def records(self) -> Iterator[StepRecord]:
        for i, d in self.raw_steps():
            where = f"{self.where}.steps[{i}]"
            if not plainly_valid(d):
                validate_with(validators()[1], d, where)
            try:
                rec = StepRecord.from_json(d)
            except KeyError as e:  # a status name the schema cannot enumerate
                raise SpecError(where, e.args[0], "is not a request status") from None
            check_step_ids(self._known, rec, where)
            yield rec

    def raw_steps(self) -> Iterator[tuple[int, Any]]:
        """(index, JSON) of each step, unvalidated; the end of the file is checked after the last."""
        try:
            f = open(self.path, "rb")
        except OSError as e:
            raise SpecError(self.path, self.path, f"cannot be read again: {e.strerror}") from None
        with f:
            f.seek(self._steps_at[0])
            w, i = _Window(f, *self._steps_at), 0
            c = self._next(w, i)
            while c != "]":
                if c == "":
                    after = f"after steps[{i - 1}]" if i else "where the steps begin"
                    raise self._cut(w, i, f"is missing: the file ends {after}")
                yield i, self._decode(w, i)
                i += 1
                c = self._next(w, i)
                if c == ",":
                    w.pos += 1
                    c = self._next(w, i)
                    if c == "]":
                        raise SpecError(
                            f"{self.where}.steps[{i}]", "]", f"is missing after a comma, at line {w.line_of(w.pos)}"
                        )
                elif c not in ("]", ""):
                    raise SpecError(
                        f"{self.where}.steps[{i - 1}]",
                        w.text[w.pos : w.pos + 20],
                        f"is followed by neither ',' nor ']' at line {w.line_of(w.pos)}: the file is corrupt",
                    )
            w.pos += 1
            self._close(w, i)
        self.steps._len = i

    def _next(self, w: _Window, i: int) -> str:
        try:
            return w.next_char()
        except UnicodeDecodeError as e:
            raise self._not_utf8(e, i) from None

    def _decode(self, w: _Window, i: int) -> Any:
        try:
            return w.value()
        except UnicodeDecodeError as e:
            raise self._not_utf8(e, i) from None
        except json.JSONDecodeError as e:
            if w.eof and (not w.text[e.pos :].strip() or e.msg.startswith("Unterminated string")):
                raise self._cut(w, i, "is cut off: the file ends inside it") from None
            raise SpecError(
                f"{self.where}.steps[{i}]",
                w.text[e.pos : e.pos + 20],
                f"is not valid JSON at line {w.line_of(e.pos)}: {e.msg}",
            ) from None

    def _close(self, w: _Window, n: int) -> None:
        """After `steps`: the end of the object and of the file, or keys that oblige a whole load."""
        c = self._next(w, n)
        if c == ",":
            raise KeysAfterSteps(f"{self.where}.steps", "','", "is followed by more keys: load the file whole")
        if c != "}":
            what = "the file ends" if c == "" else f"found {c!r}, at line {w.line_of(w.pos)}"
            raise SpecError(f"{self.where}", f"{n} steps", f"does not close after its steps: {what}")
        w.pos += 1
        if self._next(w, n) != "":
            raise SpecError(
                f"{self.where}",
                w.text[w.pos : w.pos + 20],
                f"is followed by more text at line {w.line_of(w.pos)}: not valid JSON (Extra data)",
            )

    def _cut(self, w: _Window, i: int, how: str) -> SpecError:
        return SpecError(f"{self.where}.steps[{i}]", w.text[-20:], f"{how}, at line {w.line_of(len(w.text))}")

    def _not_utf8(self, e: UnicodeDecodeError, i: int) -> SpecError:
        return SpecError(
            f"{self.where}.steps[{i}]",
            f"byte {getattr(e, 'file_byte', e.start)}",
            "is not UTF-8 text, so not a JSON file",
        )


class Steps:
    """The steps of a `StreamedTrace`: each pass re-reads the file; `len` is known after one pass, or counts."""

    def __init__(self, trace: StreamedTrace) -> None:
        self._trace = trace
        self._len: int | None = None

    def __iter__(self) -> Iterator[StepRecord]:
        return self._trace.records()

    def __len__(self) -> int:
        if self._len is None:
            for _ in self._trace.raw_steps():  # decodes, and sets _len at the end
                pass
        assert self._len is not None
        return self._len
