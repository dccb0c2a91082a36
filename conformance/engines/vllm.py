"""A real vLLM release's scheduler (0.28.0-0.33.0) as an `Engine`, behind a pipe to its own venv.

Design notes
------------
* vLLM cannot live in the project's environment: it pins torch 2.14 and a
  large stack, while its scheduler runs on the CPU build of torch 2.13. So it
  gets a separate venv (`conformance/vllm_env/setup_vllm_ref.sh`), and this
  engine talks to `conformance/vllm_env/driver.py`, running in that venv, in
  JSON lines. The driver's replies use exactly the JSON of `spec.output` and
  `spec.trace`, so they are parsed with the spec's own `from_json`: a trace of
  vLLM and a trace of the reference are built from the same types.
* Starting the driver costs ~5 s (~12 s with a cold model-info cache), so one
  process serves many workloads: `reset(config)` builds a fresh scheduler in
  it, and `vllm_pool.SharedDriverFactory` (what `--engine vllm` uses) hands
  drivers back to an idle list on `close()` instead of killing them.
* Every call has a deadline (60 s for init, 30 s per step op by default). A
  driver that hangs, dies or answers garbage is killed, and the caller gets a
  one-line `SpecError` naming the op and the step, with the last line the
  driver wrote to stderr; so is one interrupted mid-exchange (a harness
  alarm), whose late reply would desynchronise the pipe. An `{"error": ...}`
  reply is vLLM refusing the op: raised the same way, but the driver is kept.
* A reader thread feeds a queue, so a deadline is a plain `Queue.get(timeout)`.
  The driver's stderr (vLLM's warnings) goes to a temporary file, never to a
  pipe nobody drains.
* One venv per release (`release=V`, the engine name `vllm==V`): 0.33.0, the
  default, in `.venv-vllm-ref` (or $VLLM_REF_VENV), as CI has always built
  it; any other release in `.venv-vllm-<V>` beside it, in the checkout's root
  or, installed from a wheel, the user's cache (`vllm_venvs.venvs_home`). Each is about 1.5 GB;
  `schedspec venvs` lists and removes them. The stamp the setup script
  writes names the release (`.vllm-ref-<V>`), so a venv is never taken for
  another release's, and the driver's reported `vllm.__version__` is
  checked against the release asked for.
* `source=PATH` (`certify --vllm-source`) runs a user's own vLLM checkout:
  the scheduler is pure Python, so the driver puts PATH first on its
  `sys.path` and the pinned venv supplies torch and every other dependency.
  The driver reports which `vllm/__init__.py` it imported, and an engine
  that did not import the user's tree refuses to start: a certificate of
  the pinned vLLM under the user's name would be worse than none.
"""

from __future__ import annotations

import dataclasses
import json
import os
import queue
import subprocess
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NoReturn

from ...spec.answers import check_answer
from ...spec.config import SchedulerConfig
from ...spec.engine import DECLARED_FEATURES
from ...spec.errors import InfrastructureError, SpecError
from ...spec.output import ModelRunnerOutput, SchedulerOutput
from ...spec.request import Request, RequestStatus
from ...spec.trace import FinishedRequest, StateSummary
from ...spec.versions import DEFAULT_RELEASE
from .vllm_source import resolve_vllm_source
from .vllm_venvs import (  # noqa: F401 - re-exported: where callers have always found them
    SETUP_SCRIPT,
    STAMP_NAME,
    VLLM_ENV_DIR,
    ensure_vllm_venv,
    last_line,
    stamp_name,
    vllm_venv_path,
    vllm_venv_ready,
)

ENGINE_NAME = "vllm"
DRIVER = VLLM_ENV_DIR / "driver.py"
INIT_TIMEOUT_S = 300.0  # a loaded 2-core machine took >60 s to start four drivers at once
STEP_TIMEOUT_S = 30.0
SOURCE_ENV = "SCHEDSPEC_VLLM_SOURCE"  # read by the driver: a source tree to import `vllm` from


