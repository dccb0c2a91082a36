"""The capture writer: a run of a live scheduler as JSON lines, in bounded parts (docs/live.md, "What is captured").

Design notes
------------
* Lines are written as they happen and nothing is kept: memory is one open
  file and a few counters, whatever the run's length. Each part is at most
  `max_bytes` (a line that would cross it opens the next part, whose header
  repeats the session and config and names its first step), and at most
  `max_parts` parts are written; then capture stops with one `end` line of
  reason "capture-full" (allowed past the cap: it is one short line), and
  the scheduler logs one warning. The monitors go on.
* Parts are `PATH`, `PATH.1`, `PATH.2`, ... A session (one scheduler
  instance) appends to the last existing part, and rotates to the next
  unused suffix, so a second scheduler in the same process (a restart, a
  pooled driver's next workload) never overwrites the first one's lines: its
  header, with a new session id, starts its run.
* One file, one writer: lines carry no session id, so two schedulers alive
  at once in one process (vLLM's tests build several) must not interleave
  in one file. A writer whose path another live writer holds takes its own,
  `PATH-2`, `PATH-3`, ... (`OPEN`), and the session logs which.
* Lines are flushed to the OS as each step ends (`flush`), not per line: a
  crash loses at most the step in progress, and the reader replays the
  complete prefix. The `end` line is written by `close`, which the scheduler
  calls from `shutdown()` and from an atexit hook, whichever comes first.
* Pure: the JSON arrives built; this file knows only lines, bytes and parts.
* Encoding is most of the capture's cost at 1,000 running requests (a
  schedule line lists every request scheduled). vLLM itself depends on
  msgspec, whose JSON encoder is several times faster than the standard
  library's, so inside a vLLM process the capture uses it; elsewhere (the
  unit tests' venv) it falls back to `json`. Both write compact JSON that
  `json.loads` reads back the same.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import IO, Any

from ..spec.capture_format import encode_line


def _encoder() -> Callable[[Any], bytes]:
    try:
        import msgspec  # type: ignore[import-not-found]  # a vLLM dependency, absent from the project venv
    except ImportError:
        return encode_line
    fast: Callable[[Any], bytes] = msgspec.json.Encoder().encode
    return fast


encode = _encoder()


def part_path(path: str, n: int) -> str:
    return path if n == 0 else f"{path}.{n}"


def last_part(path: str) -> int:
    """The highest existing suffix of `path`'s parts (0 if none exist)."""
    n = 0
    while os.path.exists(part_path(path, n + 1)):
        n += 1
    return n


OPEN: set[str] = set()  # the paths live writers of this process hold


def free_path(path: str) -> str:
    """`path`, or the first `path-N` (N = 2, 3, ...) no live writer of this process holds."""
    candidate, n = path, 1
    while os.path.abspath(candidate) in OPEN:
        n += 1
        candidate = f"{path}-{n}"
    return candidate


class CaptureWriter:
    def __init__(self, path: str, header: dict[str, Any], max_bytes: int, max_parts: int) -> None:
        path = free_path(path)
        OPEN.add(os.path.abspath(path))
        self.path, self.header, self.max_bytes, self.max_parts = path, header, max_bytes, max_parts
        directory = os.path.dirname(os.path.abspath(path))
        os.makedirs(directory, exist_ok=True)
        self.index = last_part(path)  # the suffix of the file being written
        name = part_path(path, self.index)
        if os.path.exists(name) and os.path.getsize(name) >= max_bytes:  # an earlier session filled it
            self.index += 1
        self.parts = 0  # parts this session has written
        self.file: IO[bytes] | None = None
        self.size = 0
        self.full = False
        self.closed = False
        self.step = 0
        self._open(first_step=0)

    def _open(self, first_step: int) -> None:
        name = part_path(self.path, self.index)
        self.file = open(name, "ab")  # noqa: SIM115 - held for the session
        self.size = self.file.tell()
        self.parts += 1
        line = encode({**self.header, "part": self.index, "first_step": first_step}) + b"\n"
        self.file.write(line)
        self.size += len(line)

    def write(self, record: dict[str, Any]) -> bool:
        """Append one line; False once capture has stopped (full or closed), and the line is dropped."""
        if self.full or self.closed or self.file is None:
            return False
        line = encode(record) + b"\n"
        n = len(line)
        if self.size + n > self.max_bytes:
            if self.parts >= self.max_parts:
                self._stop("capture-full")
                return False
            self.file.close()
            self.index += 1
            self._open(first_step=record.get("step", self.step))
        self.step = record.get("step", self.step)
        self.file.write(line)
        self.size += n
        return True

    def flush(self) -> None:
        if self.file is not None and not self.file.closed:
            self.file.flush()

    def _stop(self, reason: str) -> None:
        if self.file is not None and not self.file.closed:
            self.file.write(encode({"kind": "end", "step": self.step, "reason": reason}) + b"\n")
            self.file.close()
        self.full = reason == "capture-full"
        self.closed = True
        OPEN.discard(os.path.abspath(self.path))

    def close(self, step: int, reason: str = "shutdown") -> None:
        """The `end` line (once; nothing after capture-full, which wrote its own): a clean shutdown, or
        `wrapper-error`, the live session switched off after an error of its own (`LiveSession.guard`)."""
        if self.closed:
            return
        self.step = step
        self._stop(reason)
