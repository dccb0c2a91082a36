"""Hypothesis state machine throughput: examples per second on the pristine reference, core and with the features.

The machine (`conformance/search/state_machine.py`) is what `schedspec hunt` and the mutants' `hypothesis` checker
run; its examples per second are the budget of every search it makes. Each row runs the same derandomized
search as `kill_by_state_machine(None, ...)` (fixed seed, `--examples` examples, 25 steps each) and counts the
examples Hypothesis ran, so a before/after pair measures the same examples.

    .venv/bin/python benchmarks/bench_state_machine.py [--examples 200]
"""

from __future__ import annotations

import argparse
import time

from schedspec.conformance.search import state_machine_hunt
from schedspec.conformance.search.state_machine_draws import Bounds


def measure(bounds: Bounds, examples: int) -> tuple[int, float]:
    """(examples run, seconds): the count is the machine's own run log, not the number asked for."""
    made = []
    build = state_machine_hunt.machine_for

    def recording(b: Bounds) -> type:
        made.append(build(b))
        return made[-1]

    state_machine_hunt.machine_for = recording  # type: ignore[assignment]
    try:
        t0 = time.perf_counter()
        found = state_machine_hunt.kill_by_state_machine(None, budget_s=None, max_examples=examples, bounds=bounds)
        seconds = time.perf_counter() - t0
    finally:
        state_machine_hunt.machine_for = build  # type: ignore[assignment]
    assert found is None, found  # the pristine reference breaks nothing
    return made[0].log.examples, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--examples", type=int, default=200)
    args = parser.parse_args()
    print("| bounds | examples | seconds | examples/s |")
    print("|---|---:|---:|---:|")
    for name, bounds in (("core", Bounds()), ("features", Bounds(features=True))):
        n, s = measure(bounds, args.examples)
        print(f"| {name} | {n} | {s:.1f} | {n / s:.1f} |", flush=True)


if __name__ == "__main__":
    main()
