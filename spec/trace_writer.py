"""Writing a trace file a step at a time, byte for byte what `Trace.to_json` would give.

`write_json_atomic(path, trace.to_json())` holds the whole trace three times
over (the records, the JSON dicts, the text) and cost 1.26 GB for 10,000
requests. `TraceWriter` encodes each step as it is produced and forgets it,
so memory stays that of one step.

The format puts `end` before `steps`, and `end` is known only after the last
step. So the steps go to a side file first, and `finish` writes the head
(version, engine, end, workload), copies the steps after it, and renames the
result over the target: the same atomicity as `write_json_atomic` (a reader
never sees half a file, an interrupted run leaves the old file alone), at
the price of writing the steps twice. Both temporary files sit beside the
target, so the rename stays on one file system.

Each step is `json.dumps(step, indent=1)` shifted right by the two levels it
sits at in the whole document; JSON strings cannot hold a raw newline, so
shifting every line is exact.
"""

from __future__ import annotations

import glob
import io
import json
import os
import secrets
import shutil
from pathlib import Path
from typing import IO, Any

from .jsonio import process_alive
from .trace import TRACE_VERSION, StepRecord
from .workload import Workload

_STEP_INDENT = "  "  # a step is an item of "steps", a key of the top object: two levels of indent=1


class TraceWriter:
    """`with TraceWriter(path, workload, engine) as w: w.add(record)...; w.finish(end)`.

    Leaving the block without `finish` (an exception, Ctrl-C) removes the
    temporary files and leaves `path` as it was.
    """

    def __init__(self, path: str | os.PathLike[str], workload: Workload, engine: str) -> None:
        self.path = Path(path)
        self.workload, self.engine = workload, engine
        self.num_steps = 0
        self._steps_path: Path | None = None
        self._steps: IO[str] | None = None

    def __enter__(self) -> TraceWriter:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        _remove_stale(self.path)
        self._steps_path, self._steps = _create_beside(self.path, "steps")
        return self

    def add(self, record: StepRecord) -> None:
        assert self._steps is not None, "TraceWriter.add outside its with block"
        text = json.dumps(record.to_json(), indent=1).replace("\n", "\n" + _STEP_INDENT)
        self._steps.write((",\n" if self.num_steps else "") + _STEP_INDENT + text)
        self.num_steps += 1

    def finish(self, end: str) -> None:
        """Write the head and the steps to the target, atomically."""
        assert self._steps is not None and self._steps_path is not None
        self._steps.close()
        head = {"version": TRACE_VERSION, "engine": self.engine, "end": end, "workload": self.workload.to_json()}
        tmp, out = _create_beside(self.path, "tmp")
        try:
            with out:
                _write_open_object(out, head)
                out.write(',\n "steps": ' + ("[\n" if self.num_steps else "[]"))
                out.flush()
                with open(self._steps_path, "rb") as steps:
                    shutil.copyfileobj(steps, out.buffer, 1 << 20)
                out.write("\n ]\n}\n" if self.num_steps else "\n}\n")
            os.replace(tmp, self.path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        finally:
            self._discard()

    def __exit__(self, *exc: Any) -> None:
        self._discard()

    def _discard(self) -> None:
        if self._steps is not None:
            self._steps.close()
            self._steps = None
        if self._steps_path is not None:
            self._steps_path.unlink(missing_ok=True)
            self._steps_path = None


def _write_open_object(out: IO[str], obj: dict[str, Any]) -> None:
    """`json.dumps(obj, indent=1)` without its closing "\\n}", in pieces: a big workload's text is never whole."""
    pending: list[str] = []
    size = 0
    for chunk in json.JSONEncoder(indent=1).iterencode(obj):
        pending.append(chunk)
        size += len(chunk)
        if size > 1 << 16:
            text = "".join(pending)
            out.write(text[:-2])
            pending, size = [text[-2:]], 2
    text = "".join(pending)
    assert text.endswith("\n}")
    out.write(text[:-2])


def _create_beside(target: Path, what: str) -> tuple[Path, io.TextIOWrapper]:
    """A new hidden file next to `target`, created with mode 0666 so that the umask, not mkstemp's 0600, decides.

    Its name holds this process's id, so a later writer can tell the files of a
    writer that was killed outright (SIGKILL) and remove them (`_remove_stale`).
    """
    while True:
        path = target.with_name(f".{target.name}.{what}.{os.getpid()}.{secrets.token_hex(4)}")
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            continue
        return path, os.fdopen(fd, "w", encoding="ascii", newline="")


def _remove_stale(target: Path) -> None:
    """Temporary files beside `target` left by a writer that no longer runs (killed by SIGKILL): they go."""
    for path in target.parent.glob(f".{glob.escape(target.name)}.*.*.*"):
        pid = path.name[len(target.name) + 2 :].split(".")[1]
        if pid.isdigit() and int(pid) != os.getpid() and not process_alive(int(pid)):
            path.unlink(missing_ok=True)
