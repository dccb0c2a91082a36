"""The torch engine against the reference and the real vLLM 0.33.0, in one run, so the ratios compare like with like.

Two measurements, both in the steady decode state of the vLLM CPU guide's
benchmark (1000 running decodes): requests with 16-token prompts and a long `max_tokens`,
stepped until every one of them decodes (one token each per step); then
steps are timed.

1. Time per step with N running requests in one instance, N = 1k, 10k, 100k.
   A step is `schedule()` + `update_from_output()`; the fake model's answer
   is built between the two and not timed, for every engine.
2. Instance-steps per second with B instances of 256 requests each,
   B = 1, 64, 1024, 8192: the torch engine steps all B instances as one
   batch; the reference and vLLM are sequential, so they step B schedulers
   one after another.

Engines:

* `reference`: the oracle (`ReferenceEngine`), Python objects in and out.
* `torch-cpu` / `torch-cuda`: `gpu_impl.batch.advance`, the tensor step
  (schedule, the tensor fake model, update) on the batched state; what a
  simulator or a search built on the engine runs. The time includes every
  device synchronisation the step needs (CUDA is synchronised before the
  clock stops).
* `torch-cpu (Engine API)`: `TorchEngine` behind the Engine protocol, with
  every field of its `SchedulerOutput` read inside the timing and the
  model's answer given as the spec's `ModelRunnerOutput`: the like-for-like
  comparison with the reference's Python objects.
* `torch-cpu (Engine API, columnar)`: the same engine driven by a tensor
  model: the fake model's tensor twin reads the output's columns and answers
  in `SampledTokens`, and no per-request object is built: what a caller that
  works in tensors pays (`gpu_impl/columnar.py`).
* `vllm`: vLLM 0.33.0's `Scheduler.schedule()` / `update_from_output()`,
  timed inside its own venv (`.venv-vllm-ref`) by calling them directly
  (`vllm_timer.py`): no pipe, no JSON. Skipped with a note if that venv is
  missing.

An engine whose measurement would take too long (the reference and vLLM at
100k, and at B = 8192) gets few timed steps or is marked skipped, never
extrapolated.

    .venv/bin/python benchmarks/bench_torch.py [--device cpu cuda] [--quick] [--results benchmarks/RESULTS.md]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

from schedspec.gpu_impl.device import cpu_threads
from schedspec.spec.config import SchedulerConfig
from schedspec.spec.engine import fake_model
from schedspec.spec.output import SchedulerOutput
from schedspec.spec.request import Request
from schedspec.spec.workload import Workload, WorkloadRequest

from vllm_timer import time_vllm, vllm_python  # a sibling: this file runs as a script

ROOT = Path(__file__).resolve().parents[1]
PROMPT_LEN = 16
API, COLUMNAR = "torch-cpu (Engine API)", "torch-cpu (Engine API, columnar)"
PER_INSTANCE = 256


def decode_workload(num: int) -> Workload:
    # A budget that admits every prompt in the first step: the warm-up is two steps even at 100k.
    config = SchedulerConfig(
        max_num_batched_tokens=num * (PROMPT_LEN + 1),
        max_num_seqs=num,
        max_model_len=32768,
        block_size=16,
        num_gpu_blocks=num * 8 + 1,
    )
    return Workload(config, _requests(num), name=f"decode-{num}")


def instance_workload() -> Workload:
    config = SchedulerConfig(
        max_num_batched_tokens=4096,
        max_num_seqs=PER_INSTANCE,
        max_model_len=32768,
        block_size=16,
        num_gpu_blocks=PER_INSTANCE * 8 + 1,
    )
    return Workload(config, _requests(PER_INSTANCE), name=f"instance-{PER_INSTANCE}")


def _requests(num: int) -> tuple[WorkloadRequest, ...]:
    return tuple(
        WorkloadRequest(
            Request(f"b{i}", (3 + i % 1000,) * PROMPT_LEN, max_tokens=100_000, ignore_eos=True, arrival_time=float(i))
        )
        for i in range(num)
    )


# ---- the Python engines (reference, TorchEngine), stepped in sequence ----------------------------------------


def _python_engine(kind: str, config: SchedulerConfig, device: str):
    if kind == "reference":
        from schedspec.reference_impl import ReferenceEngine

        return ReferenceEngine(config)
    from schedspec.gpu_impl.engine import TorchEngine

    return TorchEngine(config, device)


def time_python(
    kind: str, workload: Workload, instances: int, steps: int, device: str = "cpu", columnar: bool = False
) -> float:
    """Median seconds per round (every instance steps once) once all requests decode.

    `columnar` (the torch engine): a tensor model answers. The fake model's tensor twin (`gpu_impl.fake_model`)
    reads the output's columns and gives `SampledTokens`, outside the timing, and nothing reads the output's
    per-request objects, so none is built. Why not the spec's fake model, converted: building its 10,000
    objects between two steps, even untimed, evicts the engine's state from the caches, and the next step
    paid 0.5 ms for it at 10k (2.2-2.5 ms against 1.5-2.0 ms, measured). That is the cost of a Python model, not
    of the engine. Otherwise the step reads every field of its output inside the timing, and the answer goes
    in as the spec's `ModelRunnerOutput`.
    """
    engines = [_python_engine(kind, workload.config, device) for _ in range(instances)]
    with cpu_threads(torch.device(device)):  # held across the loop, as `time_torch` holds it
        return _time_python(engines, workload, steps, columnar)


def _time_python(engines: list, workload: Workload, steps: int, columnar: bool) -> float:
    for e in engines:
        _add_all(e, workload)
    # The engines of earlier measurements in this process die in the cyclic collector (the reference's scheduler
    # and its block pool point at each other), not at once: collect them now, or every later measurement runs
    # on a heap full of them, which cost the reference up to half again at 1,000 (measured). vLLM is timed in
    # a fresh process each time (`vllm_timer.py`).
    gc.collect()
    times, steady = [], 0
    while len(times) < steps:
        spent, all_decode = 0.0, True
        for e in engines:
            seconds, decoding = python_step(e, workload, columnar, check=steady == 0)
            spent += seconds
            all_decode &= decoding
        if steady >= 1:
            times.append(spent)
        steady = steady + 1 if all_decode else 0
    return statistics.median(times)


def _add_all(e, workload: Workload) -> None:  # an engine: the reference or a TorchEngine
    if hasattr(e, "add_requests"):
        e.add_requests(r.request for r in workload.requests)
    else:
        for r in workload.requests:
            e.add_request(r.request)


def python_step(e, workload: Workload, columnar: bool, check: bool = False) -> tuple[float, bool]:
    """One step of an engine behind the Engine protocol: the seconds `schedule()` and `update_from_output()`
    took (the answer is built between them, untimed), and whether every request decoded one token.

    `check` (columnar only): compare the tensor model's answer with the spec's fake model's, untimed."""
    t0 = time.perf_counter()
    output = e.schedule()
    if not columnar:
        _read(output)
    t1 = time.perf_counter()
    model_output = _tensor_answer(e, workload, output, check) if columnar else fake_model(workload, output, e.summary())
    t2 = time.perf_counter()
    e.update_from_output(output, model_output)
    seconds = time.perf_counter() - t2 + t1 - t0
    del model_output  # freed here, outside the timing, not when the next step's answer replaces it
    n = len(workload.requests)
    scheduled = int((output.columns.n_sched > 0).sum()) if columnar else len(output.num_scheduled_tokens)
    return seconds, scheduled == n == output.total_num_scheduled_tokens


