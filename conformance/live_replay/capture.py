"""Reading a live capture: its parts, its lines, its sessions (the format: `docs/live.md`).

A capture is what `schedspec.live.MonitoredScheduler` wrote inside a vLLM
server: JSON lines in parts `PATH`, `PATH.1`, ..., each part opening with a
header. This module turns the parts into checked lines grouped by session and
nothing more; `live_replay.py` rebuilds the workload and replays it.

Every line is checked against `live_capture.schema.json` (which reuses the
trace's output shape and the workload's request shape), so a corrupt capture is
one `SpecError` naming `file:line: kind.field`. What is *not* an error:

* a last line cut mid-write (no newline, not JSON) in the last part: the
  writer was killed; it is dropped with a note;
* no `end` line: the capture is truncated (a crash, a kill, or still being
  written); the complete prefix is replayed, with a note;
* a header with another session id: the server was restarted; each session
  is kept apart, and the caller picks one.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from referencing import Registry, Resource

from ...spec.capture_format import KINDS
from ...spec.config import SchedulerConfig
from ...spec.errors import SpecError
from ...spec.jsonio import schema, strict_validator, validate_with

_TOKEN_KEYS = ("prompt_token_ids", "stop_token_ids")


@dataclass(frozen=True)
class Line:
    """One checked line: where it is, and its JSON object."""

    path: str
    lineno: int
    data: dict[str, Any]

    @property
    def kind(self) -> str:
        return str(self.data["kind"])

    def at(self, field: str) -> str:
        """`file:line: field`, the place a SpecError names."""
        return f"{self.path}:{self.lineno}: {field}"


@dataclass
class Session:
    """One scheduler instance's run: its first header, its event lines in order, and how it ended."""

    id: str
    header: Line
    config: SchedulerConfig
    lines: list[Line] = field(default_factory=list)  # add, abort, schedule, update, drafts: in the order written
    end: Line | None = None
    notes: list[str] = field(default_factory=list)
    schedules: int = 0  # schedule() calls seen: where the next part must start

    @property
    def truncated(self) -> bool:
        return self.end is None


@dataclass
class Capture:
    path: str
    parts: list[str]
    sessions: list[Session]
    notes: list[str] = field(default_factory=list)

    def session(self, wanted: str | None) -> Session:
        """The first session, or the one `wanted` names (its id or a unique prefix of it)."""
        if wanted is None:
            return self.sessions[0]
        hits = [s for s in self.sessions if s.id == wanted] or [s for s in self.sessions if s.id.startswith(wanted)]
        if len(hits) != 1:
            ids = ", ".join(s.id for s in self.sessions)
            why = "matches no session" if not hits else "matches more than one session"
            raise SpecError("--session", wanted, f"{why} of {self.path} (its sessions: {ids})")
        return hits[0]


def part_paths(path: str) -> list[str]:
    """`PATH`, `PATH.1`, ...: every part there is; a gap (PATH.1 missing beside PATH.2) is an error."""
    if not os.path.exists(path):
        raise SpecError(path, path, "no such file")
    if os.path.isdir(path):
        raise SpecError(path, path, "is a folder, not a capture")
    folder, base = os.path.split(path)
    pattern = re.compile(re.escape(base) + r"\.([1-9][0-9]*)$")
    numbers = sorted(int(m.group(1)) for n in os.listdir(folder or ".") if (m := pattern.match(n)))
    for expected, n in enumerate(numbers, start=1):
        if n != expected:
            raise SpecError(
                f"{path}.{expected}", f"{path}.{n}", "is missing: the capture has a later part but not this one"
            )
    return [path] + [f"{path}.{n}" for n in numbers]


@cache
def _validator() -> Any:
    """The line schema, with the trace and workload schemas it refers to registered by their ids."""
    registry: Registry[Any] = Registry().with_resources(
        (schema(name)["$id"], Resource.from_contents(schema(name))) for name in ("trace", "workload")
    )
    return strict_validator(schema("live_capture"), registry=registry)


def _for_schema(data: dict[str, Any]) -> dict[str, Any]:
    """An add line with its long token arrays of plain ids cut to one, as the workload reader does (speed)."""
    request = data.get("request")
    if data.get("kind") != "add" or not isinstance(request, dict):
        return data
    cut = {k: [0] if k in _TOKEN_KEYS and _plain(v) else v for k, v in request.items()}
    return {**data, "request": cut}


def _plain(v: Any) -> bool:
    return isinstance(v, list) and bool(v) and all(type(t) is int and t >= 0 for t in v)


