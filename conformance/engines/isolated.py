"""An engine in its own process: a crash, a hang or an `os._exit` costs one workload, not the run.

Design notes
------------
* Why: a third-party engine runs arbitrary code. In the harness's process,
  an `os._exit(3)` ended certify silently with nothing written, and under
  `--jobs 2` it broke the worker pool, which then waited forever for a lost
  task. Behind a process boundary, the harness sees only a pipe that closed
  or a reply that never came, and both are an `error` of that workload
  (`InfrastructureError`), with the child's exit code and last stderr line.
* The child (`host.py`) is started with the parent's interpreter and import
  path, and builds the engine with the in-process registry, so it runs the
  very same factory `--in-process` would. It serves many workloads: "make"
  builds a fresh engine from a config in the same process, so the import
  and start-up cost is paid once per worker, as with the vLLM driver pool.
* Every exchange has a deadline: `start_timeout_s` for the child's start
  and each "make" (the factory), `step_timeout_s` for each call. A child
  that misses one is killed; its state is unknown, and a late reply would
  desynchronise the pipe. So is one interrupted mid-exchange by the
  harness's own alarm or by ^C.
* Answers cross the boundary in their JSON form (`snapshot.encode` in the
  child, `snapshot.decode` here): they are snapshots by construction, and
  an answer that has no JSON form is malformed output. An exception inside
  the engine comes back as `EngineRaised`, an ordinary exception: a crash
  of the scheduler is a finding about it, not about the machine.
"""

from __future__ import annotations

import atexit
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from multiprocessing.connection import Connection
from typing import Any

from ...spec.config import SchedulerConfig
from ...spec.errors import InfrastructureError
from ...spec.output import ModelRunnerOutput, SchedulerOutput
from ...spec.request import Request, RequestStatus
from ...spec.trace import FinishedRequest, StateSummary
from .engine_spec import EngineSpec
from .snapshot import decode

START_TIMEOUT_S = 300.0  # a child that imports torch on a machine with load 8 needs minutes, not seconds
STEP_TIMEOUT_S = 30.0


class EngineRaised(Exception):
    """The engine, in its own process, raised: `type_name: message`, as the child reported it."""


class _Host:
    """One child process and its two pipes."""

    def __init__(self, spec: EngineSpec, start_timeout_s: float) -> None:
        to_child_r, self._to_child_w = os.pipe()
        self._from_child_r, from_child_w = os.pipe()
        self._stderr = tempfile.TemporaryFile()
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(p for p in sys.path if p and os.path.isdir(p)),
            "SCHEDSPEC_PARENT_PID": str(os.getpid()),  # lifeline.die_with_parent: the parent it must die with
        }
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "schedspec.conformance.engines.host",
                str(to_child_r),
                str(from_child_w),
                spec.name,
                spec.option,
            ],
            pass_fds=(to_child_r, from_child_w),
            stdin=subprocess.DEVNULL,
            stdout=self._stderr,
            stderr=self._stderr,
            env=env,
        )
        os.close(to_child_r)
        os.close(from_child_w)
        self.send = Connection(self._to_child_w, readable=False)
        self.recv = Connection(self._from_child_r, writable=False)
        self.spec = spec
        self.exchange(("hello",), start_timeout_s, "start", "start")

    def exchange(self, message: tuple[Any, ...], timeout_s: float, op: str, kind_on_timeout: str) -> Any:
        try:
            try:
                self.send.send(message)
            except OSError:
                self.die(op, "its process exited before the call could be sent")
            if not self.recv.poll(timeout_s):
                self.die(op, f"no answer within {timeout_s:g} s; its process was killed", kind=kind_on_timeout)
            try:
                reply = self.recv.recv()
            except (EOFError, OSError):
                self.die(op, "its process exited without answering")
        except InfrastructureError:
            raise
        except BaseException:  # interrupted mid-exchange (the harness's alarm, ^C): a stale reply may follow
            self.kill()
            raise
        status, *rest = reply
        if status == "ok":
            return rest[0]
        if status == "raise":
            raise EngineRaised(rest[0])
        self.kill()  # "start" or "malformed": the child says the engine is unusable
        raise InfrastructureError(rest[0], None, rest[1], kind=status)

    def die(self, op: str, why: str, kind: str = "died") -> None:
        code, tail = self.kill()
        if kind == "died" and code is not None:
            why += f" (exit code {code})"
        raise InfrastructureError(f"{op}()", None, why + (f"; last stderr line: {tail}" if tail else ""), kind=kind)

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> tuple[int | None, str]:
        if self._stderr.closed:  # killed before: nothing left to read
            return self.proc.returncode, ""
        if self.proc.poll() is None:
            self.proc.kill()
        code = self.proc.wait()
        for conn in (self.send, self.recv):
            conn.close()
        self._stderr.seek(0, os.SEEK_END)
        self._stderr.seek(max(0, self._stderr.tell() - 4000))
        lines = [ln.strip() for ln in self._stderr.read().decode("utf-8", "replace").splitlines() if ln.strip()]
        self._stderr.close()
        return code, (lines[-1] if lines else "")

    def close(self) -> None:
        if self.alive:
            try:
                self.send.send(("exit",))
                self.proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self.kill()