def python_stepper(kind: str, workload: Workload, columnar: bool = False) -> Callable[[], float]:
    """A fresh engine in the steady decode state, and a function that steps it once and says how long it took:
    for `bench_speed.py`, which alternates engines step by step."""
    e = _python_engine(kind, workload.config, "cpu")
    _add_all(e, workload)
    steady = 0
    while steady < 2:
        decoding = python_step(e, workload, columnar, check=columnar and steady == 0)[1]
        steady = steady + 1 if decoding else 0

    def step() -> float:
        seconds, decoding = python_step(e, workload, columnar)
        assert decoding, "the decode state ended"
        return seconds

    return step


def _tensor_answer(e, workload: Workload, output, check: bool):  # a TorchEngine and its DeferredSchedulerOutput
    """The fake model's answer from its tensor twin, as a tensor model gives it; checked once against the spec's."""
    from schedspec.gpu_impl.columnar import SampledTokens
    from schedspec.gpu_impl.fake_model import fake_model as tensor_fake_model

    c = output.columns
    tokens, count = tensor_fake_model(e.st, c.n_sched, c.n_spec, c.spec_vals)
    answer = SampledTokens(tokens[0], count[0])
    if check:  # the twins must agree, or the timing is of another run (outside the timing, once per state)
        expected = e.sampled_tokens(fake_model(workload, output, e.summary()))
        kept = torch.arange(answer.tokens.shape[1]) < answer.count[:, None]  # past its count a row is scratch
        same = torch.equal(answer.count, expected.count) and torch.equal(answer.tokens[kept], expected.tokens[kept])
        assert same, "the tensor fake model's answer differs from the spec's fake model's"
    return answer


