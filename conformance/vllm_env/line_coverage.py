"""Line coverage of vLLM's scheduler inside the driver, with coverage.py ($SCHEDSPEC_VLLM_COVERAGE=DIR).

Design notes
------------
* Why: `schedspec changelog A B` asks which of the scheduler hunks that
  changed between two releases any workload reached. The driver is the one
  process that runs vLLM's scheduler, so it measures which of its lines ran;
  the host diffs the two packages and reads these files
  (`conformance/changelog/source_hunks.py`).
* Like `cpu_scheduler.py`, it runs in the vLLM venv, must not import
  `schedspec`, and is imported by name. It must be started before
  `import vllm` (module-level lines count: a changed default or a new class
  attribute is a hunk too), so it must not import vllm either: the package
  folder comes from `importlib.util.find_spec`, which locates `vllm` on the
  driver's `sys.path` (a user's tree from $SCHEDSPEC_VLLM_SOURCE included)
  without running it.
* What is measured: the scheduler's source, `v1/core/**` and
  `v1/request.py` of that folder (the same set as
  `source_hunks.SCHEDULER_SOURCES`). Nothing else is traced, so torch and the
  rest of vLLM cost one filename lookup per new code object, not a line
  event each.
* coverage.py itself, not a hand-rolled `sys.settrace`: its C tracer is fast,
  and its statement analysis (which lines are executable at all) is what the
  host uses to tell a code hunk from a comment. It is optional: without it
  the driver runs unmeasured and says so once on stderr.
* Output: one file per driver process, `DIR/lines-<vllm version>-<pid>.json`,
  cumulative over every workload the process served, rewritten atomically
  (temp file + `os.replace`), so a reader never sees half a file. Drivers are
  pooled and may be killed rather than closed, so it is saved at each `init`
  (a workload just ended), at `close` (which leaves by `os._exit`, skipping
  atexit) and at exit. A save is a flush of the tracer's data and ~30 KB of
  JSON (about 5 ms; nothing is written when no new line ran); the statement
  sets are computed once per file, at the first save (about 1 s), and cached.
* What it costs (Python 3.11 has no `sys.monitoring`, so every traced line
  is a call into the C tracer): a driver starts 3-4 s later (vLLM's import
  runs under the tracer) and steps about 2.5x slower, ~0.6 ms more a step.
  So it is off unless asked for.
"""

from __future__ import annotations

import atexit
import importlib.util
import json
import os
import sys
import tempfile
from typing import Any

ENV = "SCHEDSPEC_VLLM_COVERAGE"


def scheduler_files(root: str) -> list[str]:
    """The scheduler's source files under the vllm package folder `root`, relative, '/'-separated."""
    found = ["v1/request.py"] if os.path.isfile(os.path.join(root, "v1", "request.py")) else []
    core = os.path.join(root, "v1", "core")
    for folder, dirs, files in os.walk(core):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        rel = os.path.relpath(folder, root).replace(os.sep, "/")
        found += [f"{rel}/{f}" for f in sorted(files) if f.endswith(".py")]
    return sorted(found)


class LineCoverage:
    """A running coverage.py measurement of the scheduler's files under `root`, saved to `out_dir`."""

    def __init__(self, out_dir: str, root: str) -> None:
        import coverage  # the caller has checked it imports

        self.out_dir, self.root = out_dir, os.path.realpath(root)
        self.files = scheduler_files(self.root)
        self._reporters: dict[str, Any] = {}
        self._statements: dict[str, list[int]] = {}
        self._saved: tuple[str, dict[str, list[int]]] | None = None  # the last file written and its lines
        self._cov = coverage.Coverage(
            data_file=None,  # in memory: we write our own JSON, never a .coverage file
            config_file=False,  # a .coveragerc in the caller's folder must not change what is measured
            include=[os.path.join(self.root, "v1", "core", "*"), os.path.join(self.root, "v1", "request.py")],
        )
        self._cov.start()

    def _analysed(self, rel: str) -> tuple[Any, list[int]]:
        """coverage.py's file reporter of one file and its executable statements, parsed once per process.

        The reporter is coverage's plugin API (`FileReporter.lines`, `.translate_lines`), what its own
        analysis uses; `Coverage.analysis2` would do the same but parse the file again at every save.
        """
        if rel not in self._statements:
            from coverage.python import PythonFileReporter

            try:
                reporter = PythonFileReporter(os.path.join(self.root, rel), coverage=self._cov)
                stmts = sorted(reporter.lines())
            except Exception:  # noqa: BLE001 - a file coverage cannot parse has no statements to report
                reporter, stmts = None, []
            self._reporters[rel], self._statements[rel] = reporter, stmts
        return self._reporters[rel], self._statements[rel]

    def executed(self, rel: str, raw: list[int]) -> list[int]:
        """The statements among the raw line events: a statement spread over lines counts at its first line.

        The tracer records every line an event names (3.11 reports the lines of a multi-line `def`'s
        annotations, say); coverage's analysis maps them onto statements, and so does this.
        """
        reporter, stmts = self._analysed(rel)
        if reporter is None or not raw:
            return []
        return sorted(set(reporter.translate_lines(raw)) & set(stmts))

    def save(self) -> str:
        """Write the lines executed so far (cumulative) to DIR/lines-<version>-<pid>.json; return its path."""
        data = self._cov.get_data()  # flushes the tracer; measurement goes on
        measured = {os.path.realpath(f): f for f in data.measured_files()}
        executed = {}
        for rel in self.files:
            path = os.path.join(self.root, rel)
            executed[rel] = self.executed(rel, data.lines(measured.get(path, path)) or [])
        version = getattr(sys.modules.get("vllm"), "__version__", "unknown")
        final = os.path.join(self.out_dir, f"lines-{version}-{os.getpid()}.json")
        if self._saved == (final, executed) and os.path.exists(final):  # nothing new ran: the file says it all
            return final
        files = {rel: {"executed": lines, "statements": self._analysed(rel)[1]} for rel, lines in executed.items()}
        doc = {"vllm_version": version, "vllm_root": self.root, "pid": os.getpid(), "files": files}
        os.makedirs(self.out_dir, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".lines-", suffix=".tmp", dir=self.out_dir)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(json.dumps(doc, separators=(",", ":")))  # dumps: the C encoder; dump streams in Python
            os.replace(tmp, final)
            self._saved = (final, executed)
        except BaseException:
            os.unlink(tmp)
            raise
        return final

    def save_quietly(self) -> None:
        """Save, and on failure say why on stderr: measuring must never break the driver."""
        try:
            self.save()
        except Exception as e:  # noqa: BLE001
            print(f"line coverage: could not save to {self.out_dir}: {type(e).__name__}: {e}", file=sys.stderr)


def start_from_env() -> LineCoverage | None:
    """Start measuring if $SCHEDSPEC_VLLM_COVERAGE names a folder; call before `import vllm`."""
    out_dir = os.environ.get(ENV)
    if not out_dir:
        return None
    try:
        import coverage  # noqa: F401
    except ImportError:
        print(f"line coverage: ${ENV} is set but coverage is not installed here; running unmeasured", file=sys.stderr)
        return None
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        print("line coverage: no vllm package on the path; running unmeasured", file=sys.stderr)
        return None
    lines = LineCoverage(os.path.abspath(out_dir), list(spec.submodule_search_locations)[0])
    atexit.register(lines.save_quietly)
    return lines
