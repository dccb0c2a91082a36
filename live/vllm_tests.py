"""A pytest plugin for vLLM's own test suite: every scheduler its tests build is monitored and captured.

    pytest -p schedspec.live.vllm_tests --schedspec-out DIR [--schedspec-mode log|raise] tests/v1/core

For vLLM's developers, in their own checkout and test run: a change to the
scheduler that breaks one of the spec's invariants is named beside the
tests' own asserts, even where those still pass. `schedspec vllm-tests`
runs the same plugin over a release's tests and replays what it captured
(`docs/vllm-tests.md`).

Design notes
------------
* The swap happens once, at `pytest_configure`, before any test module is
  imported: `vllm.v1.core.sched.scheduler.Scheduler` and
  `...async_scheduler.AsyncScheduler` become the monitored subclasses
  (`live/scheduler.py`), so a test's `from ... import Scheduler` and vLLM's
  own `get_scheduler_cls()` both build a monitored one. Nothing else of
  vLLM changes, and the subclasses change no decision.
* Settings are per test: before each test, $SCHEDSPEC_LIVE names the mode
  and a capture file named after the test, so every session a test starts
  captures beside it (`PATH`, then `PATH-2`, ... for schedulers alive at
  once). After the test, its sessions are closed (the last step judged, the
  `end` line written) and one JSON line per test goes to `tests.jsonl`:
  outcome, sessions (steps judged, monitor reports, declarations of scope,
  wrapper errors), captures.
* It never fails a test of its own accord. In `log` mode only vLLM's asserts
  decide; in `raise` mode a monitor's verdict is the one failure it adds.
  A wrapper error switches its session off (`LiveSession.guard`) and is
  counted, never raised. This module runs in vLLM's venv: it imports only
  `spec`, `live` and pytest.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
from typing import Any

import pytest

from .session import STARTED, LiveSession

LOGGER = "vllm.schedspec.live"


class _Warnings(logging.Handler):
    """The live mode's warnings during one test: a session that could not start is a wrapper error too."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


class SuiteRecorder:
    """Public: the plugin's state, one per pytest run (`pytest_configure` registers it)."""

    def __init__(self, out: str, mode: str) -> None:
        self.out, self.mode = out, mode
        self.captures = os.path.join(out, "captures")
        os.makedirs(self.captures, exist_ok=True)
        self.sessions: list[LiveSession] = []
        self.warnings = _Warnings()
        self.file = open(os.path.join(out, "tests.jsonl"), "a", encoding="utf-8")  # noqa: SIM115 - the run's
        STARTED.append(self.sessions.append)
        logging.getLogger(LOGGER).addHandler(self.warnings)

    def capture_path(self, nodeid: str) -> str:
        return os.path.join(self.captures, re.sub(r"[^A-Za-z0-9_.-]+", "_", nodeid).strip("_")[:180] + ".jsonl")

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        self.sessions.clear()
        self.warnings.lines.clear()
        if self.mode != "plain":
            os.environ["SCHEDSPEC_LIVE"] = f"mode={self.mode},capture={self.capture_path(item.nodeid)}"

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[Any]) -> Any:
        outcome = yield
        report = outcome.get_result()
        if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
            item.stash[OUTCOME] = report.outcome

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_teardown(self, item: pytest.Item) -> None:
        try:
            self._record(item)
        except Exception as e:  # noqa: BLE001 - the recorder must never fail the test it watched
            _say(f"could not record {item.nodeid}: {type(e).__name__}: {e}")
        finally:
            self.sessions.clear()
            os.environ.pop("SCHEDSPEC_LIVE", None)

    def _record(self, item: pytest.Item) -> None:
        sessions = []
        for s in self.sessions:
            try:
                s.close()  # judges the last record and writes the end line; never raises in log mode
            except Exception as e:  # noqa: BLE001 - a verdict at close in raise mode: the test had its own
                s.reports.setdefault(f"at close: {type(e).__name__}", 1)
            sessions.append(
                {
                    "session": s.session,
                    "scheduler_class": type(s.sched).__name__,
                    "async": s.async_scheduling,
                    "capture": s.capture.path if s.capture is not None else None,
                    "schedule_calls": s.schedule_calls,
                    "steps_judged": s.steps_judged,
                    "reports": dict(s.reports),
                    "out_of_scope": list(s.out_of_scope),
                    "wrapper_error": s.wrapper_error,
                }
            )
        failed_start = [w for w in self.warnings.lines if "could not start" in w]
        line = {
            "nodeid": item.nodeid,
            "outcome": item.stash.get(OUTCOME, "passed"),
            "sessions": sessions,
            "wrapper_errors": [s["wrapper_error"] for s in sessions if s["wrapper_error"]] + failed_start,
        }
        self.file.write(json.dumps(line) + "\n")
        self.file.flush()

    def close(self) -> None:
        STARTED.remove(self.sessions.append)
        logging.getLogger(LOGGER).removeHandler(self.warnings)
        self.file.close()


OUTCOME = pytest.StashKey[str]()


def _say(text: str) -> None:
    """One line on stderr: not a warning, which a run with `-W error` would turn into a failure of its own."""
    print(f"schedspec.live.vllm_tests: {text}", file=sys.stderr)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("schedspec", "the spec's monitors on every scheduler the tests build")
    group.addoption("--schedspec-out", metavar="DIR", help="where captures and tests.jsonl go (required)")
    group.addoption(
        "--schedspec-mode",
        default="log",
        choices=("log", "raise", "plain"),
        help="what a broken invariant does; plain: no monitors, the outcomes recorded only (the baseline)",
    )


def pytest_configure(config: pytest.Config) -> None:
    out = config.getoption("--schedspec-out")
    if not out:
        return  # loaded but not asked for: vLLM's tests run as they are
    mode = config.getoption("--schedspec-mode")
    try:
        recorder = SuiteRecorder(out, mode)
    except OSError as e:  # an --schedspec-out that cannot be written: vLLM's tests run as they are, and say so
        _say(f"off: --schedspec-out {out!r} cannot be written: {e.strerror}")
        return
    if mode != "plain":
        import vllm.v1.core.sched.async_scheduler as async_module  # type: ignore[import-not-found]
        import vllm.v1.core.sched.scheduler as sync_module  # type: ignore[import-not-found]

        from .scheduler import MonitoredAsyncScheduler, MonitoredScheduler

        sync_module.Scheduler = MonitoredScheduler
        async_module.AsyncScheduler = MonitoredAsyncScheduler
    config.pluginmanager.register(recorder, "schedspec-suite-recorder")
    config.add_cleanup(recorder.close)