class VllmEngine:
    """A vLLM release's `Scheduler`, stepped by `spec.engine.run` like any other engine."""

    name = ENGINE_NAME
    features = frozenset(DECLARED_FEATURES)  # the real thing: every feature the config and requests carry

    def __init__(
        self,
        config: SchedulerConfig,
        *,
        venv: Path | None = None,
        source: str | Path | None = None,
        release: str = DEFAULT_RELEASE,
        init_timeout_s: float = INIT_TIMEOUT_S,
        step_timeout_s: float = STEP_TIMEOUT_S,
    ) -> None:
        venv = Path(venv) if venv else vllm_venv_path(release)
        if not vllm_venv_ready(venv, release):
            raise SpecError(
                "vllm engine",
                str(venv),
                f"is not a built vLLM {release} venv; call ensure_vllm_venv(release={release!r}) "
                f"or run `bash {SETUP_SCRIPT} {release}`",
            )
        self.release = release
        self.init_timeout_s, self.step_timeout_s = init_timeout_s, step_timeout_s
        self._summary: dict[str, Any] | None = None  # the state the last op brought back; None: ask
        self._step: int | None = None  # the index of the step being driven; None before init
        self.source = resolve_vllm_source(source) if source is not None else None
        env = {k: v for k, v in os.environ.items() if k != SOURCE_ENV}  # never a stray source from the caller's env
        env["SCHEDSPEC_PARENT_PID"] = str(os.getpid())  # the driver's die_with_parent: the parent it must die with
        if self.source:
            env[SOURCE_ENV] = str(self.source)
        self._stderr = tempfile.TemporaryFile()
        self._proc: subprocess.Popen[str] | None = subprocess.Popen(
            [str(venv / "bin" / "python"), str(DRIVER)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            encoding="utf-8",
            bufsize=1,
            env=env,
        )
        self._replies: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read_replies, args=(self._proc.stdout,), daemon=True).start()
        self.vllm_version, self.vllm_file = "", ""
        try:
            self.reset(config)
            if self.source and not Path(self.vllm_file).resolve().is_relative_to(self.source):
                raise SpecError(
                    "--vllm-source", str(self.source), f"was not imported: the driver loaded {self.vllm_file}"
                )
            # A venv rebuilt by hand or a stray stamp; the default release's venv is trusted as it always was.
            if not self.source and release != DEFAULT_RELEASE and self.vllm_version != release:
                raise SpecError("vllm engine", str(venv), f"holds vLLM {self.vllm_version}, not {release}")
        except BaseException:  # nobody could close an engine that was never returned
            self._kill()
            raise

    # ---- lifecycle ------------------------------------------------------------

    def reset(self, config: SchedulerConfig) -> None:
        """A fresh scheduler with `config`, in the same driver process (no second vLLM import)."""
        self._step, self._summary = None, None
        reply = self._call("init", self.init_timeout_s, config=config.to_dict())
        self.config, self.vllm_version, self._step = config, reply.get("vllm_version", ""), 0
        self.vllm_file = reply.get("vllm_file", "")

    def close(self) -> None:
        """Stop the driver: ask politely, then kill. Safe to call twice."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        assert proc.stdin is not None  # Popen(stdin=PIPE)
        try:
            proc.stdin.write('{"op": "close"}\n')
            proc.stdin.flush()
            proc.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            proc.kill()
            proc.wait()
        finally:
            self._stderr.close()

    def __enter__(self) -> VllmEngine:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ---- the Engine protocol --------------------------------------------------

    def add_request(self, request: Request) -> None:
        self._summary = None
        self._call("add", self.step_timeout_s, request=dataclasses.asdict(request))

    def abort_request(self, request_id: str) -> FinishedRequest | None:
        return self.finish_request(request_id, RequestStatus.FINISHED_ABORTED)

    def finish_request(self, request_id: str, status: RequestStatus) -> FinishedRequest | None:
        """vLLM's `finish_requests(request_id, status)`: an abort, or a finish from outside (`Abort.status`)."""
        self._summary = None
        named = {"status": status.name} if status != RequestStatus.FINISHED_ABORTED else {}
        reply = self._call("abort", self.step_timeout_s, request_id=request_id, **named)
        return self._parse("abort_request", reply.get("finished"), lambda f: None if f is None else _finished(f))

    def schedule(self, throttle_prefills: bool = False) -> SchedulerOutput:
        self._summary = None
        flag = {"throttle_prefills": True} if throttle_prefills else {}
        reply = self._call("schedule", self.step_timeout_s, **flag)
        self._summary = reply.pop("summary", None)
        return self._parse("schedule", reply, SchedulerOutput.from_json)

    def summary(self) -> StateSummary:
        """The state now: the one schedule() or update_from_output() brought back, if nothing happened since."""
        reply, self._summary = self._summary, None
        if reply is None:
            reply = self._call("summary", self.step_timeout_s)
        else:  # kept for a second read too: the loop reads the state twice after some ops
            self._summary = reply
        return self._parse("summary", reply, StateSummary.from_json)

    def update_from_output(
        self, output: SchedulerOutput, model_output: ModelRunnerOutput
    ) -> dict[str, FinishedRequest]:
        """Absorb `output`'s model output: the step just scheduled, or under async the oldest one in flight.

        The driver keeps every scheduled output until it is updated and checks
        that `output` is the oldest of them (vLLM's batch queue is FIFO).
        """
        self._summary = None
        pooled = {"pooler_output": sorted(model_output.pooler_output)} if model_output.pooler_output else {}
        reply = self._call(
            "update", self.step_timeout_s, output=output.to_json(), model_output=model_output.to_json(), **pooled
        )
        self._summary = reply.get("summary")
        finished = self._parse(
            "update_from_output", reply.get("finished"), lambda f: {rid: _finished(d) for rid, d in f.items()}
        )
        self._step = (self._step or 0) + 1
        return finished

    def update_draft_token_ids(self, draft_token_ids: Mapping[str, tuple[int, ...]]) -> None:
        """Sync spec decode: vLLM's `Scheduler.update_draft_token_ids(DraftTokenIds(...))`, in the mapping's order."""
        self._summary = None
        self._call("draft", self.step_timeout_s, draft_token_ids={rid: list(t) for rid, t in draft_token_ids.items()})

    def grammar_compiled(self, request_id: str, compiled: bool) -> None:
        """Structured output: the request's grammar is set, as vLLM's compile future would deliver it."""
        self._summary = None
        self._call("grammar", self.step_timeout_s, request_id=request_id, compiled=compiled)

    def reset_prefix_cache(self, reset_running_requests: bool) -> bool:
        """vLLM's `Scheduler.reset_prefix_cache` between steps (spec/controls.py): whether the cache was emptied."""
        self._summary = None
        reply = self._call("reset", self.step_timeout_s, reset_running_requests=reset_running_requests)
        self._summary = reply.get("summary")
        return self._parse("reset_prefix_cache", reply.get("result"), _a_bool)

    def set_pause_state(self, pause_state: int) -> None:
        """vLLM's `Scheduler.set_pause_state`, with vLLM's PauseState value."""
        self._summary = None
        self._call("pause", self.step_timeout_s, pause_state=int(pause_state))

    def reset_unchecked(self, config: Mapping[str, Any]) -> None:
        """A fresh scheduler from a raw config dict that the spec may refuse: only to pin vLLM's known bugs.

        The spec refuses some configs on which vLLM 0.33.0 crashes (exp1), so a
        `SchedulerConfig` cannot carry them; a test that shows the crash sends
        the dict as is. Never used by the harness.
        """
        self._step, self._summary = None, None
        reply = self._call("init", self.init_timeout_s, config=dict(config))
        self.vllm_version, self.vllm_file, self._step = reply.get("vllm_version", ""), reply.get("vllm_file", ""), 0

    # ---- the pipe -------------------------------------------------------------

    def _read_replies(self, stream: Any) -> None:
        try:
            for line in stream:
                self._replies.put(line)
        except (OSError, ValueError):  # the pipe was closed under us
            pass
        finally:
            self._replies.put(None)

    def _where(self, op: str) -> str:
        return f"vllm engine op '{op}'" + ("" if self._step is None else f" at step {self._step}")

    def _call(self, op: str, timeout_s: float, **payload: Any) -> dict[str, Any]:
        if self._proc is None:
            raise InfrastructureError(self._where(op), None, "the engine is closed")
        assert self._proc.stdin is not None  # Popen(stdin=PIPE)
        try:
            try:
                self._proc.stdin.write(json.dumps({"op": op, **payload}) + "\n")
                self._proc.stdin.flush()
            except OSError:
                self._die(op, "the driver exited before the op could be sent")
            try:
                line = self._replies.get(timeout=timeout_s)
            except queue.Empty:
                self._die(op, f"no reply within {timeout_s:g} s; the driver was killed")
        except SpecError:
            raise
        except BaseException:  # interrupted mid-exchange (a harness alarm, ^C): a stale reply may follow
            self._kill()
            raise
        if line is None:
            self._die(op, "the driver exited without replying")
        try:
            reply = json.loads(line)
        except json.JSONDecodeError:
            self._die(op, f"malformed reply {line.strip()[:120]!r}; the driver was killed")
        if not isinstance(reply, dict):
            self._die(op, f"reply is not an object: {line.strip()[:120]!r}")
        if "error" in reply:  # the driver survives a refused op; the payload says which
            raise SpecError(self._where(op), payload, f"vLLM refused it: {reply['error']}")
        return reply

    def _parse(self, op: str, answer: Any, build: Any) -> Any:
        """`build(answer)`, once `answer` has the spec's types (`spec/answers.py`), as any engine's answer must."""
        try:
            check_answer(op, answer, f"{op}()")
            return build(answer)
        except SpecError as e:
            self._die(op, f"malformed reply: {e}; the driver was killed", "malformed")
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            self._die(op, f"malformed reply ({type(e).__name__}: {e}); the driver was killed", "malformed")

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def _kill(self) -> tuple[int | None, str]:
        """Kill the driver; return its exit code and the last line it wrote to stderr."""
        proc, self._proc = self._proc, None
        if proc is None:
            return None, ""
        if proc.poll() is None:
            proc.kill()
        code = proc.wait()
        self._stderr.seek(0, os.SEEK_END)
        self._stderr.seek(max(0, self._stderr.tell() - 4000))
        tail = last_line(self._stderr.read().decode("utf-8", "replace"))
        self._stderr.close()
        return code, tail

    def _die(self, op: str, why: str, kind: str = "died") -> NoReturn:
        """Kill the driver and raise: after a broken exchange its state is unknown."""
        code, tail = self._kill()
        raise InfrastructureError(
            self._where(op), f"exit code {code}", why + (f"; last stderr line: {tail}" if tail else ""), kind=kind
        )


def _a_bool(answer: Any) -> bool:
    if not isinstance(answer, bool):
        raise ValueError(f"{answer!r} is of type {type(answer).__name__}, not 'boolean'")
    return answer


def _finished(d: Mapping[str, Any]) -> FinishedRequest:
    return FinishedRequest(RequestStatus[d["status"]], tuple(d["output_token_ids"]))