class IsolatedEngine:
    """The harness's handle on an engine that lives in the host process."""

    def __init__(self, factory: IsolatedFactory, host: _Host, name: str) -> None:
        self._factory, self.name = factory, name
        self._host: _Host | None = host  # None once closed

    def _call(self, op: str, *args: Any) -> Any:
        if self._host is None:
            raise InfrastructureError(f"engine {self._factory.spec.name!r} {op}", None, "was called after close()")
        try:
            return decode(op, self._host.exchange(("call", op, args), self._factory.step_timeout_s, op, "timeout"))
        except InfrastructureError:
            self._factory.forget(self._host)
            raise

    def add_request(self, request: Request) -> None:
        self._call("add_request", request)

    def abort_request(self, request_id: str) -> FinishedRequest | None:
        return self._call("abort_request", request_id)

    def schedule(self, throttle_prefills: bool = False) -> SchedulerOutput:
        # The flag only where the workload throttles: an engine without the prefill cadence is never passed it.
        return self._call("schedule", *((True,) if throttle_prefills else ()))

    def summary(self) -> StateSummary:
        return self._call("summary")

    def update_from_output(
        self, output: SchedulerOutput, model_output: ModelRunnerOutput
    ) -> dict[str, FinishedRequest]:
        return self._call("update_from_output", output, model_output)

    def update_draft_token_ids(self, draft_token_ids: Mapping[str, tuple[int, ...]]) -> None:
        self._call("update_draft_token_ids", dict(draft_token_ids))

    def grammar_compiled(self, request_id: str, compiled: bool) -> None:
        self._call("grammar_compiled", request_id, compiled)

    def reset_prefix_cache(self, reset_running_requests: bool) -> bool:
        return self._call("reset_prefix_cache", reset_running_requests)

    def set_pause_state(self, pause_state: Any) -> None:
        self._call("set_pause_state", pause_state)

    def finish_request(self, request_id: str, status: RequestStatus) -> FinishedRequest | None:
        return self._call("finish_request", request_id, status)

    def close(self) -> None:
        host, self._host = self._host, None
        if host is not None:
            self._factory.give_back(host)


class IsolatedFactory:
    """An `EngineFactory` whose engines run in one reused child process (per harness process)."""

    def __init__(
        self, spec: EngineSpec, start_timeout_s: float = START_TIMEOUT_S, step_timeout_s: float = STEP_TIMEOUT_S
    ) -> None:
        self.spec, self.start_timeout_s, self.step_timeout_s = spec, start_timeout_s, step_timeout_s
        self._idle: _Host | None = None
        self._pid = os.getpid()
        atexit.register(self.close_all)

    def __call__(self, config: SchedulerConfig) -> IsolatedEngine:
        if os.getpid() != self._pid:  # a forked child must not share its parent's pipes
            self._idle, self._pid = None, os.getpid()
        host, self._idle = self._idle, None
        if host is None or not host.alive:
            host = _Host(self.spec, self.start_timeout_s)
        try:
            name = host.exchange(("make", config), self.start_timeout_s, "factory", "start")
        except EngineRaised as e:  # the factory itself raised: a start-up error, never a divergence
            self.give_back(host)
            raise InfrastructureError("factory", None, f"raised {e}", kind="start") from None
        return IsolatedEngine(self, host, name)

    def give_back(self, host: _Host) -> None:
        if host.alive and self._idle is None and os.getpid() == self._pid:
            try:
                host.exchange(("drop",), self.step_timeout_s, "close", "timeout")
                self._idle = host
                return
            except (InfrastructureError, EngineRaised):
                pass
        if host.alive:
            host.kill()

    def forget(self, host: _Host) -> None:
        if self._idle is host:
            self._idle = None

    def close_all(self) -> None:
        host, self._idle = self._idle, None
        if host is not None:
            host.close()
