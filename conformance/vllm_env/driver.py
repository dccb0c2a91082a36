"""Drive a real vLLM release's V1 scheduler (0.28.0-0.33.0) over a JSON-lines pipe (runs inside its venv).

Design notes
------------
* This program runs with the interpreter of `.venv-vllm-ref`, never with the
  project's: vLLM pins torch and a large stack the project must not depend
  on. So it must not import `schedspec`; the JSON it speaks is the contract,
  and it mirrors `spec/output.py` (`SchedulerOutput.to_json`) and
  `spec/trace.py` (`StateSummary.to_json`, `FinishedRequest.to_json`) by hand.
* One request per line on stdin, one reply per line on the protocol channel:
  a private duplicate of the original stdout. File descriptor 1 and
  `sys.stdout` are pointed at stderr before vLLM is imported, so nothing vLLM,
  torch or a C library prints can corrupt the protocol.
* Ops: init {config} -> {ok, vllm_version} (again at any time: a fresh
  scheduler with a new config, without paying the ~5 s import again);
  add {request}; abort {request_id, status?} -> {finished: FinishedRequest|null};
  schedule -> SchedulerOutput + {summary}; summary -> StateSummary;
  update {output, model_output, pooler_output?: [id, ...]} -> {finished: {id: FinishedRequest}, summary};
  draft {draft_token_ids: {id: [token, ...]}} -> {ok}; close.
  Any failure answers {"error": "<one line>"} and the driver keeps serving;
  the line names the innermost vLLM frame (`at vllm/...py:LINE`), so a
  failed vLLM assert says which one.
* Building the scheduler (the stub model, the CPU wiring, the three
  features (prefix caching, spec decode, async scheduling) and the checks that vLLM built what the spec assumes)
  is `cpu_scheduler.py`, a sibling module this file imports by name: its
  own folder is put on `sys.path` however this file was loaded (as a
  script, or by path from the benchmark's timer).
* schedule and update also answer the `StateSummary` after them: the
  engine loop reads the summary right after both, so this halves the
  round trips of a step (the adapter keeps it until the next op).
* Outputs wait in a FIFO until updated: the sync loop updates the step it
  just scheduled, the async loop (`step_with_batch_queue`) the oldest one
  still in flight, while a newer one already is. An update must name the
  oldest pending output (matched by its `num_scheduled_tokens`): vLLM's
  loop absorbs outputs in the order they were scheduled, and a harness that
  did otherwise would test a loop vLLM never runs.
* $SCHEDSPEC_VLLM_SOURCE names a user's vLLM source tree (`--vllm-source`):
  it goes first on `sys.path`, so its pure-Python `vllm/` package shadows the
  installed one while torch and the rest still come from this venv. init
  replies with `vllm_file`, so the adapter can check which vLLM it got.
* The conversion of vLLM's objects into the spec's JSON is
  `live/vllm_json.py`, loaded by its path (this venv has no schedspec): the
  monitored schedulers of `schedspec.live` capture a running vLLM with the
  same functions. $SCHEDSPEC_VLLM_SCHEDULER_CLS (read by `cpu_scheduler`)
  builds a scheduler class of one's own through vLLM's `scheduler_cls`; the
  driver calls `shutdown()` on a scheduler it replaces or closes.
* $SCHEDSPEC_VLLM_COVERAGE=DIR measures which lines of the scheduler's source
  ran (`line_coverage.py`, a sibling like `cpu_scheduler.py`), started before
  `import vllm` and saved to DIR at each init, at close and at exit; init
  replies with `line_coverage` (whether it is measuring).
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sys
import traceback
from collections import deque

# The twin of `conformance/engines/lifeline.py:die_with_parent` (this venv cannot import schedspec; a unit test keeps
# the two identical): a driver whose worker was killed must not live on, holding a vLLM scheduler's memory.
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def die_with_parent(parent: int | None = None) -> bool:
    """Ask the kernel for SIGKILL when the parent exits; False where it cannot (not Linux, no libc).

    `parent` (or SCHEDSPEC_PARENT_PID, which the parent sets as it starts the child) is the pid the
    parent had: one that died before this ran has left the child re-parented already, and
    `os.getppid()` alone would take the new parent for it.
    """
    if not sys.platform.startswith("linux"):
        return False
    parent = parent or int(os.environ.pop("SCHEDSPEC_PARENT_PID", "0")) or os.getppid()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            return False
    except (OSError, AttributeError):
        return False
    if os.getppid() != parent:  # the parent died before the request was in place: nothing will send the signal
        os.kill(os.getpid(), signal.SIGKILL)
    return True


if __name__ == "__main__":
    die_with_parent()


def _protocol_channel():
    """Keep fd 1 for the protocol only; everything else that writes to stdout goes to stderr."""
    proto = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return proto


PROTO = _protocol_channel()
for _k, _v in {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "VLLM_LOGGING_LEVEL": "WARNING",
    # The spec's output layout; it is vLLM's default here too, but say so (checked in init).
    "VLLM_USE_V2_MODEL_RUNNER": "1",
    # Inside the venv: the ~7 s model-architecture inspection is paid once per venv.
    "VLLM_CACHE_ROOT": os.path.join(sys.prefix, "vllm-cache"),
}.items():
    os.environ.setdefault(_k, _v)
if os.environ.get("SCHEDSPEC_VLLM_SOURCE"):
    sys.path.insert(0, os.environ["SCHEDSPEC_VLLM_SOURCE"])
# This folder, for the sibling `cpu_scheduler`. Run as a script it is on the path already; loaded by path
# (the benchmark's timer) it is not, and appended there it cannot shadow anything the venv installs.
_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.append(_HERE)

from line_coverage import start_from_env  # noqa: E402

LINES = start_from_env()  # None unless $SCHEDSPEC_VLLM_COVERAGE: before vLLM's import, so module-level lines count

import torch  # noqa: E402
import vllm  # noqa: E402
from vllm.config import ModelConfig  # noqa: E402
from vllm.lora.request import LoRARequest  # noqa: E402
from vllm.pooling_params import PoolingParams  # noqa: E402
from vllm.sampling_params import SamplingParams, StructuredOutputsParams  # noqa: E402
from vllm.utils.hashing import sha256  # noqa: E402
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash  # noqa: E402
from vllm.v1.core.sched.interface import PauseState  # noqa: E402
from vllm.v1.core.sched.scheduler import Scheduler  # noqa: E402
from vllm.v1.outputs import DraftTokenIds, ModelRunnerOutput  # noqa: E402
from vllm.v1.request import Request, RequestStatus  # noqa: E402
from vllm.v1.structured_output.backend_types import StructuredOutputGrammar  # noqa: E402

from cpu_scheduler import build_scheduler, load_by_path, stub_model_dir  # noqa: E402

# vLLM's objects as the spec's JSON: one home, shared with the monitored schedulers (`schedspec.live`).
vllm_json = load_by_path("vllm_json", os.path.join(_HERE, "..", "..", "live", "vllm_json.py"))
_finished = vllm_json.finished


# A pooled request's output as the model runner hands it back; the scheduler reads only that it is not None.
POOLED = torch.zeros(1)


class AcceptAll(StructuredOutputGrammar):
    """A compiled grammar that accepts every token: the fake model's samples are what the grammar allowed, so the
    update's `accept_tokens` and the drafts' `validate_tokens` pass everything through."""

    def accept_tokens(self, request_id: str, tokens: list[int]) -> bool:
        return True

    def validate_tokens(self, tokens: list[int]) -> list[int]:
        return list(tokens)

    def rollback(self, num_tokens: int) -> None:
        pass

    def fill_bitmask(self, bitmask, batch_index: int) -> None:  # noqa: ANN001 - a torch.Tensor
        pass

    def is_terminated(self) -> bool:
        return False

    def reset(self) -> None:
        pass


class Driver:
    def __init__(self) -> None:
        self.model_dir = stub_model_dir()
        self.model_configs: dict[tuple[int, str], ModelConfig] = {}
        self.scheduler: Scheduler | None = None
        init_none_hash(sha256)  # once per process, as vLLM's own test utilities do

    # ---- ops -------------------------------------------------------------------

    def op_init(self, config: dict) -> dict:
        if LINES is not None:  # a workload just ended; a pooled driver may be killed before the next save
            LINES.save_quietly()
        self.shutdown()
        # The new scheduler replaces the old one even when it is refused below, as it always has.
        self.scheduler, refused = build_scheduler(config, self.model_dir, self.model_configs)
        if refused:
            raise RuntimeError(refused)
        self.block_size = config["block_size"]
        self.pooling = config.get("runner", "generate") == "pooling"
        self.live: dict[str, Request] = {}  # added and not yet reported finished
        self.pending = deque()  # scheduled outputs not yet updated, oldest first
        return {
            "ok": True,
            "vllm_version": vllm.__version__,
            "vllm_file": vllm.__file__,
            "line_coverage": LINES is not None,
        }

    def op_add(self, request: dict) -> dict:
        q = request
        skip = bool(q.get("skip_reading_prefix_cache", False))
        params: SamplingParams | None = None
        pooling: PoolingParams | None = None
        if self.pooling:
            # A pooling model's request: Request.__init__ sets max_tokens 1 and reads the skip flag from here.
            pooling = PoolingParams(task="embed", skip_reading_prefix_cache=skip)
        else:
            params = SamplingParams(
                max_tokens=q["max_tokens"],
                min_tokens=q["min_tokens"],
                ignore_eos=q["ignore_eos"],
                stop_token_ids=list(q["stop_token_ids"]),
                skip_reading_prefix_cache=skip,
            )
            # What the engine does with the model's EOS: check_stop reads `eos_token_id`,
            # which stays None under ignore_eos
            # (vllm/sampling_params.py:SamplingParams.update_from_generation_config (781-782)).
            params.update_from_generation_config({}, eos_token_id=q["eos_token_id"])
            if q.get("structured_output"):
                # Any grammar: the scheduler only asks whether it compiled; `op_grammar` delivers it.
                params.structured_outputs = StructuredOutputsParams(json_object=True)
        lora = q.get("lora_int_id", 0)
        r = Request(
            request_id=q["request_id"],
            prompt_token_ids=list(q["prompt_token_ids"]),
            sampling_params=params,
            pooling_params=pooling,
            arrival_time=q["arrival_time"],
            priority=q["priority"],
            # An adapter by its id; its name and path enter the block hashes (one adapter, one chain).
            lora_request=LoRARequest(f"adapter-{lora}", lora, f"/adapters/{lora}") if lora else None,
            block_hasher=get_request_block_hasher(self.block_size, sha256),
        )
        self._sched().add_request(r)
        self.live[r.request_id] = r
        return {"ok": True}

    def op_grammar(self, request_id: str, compiled: bool) -> dict:
        """The grammar's compile finished: what vLLM's StructuredOutputManager.grammar_init future delivers, set as
        `StructuredOutputRequest.grammar` (a grammar that accepts every token, or the compile's exception)."""
        r = self.live.get(request_id)
        so = getattr(r, "structured_output_request", None) if r is not None else None
        if so is not None and getattr(so, "_grammar", None) is None:
            so.grammar = AcceptAll() if compiled else ValueError("the workload's grammar does not compile")
        return {"ok": True}

    def op_abort(self, request_id: str, status: str = "FINISHED_ABORTED") -> dict:
        # One id at a time (a str, not a set): vLLM iterates a set in hash order,
        # which would make the order blocks are freed in nondeterministic. `status`: a finish from outside.
        aborted = self._sched().finish_requests(request_id, RequestStatus[status])
        self.live.pop(request_id, None)
        return {"finished": _finished(aborted[0]) if aborted else None}

    def op_reset(self, reset_running_requests: bool) -> dict:
        """vLLM's `Scheduler.reset_prefix_cache`, as the engine core calls it between steps (spec/controls.py)."""
        return {"result": self._sched().reset_prefix_cache(reset_running_requests), "summary": self.op_summary()}

    def op_pause(self, pause_state: int) -> dict:
        """vLLM's `Scheduler.set_pause_state` (the engine core's pause_scheduler and resume_scheduler)."""
        self._sched().set_pause_state(PauseState(pause_state))
        return {"ok": True}

    def op_schedule(self, throttle_prefills: bool = False) -> dict:
        s = self._sched()
        # A DP engine core's call off its cadence; vLLM's own EngineCore.step passes the flag positionally.
        so = s.schedule(throttle_prefills) if throttle_prefills else s.schedule()
        self.pending.append(so)
        return {
            "summary": self.op_summary(),  # the state after the op, read now: saves the next round trip
            **vllm_json.scheduler_output(so, s),
        }

    def op_summary(self) -> dict:
        return vllm_json.summary(self._sched())

    def op_update(self, output: dict, model_output: dict, pooler_output: list[str] | None = None) -> dict:
        s = self._sched()
        if not self.pending:
            raise RuntimeError("update without a pending schedule")
        given = [list(kv) for kv in output["num_scheduled_tokens"]]
        # An output that scheduled nothing may go unabsorbed (vLLM's own async tests drop them;
        # absorbing one is a no-op without connectors), so one is skipped when a later one comes.
        while given and len(self.pending) > 1 and not self.pending[0].num_scheduled_tokens:
            self.pending.popleft()
        so = self.pending[0]
        req_ids = list(so.num_scheduled_tokens)
        if given != [[k, v] for k, v in so.num_scheduled_tokens.items()]:
            raise RuntimeError("update: output.num_scheduled_tokens is not the oldest pending schedule's")
        self.pending.popleft()
        runner_output = ModelRunnerOutput(
            req_ids=req_ids,
            req_id_to_index={rid: i for i, rid in enumerate(req_ids)},
            sampled_token_ids=[list(model_output.get(rid, ())) for rid in req_ids],
        )
        if self.pooling:  # the pooled requests' hidden states; the scheduler reads only which are not None
            pooled = set(pooler_output or ())
            runner_output.pooler_output = [POOLED if rid in pooled else None for rid in req_ids]
        s.update_from_output(so, runner_output)
        # Requests leave `scheduler.requests` when freed; our own handles keep their final state.
        order = req_ids + [rid for rid in self.live if rid not in so.num_scheduled_tokens]
        finished = {
            rid: _finished(self.live.pop(rid)) for rid in order if rid in self.live and self.live[rid].is_finished()
        }
        return {"finished": finished, "summary": self.op_summary()}

    def op_draft(self, draft_token_ids: dict) -> dict:
        # What EngineCore.post_step hands the scheduler after a sync step (vllm/v1/engine/core.py:EngineCore.post_step).
        req_ids = list(draft_token_ids)
        self._sched().update_draft_token_ids(
            DraftTokenIds(req_ids=req_ids, draft_token_ids=[list(draft_token_ids[rid]) for rid in req_ids])
        )
        return {"ok": True}

    def shutdown(self) -> None:
        """vLLM's own `Scheduler.shutdown()` of the scheduler being replaced or closed: a monitored one
        (`schedspec.live`, through $SCHEDSPEC_VLLM_SCHEDULER_CLS) ends its capture there."""
        if self.scheduler is not None:
            self.scheduler.shutdown()

    def _sched(self) -> Scheduler:
        if self.scheduler is None:
            raise RuntimeError("no scheduler: send init first")
        return self.scheduler


def _where(e: BaseException) -> str:
    """` at vllm/<file>:<line>`, the innermost vLLM frame of the traceback: which assert failed."""
    frames = [f for f in traceback.extract_tb(e.__traceback__) if f"{os.sep}vllm{os.sep}" in f.filename]
    if not frames:
        return ""
    path = frames[-1].filename
    return f" at {path[path.rindex(os.sep + 'vllm' + os.sep) + 1 :]}:{frames[-1].lineno}"


def main() -> int:
    driver = Driver()
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            msg = json.loads(line)
            op = msg.pop("op")
            if op == "close":
                driver.shutdown()
                if LINES is not None:  # os._exit below skips atexit
                    LINES.save_quietly()
                PROTO.write(json.dumps({"ok": True}) + "\n")
                PROTO.flush()
                sys.stderr.flush()
                # Nothing to clean up; skipping interpreter teardown saves ~1.5 s per close.
                os._exit(0)
            handler = getattr(driver, f"op_{op}", None)
            if handler is None:
                raise ValueError(f"unknown op {op!r}")
            reply = handler(**msg)
        except Exception as e:  # the protocol reports every failure as one line
            reply = {"error": (f"{type(e).__name__}: {e}" + _where(e)).replace("\n", " ")[:2000]}
        PROTO.write(json.dumps(reply) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
