"""Time per `schedule()` (and per `update_from_output()`) with N running decodes, per engine.

The setting follows the vLLM CPU guide's 1000-running-decodes benchmark: N requests with
short prompts and a long `max_tokens`, stepped until all N are decoding; then
`--steps` decode steps are timed, `schedule()` and `update_from_output()`
separately. Every engine measured in one run sees the same workload, so the
ratios between them are what to read; absolute times depend on the machine.

    .venv/bin/python benchmarks/bench_schedule.py --running 1000 10000 [--engine reference ...]
"""

from __future__ import annotations

import argparse
import statistics
import time

from schedspec.spec.config import SchedulerConfig
from schedspec.spec.engine import fake_model
from schedspec.spec.request import Request
from schedspec.spec.workload import Workload, WorkloadRequest

PROMPT_LEN = 16


def decode_workload(num_running: int) -> Workload:
    config = SchedulerConfig(
        max_num_batched_tokens=max(16384, num_running),
        max_num_seqs=num_running,
        max_model_len=32768,
        block_size=16,
        num_gpu_blocks=num_running * 40 + 1,
    )
    requests = tuple(
        WorkloadRequest(
            Request(f"b{i}", (3 + i % 1000,) * PROMPT_LEN, max_tokens=100_000, ignore_eos=True, arrival_time=i)
        )
        for i in range(num_running)
    )
    return Workload(config, requests, name=f"decode-{num_running}")


def make_engine(name: str, config: SchedulerConfig):
    if name == "reference":
        from schedspec.reference_impl import ReferenceEngine

        return ReferenceEngine(config)
    if name == "vllm":
        from schedspec.conformance.engines.vllm import VllmEngine

        return VllmEngine(config)
    raise SystemExit(f"unknown engine {name!r}")


def measure(engine_name: str, num_running: int, steps: int) -> tuple[float, float]:
    """Median seconds per schedule() and per update_from_output() once all requests decode."""
    workload = decode_workload(num_running)
    engine = make_engine(engine_name, workload.config)
    for r in workload.requests:
        engine.add_request(r.request)
    sched_times, update_times = [], []
    warm = False
    while len(sched_times) < steps:
        t0 = time.perf_counter()
        output = engine.schedule()
        t1 = time.perf_counter()
        model_output = fake_model(workload, output, engine.summary())
        t2 = time.perf_counter()
        engine.update_from_output(output, model_output)
        t3 = time.perf_counter()
        if warm:
            assert output.total_num_scheduled_tokens == num_running
            sched_times.append(t1 - t0)
            update_times.append(t3 - t2)
        warm = warm or (
            len(output.num_scheduled_tokens) == num_running and output.total_num_scheduled_tokens == num_running
        )
    if hasattr(engine, "close"):
        engine.close()
    return statistics.median(sched_times), statistics.median(update_times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--running", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--engine", nargs="+", default=["reference"])
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    rows = []
    for n in args.running:
        base = None
        for name in args.engine:
            s, u = measure(name, n, args.steps)
            base = base or s
            rows.append((n, name, s, u, base / s))
    print("| running | engine | schedule() ms | update_from_output() ms | speed vs first engine |")
    print("|---:|---|---:|---:|---:|")
    for n, name, s, u, ratio in rows:
        print(f"| {n} | {name} | {s * 1e3:.2f} | {u * 1e3:.2f} | {ratio:.2f}x |")


if __name__ == "__main__":
    main()