def _read(output: SchedulerOutput) -> None:
    """Every field of the output, as a consumer of the objects (the differ, a trace) reads them."""
    for name in ("num_scheduled_tokens", "scheduled_new_reqs", "scheduled_cached_reqs", "preempted_req_ids"):
        getattr(output, name)


# ---- the torch tensor step ---------------------------------------------------------------------------------------


def time_torch(workload: Workload, instances: int, steps: int, device: str) -> float:
    gc.collect()  # as `_time_python` does
    with cpu_threads(torch.device(device)):
        step = tensor_stepper([workload] * instances, device)
        return statistics.median(step() for _ in range(steps))


def tensor_stepper(workloads: list[Workload], device: str) -> Callable[[], float]:
    """The batched tensor state of `workloads` in the steady decode state, and a function that steps it once and
    says how long it took (call it under `device.cpu_threads`)."""
    from schedspec.gpu_impl.batch import advance, build_state

    dev = torch.device(device)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    st = build_state(workloads, dev)
    st.arrive(st.arrival_step == 0)
    total = sum(len(w.requests) for w in workloads)
    steady = 0
    while steady < 3:  # all decoding for a few steps: warm caches and allocators
        out = advance(st)[0]
        steady = steady + 1 if int(out.n_sched.sum()) == total and int((out.n_sched == 1).sum()) == total else 0

    def step() -> float:
        sync()
        t0 = time.perf_counter()
        out = advance(st)[0]
        sync()
        seconds = time.perf_counter() - t0
        assert int((out.n_sched == 1).sum()) == total, "the decode state ended"
        return seconds

    return step


# ---- the run -----------------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", nargs="+", default=["cpu"] + (["cuda"] if torch.cuda.is_available() else []))
    parser.add_argument("--running", type=int, nargs="+", default=[1000, 10000, 100000])
    parser.add_argument("--instances", type=int, nargs="+", default=[1, 64, 1024, 8192])
    parser.add_argument("--no-vllm", action="store_true", help="skip vLLM even if its venv exists")
    parser.add_argument("--quick", action="store_true", help="fewer timed steps (a smoke run)")
    parser.add_argument("--results", help="append the tables, with the command, to this Markdown file")
    parser.add_argument("--json", help="also write the raw numbers here")
    args = parser.parse_args()
    q = args.quick
    engines = ["reference"] + [f"torch-{d}" for d in args.device] + [API, COLUMNAR]
    notes: list[str] = [
        "torch-cpu / torch-cuda: the tensor step (`gpu_impl.batch.advance`: schedule, tensor fake model, update) "
        "on the batched state, every device synchronisation included; no Python objects are built.",
        f"{API}: `TorchEngine` through the Engine protocol, every field of its `SchedulerOutput` read inside the "
        "timing and the model's answer given as the spec's `ModelRunnerOutput` (the fake model's answer is built "
        "outside the timing for every engine). One instance per engine, so n/a for B > 1.",
        f"{COLUMNAR}: the same engine driven by a tensor model: the fake model's tensor twin reads the output's "
        "columns and answers in `SampledTokens` (untimed, checked against the spec's fake model), and no "
        "per-request object is built (`gpu_impl/columnar.py`).",
        "vllm: `Scheduler.schedule()` + `update_from_output()` of vLLM 0.33.0 called directly inside its venv.",
        "skipped: a sequential engine with that many schedulers takes too long to build and step here "
        "(reference above B = 1,024, vLLM above B = 64); nothing is extrapolated.",
    ]
    if args.no_vllm:
        notes.append("vllm: skipped (--no-vllm).")
    elif vllm_python() is None:
        notes.append("vllm: skipped, its venv is missing (run conformance/vllm_env/setup_vllm_ref.sh).")
    else:
        engines.append("vllm")

    def measure(engine: str, workload: Workload, instances: int, steps: int) -> float:
        if engine == "reference":
            return time_python("reference", workload, instances, steps)
        if engine in (API, COLUMNAR):
            return time_python("torch", workload, instances, steps, "cpu", columnar=engine == COLUMNAR)
        if engine == "vllm":
            return time_vllm(workload, instances, steps, PROMPT_LEN)
        return time_torch(workload, instances, steps, engine.removeprefix("torch-"))

    per_step: dict[str, dict[int, float | str]] = {e: {} for e in engines}
    for n in args.running:
        w = decode_workload(n)
        for e in engines:
            slow = e in ("reference", "vllm", API, COLUMNAR)
            steps = (3 if n >= 100_000 else 5 if n >= 10_000 else 20) if slow else (20 if n >= 100_000 else 50)
            per_step[e][n] = measure(e, w, 1, 2 if q else steps)
            print(f"per step  {e:24s} N={n:>6}: {per_step[e][n] * 1e3:10.3f} ms", flush=True)

    rate: dict[str, dict[int, float | str]] = {e: {} for e in engines}
    wi = instance_workload()
    for b in args.instances:
        for e in engines:
            if e in (API, COLUMNAR) and b > 1:
                rate[e][b] = "n/a"
                continue
            if (e == "vllm" and b > 64) or (e == "reference" and b > 1024):
                rate[e][b] = "skipped"
                continue
            slow = e in ("reference", "vllm", API, COLUMNAR)
            steps = 2 if q else (3 if slow and b >= 64 else 10 if slow else 10 if b >= 1024 else 30)
            if e.startswith("torch-cpu") and b >= 8192:
                steps = 2 if q else 3
            seconds = measure(e, wi, b, steps)
            rate[e][b] = b / seconds
            print(f"rate      {e:24s} B={b:>5}: {rate[e][b]:12.0f} instance-steps/s", flush=True)

    text = report(per_step, rate, args, notes)
    print(text)
    if args.results:
        with open(args.results, "a", encoding="utf-8") as f:
            f.write("\n" + text)
    if args.json:
        Path(args.json).write_text(
            json.dumps({"per_step_s": per_step, "instance_steps_per_s": rate, "notes": notes}, indent=1, default=str)
        )


