"""Wall time and peak memory of `schedspec check` on the trace of a long run, streamed and loaded whole.

The traces are those of `bench_simulate_scale.serving_workload` (N short
requests, a few arriving per step, about 150 live at a time), written by
`schedspec simulate WORKLOAD --out TRACE`. Two ways of checking each:

* `whole`: the path `schedspec check` took before it streamed, called
  directly: `Trace.load`, then `check_consistency`, then `check_trace`,
  each checker with its own replay, the whole trace in memory.
* `check`: `schedspec check TRACE` itself: one pass over the steps as they
  are read (`spec/trace_stream.py`, `spec/invariants/onepass.py`).

Each measurement is a fresh process started by a fresh parent, which
reports the wall seconds and `getrusage(RUSAGE_CHILDREN).ru_maxrss` of its
one child: the peak RSS of that command alone. `--tree NAME=DIR` measures
`whole` against another copy of the package too (a `DIR/schedspec` laid out
as installed), so that the code from before is measured beside the current.

    .venv/bin/python benchmarks/bench_check_scale.py --requests 10000 50000 --keep /tmp/traces [--tree before=/tmp/old]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_simulate_scale import serving_workload

# The parent of one measured command: its child is the only one getrusage(RUSAGE_CHILDREN) sees.
_PARENT = r"""
import json, resource, subprocess, sys, time
argv = json.loads(sys.argv[1])
t0 = time.perf_counter()
rc = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
wall = time.perf_counter() - t0
peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
print(json.dumps({"rc": rc.returncode, "wall_s": wall, "peak_mb": peak_mb, "stderr": rc.stderr[-3000:]}))
"""

# `whole`: what `schedspec check` computed before it streamed (the table aside).
_WHOLE = r"""
import sys
from schedspec.spec.invariants import check_trace
from schedspec.spec.invariants.consistency import check_consistency
from schedspec.spec.trace import Trace
trace = Trace.load(sys.argv[1])
broken = check_consistency(trace) + check_trace(trace)
print(len(trace.steps), "steps,", len(broken), "violations")
sys.exit(1 if broken else 0)
"""


def _schedspec() -> list[str]:
    script = os.path.join(os.path.dirname(sys.executable), "schedspec")
    if os.path.exists(script):
        return [script]
    return [sys.executable, "-c", "import sys; from schedspec.cli import main; sys.exit(main(sys.argv[1:]))"]


def measure(argv: list[str], tree: str | None = None) -> dict:
    env = dict(os.environ)
    if tree:  # ahead of the editable install's finder, which sys.meta_path consults last
        env["PYTHONPATH"] = tree
    proc = subprocess.run(
        [sys.executable, "-c", _PARENT, json.dumps(argv)],
        env=env,
        capture_output=True,
        text=True,
        cwd=tempfile.gettempdir(),
    )
    result = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 and proc.stdout.strip() else None
    if result is None or result["rc"] not in (0, 1):
        raise SystemExit(f"measurement failed: {argv}\n{proc.stderr[-3000:]}{result and result['stderr']}")
    return result


def trace_of(n: int, folder: str) -> str:
    """The trace of the N-request serving run, simulated once and kept in `folder`."""
    trace = os.path.join(folder, f"serving-{n}.trace.json")
    if not os.path.exists(trace):
        workload = os.path.join(folder, f"serving-{n}.json")
        with open(workload, "w") as f:
            json.dump(serving_workload(n).to_json(), f)
        r = measure(_schedspec() + ["simulate", workload, "--out", trace, "--force"])
        print(f"N={n}: simulate --out took {r['wall_s']:.1f} s", flush=True)
    return trace


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, nargs="+", default=[10_000, 50_000])
    parser.add_argument(
        "--keep", metavar="DIR", help="keep the traces here and reuse them (default: a temporary folder)"
    )
    parser.add_argument(
        "--tree",
        action="append",
        default=[],
        metavar="NAME=DIR",
        help="also measure `whole` with the package under DIR (DIR/schedspec)",
    )
    parser.add_argument("--skip-current-whole", action="store_true", help="measure `whole` only under --tree")
    args = parser.parse_args()
    runs = [
        (f"whole ({name})", [sys.executable, "-c", _WHOLE], path) for name, path in (t.split("=", 1) for t in args.tree)
    ]
    if not args.skip_current_whole:
        runs.append(("whole (current)", [sys.executable, "-c", _WHOLE], None))
    runs.append(("check (current)", _schedspec() + ["check"], None))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.keep or tmp
        os.makedirs(folder, exist_ok=True)
        for n in args.requests:
            trace = trace_of(n, folder)
            size_mb = os.path.getsize(trace) / 2**20
            for name, argv, tree in runs:
                r = measure(argv + [trace], tree)
                rows.append((n, size_mb, name, r["wall_s"], r["peak_mb"]))
                print(
                    f"N={n} ({size_mb:.0f} MB trace) {name}: {r['wall_s']:.1f} s, peak {r['peak_mb']:.0f} MB",
                    flush=True,
                )
    print("\n| requests | trace MB | path | wall s | peak RSS MB |\n|---:|---:|---|---:|---:|")
    for n, size_mb, name, wall, peak in rows:
        print(f"| {n:,} | {size_mb:.0f} | {name} | {wall:.1f} | {peak:.0f} |")


if __name__ == "__main__":
    main()