def _lines(path: str, last_part: bool, notes: list[str]) -> Iterator[Line]:
    try:
        with open(path, "rb") as f:
            raw = f.read().split(b"\n")
    except OSError as e:
        raise SpecError(path, path, f"cannot be read: {e.strerror}") from None
    cut = raw[-1] != b""  # no newline after the last line: it was being written
    if not cut:
        raw.pop()
    for i, text in enumerate(raw, start=1):
        where = f"{path}:{i}"
        try:
            data = json.loads(text.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            if cut and i == len(raw) and last_part:
                notes.append(f"{where}: the last line was cut mid-write ({len(text)} bytes, no newline); dropped")
                return
            why = "is not UTF-8" if isinstance(e, UnicodeDecodeError) else f"is not valid JSON: {e.msg}"
            raise SpecError(f"{where}: line", text[:40].decode("utf-8", "replace"), why) from None
        if not isinstance(data, dict):
            raise SpecError(f"{where}: line", data, "must be a JSON object with a kind")
        line = Line(path, i, data)
        kind = data.get("kind")
        validate_with(_validator(), _for_schema(data), line.at(kind if kind in KINDS else "line"))
        yield line


def read_capture(path: str) -> Capture:
    """Every part of the capture at `path`, checked line by line and grouped by session."""
    paths = part_paths(path)
    capture = Capture(path, paths, [])
    current: Session | None = None
    for number, part in enumerate(paths):
        first = True
        for line in _lines(part, number == len(paths) - 1, capture.notes):
            if first and line.kind != "header":
                raise SpecError(line.at("kind"), line.kind, "must be header: every part opens with a header")
            first = False
            if line.kind == "header":
                current = _header(capture, current, line, number)
                continue
            assert current is not None
            if current.end is not None:
                raise SpecError(line.at(line.kind), line.kind, f"follows the end line ({current.end.lineno})")
            if line.kind == "end":
                current.end = line
            else:
                if line.kind == "schedule":
                    current.schedules += 1
                current.lines.append(line)
        if first:
            raise SpecError(f"{part}:1: line", "", "is missing: a part holds at least its header")
    for s in capture.sessions:
        loop_shape(s)
        if s.end is None:
            s.notes.append(
                f"session {s.id} has no end line: the capture is truncated (a crash, a kill, or still being "
                "written); its complete prefix is replayed"
            )
        elif s.end.data["reason"] == "capture-full":
            s.notes.append(f"session {s.id} stopped capturing at step {s.end.data['step']}: the size cap was reached")
        elif s.end.data["reason"] == "wrapper-error":
            s.notes.append(
                f"session {s.id} stopped capturing at step {s.end.data['step']}: the live wrapper switched itself "
                "off after an error of its own (vLLM's log names it); its complete prefix is replayed"
            )
    return capture


def loop_shape(s: Session) -> None:
    """The async scheduler class in a synchronous engine loop is replayed synchronously.

    The header's `async_scheduling` is the class's; `engine_async_scheduling` is the engine's own flag. They
    disagree where a platform runs the async class in EngineCore's synchronous `step()` (vLLM's CPU platform
    forces the flag off), and also in vLLM's own tests, which build the class on that platform and drive it
    with a batch queue. The updates tell which loop ran: a schedule() while another output still awaits its
    update is the batch queue; every update following its own schedule is the synchronous loop.
    """
    if not s.config.async_scheduling or s.header.data.get("engine_async_scheduling") is not False:
        return
    awaiting = 0
    for line in s.lines:
        if line.kind == "schedule":
            if awaiting:
                return  # a batch queue: the async loop, as the class says
            awaiting += 1
        elif line.kind == "update":
            awaiting = max(awaiting - 1, 0)
    s.config = dataclasses.replace(s.config, async_scheduling=False)
    s.notes.append(
        f"session {s.id}: the async scheduler class ran in the engine's synchronous loop (engine flag "
        "async_scheduling false, every update after its own schedule): replayed synchronously"
    )


def _header(capture: Capture, current: Session | None, line: Line, number: int) -> Session:
    """A new session's header, or a later part's header of the current one, which must agree with it."""
    h = line.data
    if current is not None and h["session"] == current.id:
        first = current.header.data
        for key in ("config", "async_scheduling", "vllm_version", "hashed_token_ids"):
            if h.get(key) != first.get(key):
                raise SpecError(
                    line.at(f"header.{key}"),
                    h.get(key),
                    f"disagrees with the session's first header "
                    f"({current.header.path}:{current.header.lineno}: {first.get(key)!r})",
                )
        if h["part"] != number:
            raise SpecError(line.at("header.part"), h["part"], f"must be {number}: it heads part {number}")
        if h["first_step"] not in (current.schedules, current.schedules - 1):  # -1: it opens on the last step's update
            raise SpecError(
                line.at("header.first_step"),
                h["first_step"],
                f"must be {current.schedules} (or {current.schedules - 1}, opening on an update): the parts before "
                f"it hold {current.schedules} schedule() calls",
            )
        return current
    if any(s.id == h["session"] for s in capture.sessions):
        raise SpecError(line.at("header.session"), h["session"], "comes back after another session started")
    if h["first_step"] != 0:
        raise SpecError(
            line.at("header.first_step"),
            h["first_step"],
            "must be 0: a session's first header opens its run (is an earlier part missing?)",
        )
    config = SchedulerConfig.from_dict(h["config"], line.at("header.config"))
    if config.async_scheduling != h["async_scheduling"]:
        raise SpecError(
            line.at("header.async_scheduling"),
            h["async_scheduling"],
            f"disagrees with header.config.async_scheduling ({config.async_scheduling})",
        )
    session = Session(h["session"], line, config)
    capture.sessions.append(session)
    return session