def _fmt(x: float | str, scale: float = 1.0, digits: int = 2) -> str:
    return x if isinstance(x, str) else f"{x * scale:,.{digits}f}"


def report(per_step, rate, args, notes) -> str:
    exe = os.path.relpath(sys.executable, ROOT) if sys.executable.startswith(str(ROOT)) else "python"
    cmd = f"{exe} benchmarks/bench_torch.py " + " ".join(sys.argv[1:])
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    lines = [
        f"## Torch engine vs reference vs vLLM 0.33.0 ({time.strftime('%Y-%m-%d')})",
        "",
        f"Command: `{cmd}`",
        "",
        f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPU cores, {gpu}; "
        f"Python {platform.python_version()}, torch {torch.__version__}; load average at the end "
        f"{os.getloadavg()[0]:.1f} (a shared machine: absolute times vary, ratios are within this one run).",
        "",
        "### Time per step (schedule + update_from_output), N running decodes in one instance",
        "",
        "| engine | "
        + " | ".join(f"N={n:,} ms" for n in args.running)
        + " | "
        + " | ".join(f"x ref at {n:,}" for n in args.running)
        + " |",
        "|---|" + "---:|" * (2 * len(args.running)),
    ]
    ref = per_step["reference"]
    for e, row in per_step.items():
        cells = [_fmt(row[n], 1e3, 3) for n in args.running]
        ratios = [
            f"{ref[n] / row[n]:,.1f}x" if not isinstance(row[n], str) and not isinstance(ref[n], str) else "-"
            for n in args.running
        ]
        lines.append(f"| {e} | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |")
    lines += [
        "",
        f"### Instance-steps per second, B instances of {PER_INSTANCE} decoding requests",
        "",
        "| engine | "
        + " | ".join(f"B={b:,}" for b in args.instances)
        + " | "
        + " | ".join(f"x ref at B={b:,}" for b in args.instances)
        + " |",
        "|---|" + "---:|" * (2 * len(args.instances)),
    ]
    ref = rate["reference"]
    for e, row in rate.items():
        cells = [_fmt(row[b], 1.0, 0) for b in args.instances]
        ratios = [
            f"{row[b] / ref[b]:,.1f}x" if not isinstance(row[b], str) and not isinstance(ref[b], str) else "-"
            for b in args.instances
        ]
        lines.append(f"| {e} | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |")
    lines += [""] + [f"- {n}" for n in notes]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
