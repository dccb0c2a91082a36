"""What a workload of a vLLM campaign costs, and what the harness's plumbing adds to it, in one run.

A campaign against the real vLLM spends its time in three places: starting
driver processes (vLLM's imports, seconds each), round trips over the
driver's pipe (JSON both ways, per engine call), and vLLM's own scheduler.
This compares, on the same workloads and one already-started driver:

* `before`: one round trip per engine call, as the adapter did until the
  driver began to answer `schedule` and `update` with the state after them
  (the loop reads `summary()` right after both);
* `after`: the adapter as it is, which reuses those answers.

It also counts the drivers a campaign starts: a determinism re-run used to
drive the engine against itself in lock-step (two drivers per worker); it
now re-runs the engine alone (one).

    .venv/bin/python benchmarks/bench_vllm_campaign.py [--workloads 120]
"""

from __future__ import annotations

import argparse
import time

from schedspec.conformance.engines.vllm import VllmEngine, ensure_vllm_venv
from schedspec.conformance.workloads.families import FAMILIES, generate
from schedspec.spec.config import SchedulerConfig
from schedspec.spec.engine import steps


class RoundTripPerCall(VllmEngine):
    """The adapter before the change: every `summary()` asks the driver."""

    def summary(self):  # type: ignore[override]
        self._summary = None
        return super().summary()


class Counting:
    """Counts the round trips an engine makes (`_call`), whatever the adapter."""

    def __init__(self, engine: VllmEngine) -> None:
        self.engine, self.calls = engine, 0
        real = engine._call

        def counted(*a, **k):
            self.calls += 1
            return real(*a, **k)

        engine._call = counted  # type: ignore[method-assign]


def run(engine_cls: type[VllmEngine], workloads: list) -> tuple[float, int, int]:
    engine = engine_cls(SchedulerConfig())
    counter = Counting(engine)
    n_steps = 0
    t0 = time.perf_counter()
    for w in workloads:
        engine.reset(w.config)
        n_steps += sum(1 for _ in steps(engine, w))
    elapsed = time.perf_counter() - t0
    engine.close()
    return elapsed, n_steps, counter.calls


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workloads", type=int, default=120)
    args = ap.parse_args()
    ensure_vllm_venv()
    names = list(FAMILIES)
    workloads = [generate(names[k % len(names)], 11, k // len(names)) for k in range(args.workloads)]
    t0 = time.perf_counter()
    VllmEngine(SchedulerConfig()).close()
    start = time.perf_counter() - t0
    rows = [
        ("before: a round trip per call", *run(RoundTripPerCall, workloads)),
        ("after: state read with schedule/update", *run(VllmEngine, workloads)),
    ]
    print(f"{args.workloads} workloads (all 12 families, seed 11); one driver start: {start:.1f} s\n")
    print("| adapter | steps | round trips | per step | wall s | ms/step |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, secs, n, calls in rows:
        print(f"| {name} | {n} | {calls} | {calls / n:.2f} | {secs:.2f} | {1000 * secs / n:.2f} |")
    print(f"\nratio before/after: {rows[0][1] / rows[1][1]:.2f}x")


if __name__ == "__main__":
    main()
