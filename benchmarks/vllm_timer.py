"""Timing vLLM 0.33.0's scheduler inside its own venv, for `bench_torch.py` and `bench_speed.py`.

`time_vllm` runs one measurement per process; `PipeStepper` keeps a process (vLLM's, or one of the project's
engines) and steps it on demand over a pipe, the time taken inside the process, for `bench_speed.py`'s turns.

Why it is separate: everything else in the benchmark runs in the project's
venv on the project's objects; this runs in `.venv-vllm-ref` (vLLM pins its
own torch and stack), so it is a script passed to that interpreter, with its
own copy of the measurement loop. It loads `conformance/vllm_env/driver.py`
by path for the driver's scheduler set-up, then calls `Scheduler.schedule()`
and `update_from_output()` directly: no pipe, no JSON, so the numbers are
vLLM's and not the adapter's. The heap is frozen before the timing, as vLLM's
EngineCore freezes it after start-up (`freeze_gc_heap`), so vLLM runs with the
garbage-collector setting it ships with.

The venv cannot receive `Request` objects, so the timer rebuilds the
benchmark's decode requests from their shape (`b{i}`, a prompt of
`prompt_len` copies of `3 + i % 1000`, a long `max_tokens`, EOS ignored);
`bench_torch._requests` builds the same ones for the other engines.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path

from schedspec.spec.workload import Workload

# The set-up and one step, shared by the timer (one process per measurement) and the stepper (stepped on demand).
_SETUP = r"""
import importlib.util, json, statistics, sys, time
spec = importlib.util.spec_from_file_location("vllm_driver", sys.argv[1])
d = importlib.util.module_from_spec(spec); spec.loader.exec_module(d)
a = json.loads(sys.argv[2])
drv, scheds = d.Driver(), []
for b in range(a["instances"]):
    drv.op_init(config=a["config"])
    for i in range(a["requests"]):
        drv.op_add(request={"request_id": f"b{i}", "prompt_token_ids": [3 + i % 1000] * a["prompt"], "max_tokens": 100000,
                            "min_tokens": 0, "ignore_eos": True, "stop_token_ids": [], "eos_token_id": None,
                            "arrival_time": float(i), "priority": 0})
    scheds.append(drv.scheduler)
# vLLM's EngineCore freezes its heap once started (vllm/v1/engine/core.py:EngineCore.__init__), so that the
# collector's full passes skip it; here it is frozen after the requests are in too, which can only help vLLM.
from vllm.utils.gc_utils import freeze_gc_heap
freeze_gc_heap()

def step(s):
    t0 = time.perf_counter(); so = s.schedule(); t1 = time.perf_counter()
    ids = list(so.num_scheduled_tokens)
    sampled = [[7] if s.requests[r].num_computed_tokens >= s.requests[r].num_tokens else [] for r in ids]
    mro = d.ModelRunnerOutput(req_ids=ids, req_id_to_index={r: i for i, r in enumerate(ids)}, sampled_token_ids=sampled)
    t2 = time.perf_counter(); s.update_from_output(so, mro); t3 = time.perf_counter()
    return (t1 - t0) + (t3 - t2), len(ids) == a["requests"] == sum(so.num_scheduled_tokens.values())
"""

VLLM_TIMER = (
    _SETUP
    + r"""
times, steady = [], 0
while len(times) < a["steps"]:
    spent, all_decode = 0.0, True
    for s in scheds:
        seconds, decoding = step(s)
        spent += seconds
        all_decode &= decoding
    if steady >= 1:
        times.append(spent)
    steady = steady + 1 if all_decode else 0
d.PROTO.write(json.dumps({"seconds": statistics.median(times), "vllm": d.vllm.__version__}) + "\n")
"""
)

VLLM_STEPPER = (
    _SETUP
    + r"""
steady = 0
while steady < 2:
    steady = steady + 1 if step(scheds[0])[1] else 0
d.PROTO.write(json.dumps({"ready": d.vllm.__version__}) + "\n")
for line in sys.stdin:
    seconds, decoding = step(scheds[0])
    d.PROTO.write(json.dumps({"seconds": seconds, "decoding": decoding}) + "\n")
"""
)


def vllm_python() -> Path | None:
    from schedspec.conformance.engines.vllm import vllm_venv_path, vllm_venv_ready

    venv = vllm_venv_path()
    return venv / "bin" / "python" if vllm_venv_ready(venv) else None


def _args(workload: Workload, instances: int, steps: int, prompt_len: int) -> list[str]:
    from schedspec.conformance.engines.vllm import DRIVER

    args = {
        "config": workload.config.to_dict(),
        "requests": len(workload.requests),
        "prompt": prompt_len,
        "instances": instances,
        "steps": steps,
    }
    return [str(DRIVER), json.dumps(args)]


def time_vllm(workload: Workload, instances: int, steps: int, prompt_len: int) -> float:
    """Median seconds per round of `instances` vLLM schedulers on `workload`'s decode requests, once all decode."""
    done = subprocess.run(
        [str(vllm_python()), "-c", VLLM_TIMER, *_args(workload, instances, steps, prompt_len)],
        capture_output=True,
        text=True,
        timeout=3600,
    )
    if done.returncode != 0:
        raise RuntimeError(f"vLLM timer failed: {done.stderr.strip().splitlines()[-1:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])["seconds"]


class PipeStepper:
    """An engine in a process of its own, stepped on demand over a pipe: `step()` returns the seconds its
    `schedule()` and `update_from_output()` took, timed inside that process (the pipe is outside the timing).

    The process prints one JSON line when it is in the decode state, then answers each line it reads with
    `{"seconds": ..., "decoding": ...}`. `bench_speed.py` runs every engine so, vLLM in its venv and the others
    in the project's, and gives them turns: each side of a ratio then meets the same moments of a shared
    machine, in a process, a heap and a cache of its own.
    """

    def __init__(self, command: list[str]) -> None:
        self.command = command
        # stderr (vLLM's warnings) to a file: a pipe nobody drains would block the process once it filled
        self.stderr = tempfile.TemporaryFile(mode="w+")
        self.process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr, text=True
        )
        self._reply()  # set up and in the decode state

    def _reply(self) -> dict:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            code = self.process.wait()
            self.stderr.seek(0)
            why = self.stderr.read().strip().splitlines()[-1:]
            raise RuntimeError(f"the stepper {self.command[:3]} exited ({code}): {why}")
        reply: dict = json.loads(line)
        return reply

    def step(self) -> float:
        assert self.process.stdin is not None
        self.process.stdin.write("step\n")
        self.process.stdin.flush()
        reply = self._reply()
        assert reply["decoding"], f"{self.command[:3]}: the decode state ended"
        return float(reply["seconds"])

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.stderr.close()


def vllm_stepper(workload: Workload, prompt_len: int) -> PipeStepper:
    """One vLLM scheduler on `workload`'s decode requests, in its venv (`PipeStepper`)."""
    return PipeStepper([str(vllm_python()), "-c", VLLM_STEPPER, *_args(workload, 1, 0, prompt_len)])
