"""Wall time and peak memory of `schedspec simulate` as the number of requests grows.

The workload is steady serving traffic: N short requests (prompts of 16-128
tokens, 8-64 output tokens) arriving a few per step, with room for all of
them in the pool, so the number of live requests stays flat (about 150) and
the number of steps grows with N. A simulator whose cost per step is steady
therefore takes time and memory linear in N; anything that grows with the
requests seen so far shows up as the ratio between two sizes.

Each measurement is a fresh subprocess (peak RSS is per process), running
`schedspec.cli.main` with stdout thrown away; `--tree NAME=DIR` runs the same
command against another copy of the package (a `DIR/schedspec` laid out as
installed), so that before and after are measured in one run.

    .venv/bin/python benchmarks/bench_simulate_scale.py --requests 10000 50000 [--tree before=/tmp/old]
    .venv/bin/python benchmarks/bench_simulate_scale.py --requests 10000 --profile   # cProfile, top functions
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile

ARRIVALS_PER_STEP = 4
TAIL_STEPS = 1000  # after the last arrival: enough to drain

_MEASURE = r"""
import json, os, resource, sys, time
argv, profile = json.loads(sys.argv[1]), sys.argv[2] == "1"
real_stdout, sys.stdout = sys.stdout, open(os.devnull, "w")
from schedspec.cli import main
t0 = time.perf_counter()
if profile:
    import cProfile, pstats
    prof = cProfile.Profile()
    rc = prof.runcall(main, argv)
    pstats.Stats(prof, stream=sys.stderr).sort_stats("tottime").print_stats(25)
else:
    rc = main(argv)
wall = time.perf_counter() - t0
peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"rc": rc, "wall_s": wall, "peak_mb": peak_mb}), file=real_stdout)
"""


def serving_workload(num_requests: int, seed: int = 0):
    from schedspec.spec.config import SchedulerConfig
    from schedspec.spec.request import Request
    from schedspec.spec.workload import Workload, WorkloadRequest

    rng = random.Random(seed)
    config = SchedulerConfig(
        max_num_batched_tokens=8192, max_num_seqs=256, max_model_len=4096, block_size=16, num_gpu_blocks=8192
    )
    requests = tuple(
        WorkloadRequest(
            Request(
                f"q{i}",
                (10 + i % 1000,) * rng.randint(16, 128),
                max_tokens=rng.randint(8, 64),
                ignore_eos=True,
                arrival_time=float(i),
            ),
            arrival_step=i // ARRIVALS_PER_STEP,
        )
        for i in range(num_requests)
    )
    return Workload(
        config, requests, name=f"serving-{num_requests}", max_steps=num_requests // ARRIVALS_PER_STEP + TAIL_STEPS
    )


def measure(tree: str | None, argv: list[str], profile: bool = False) -> dict:
    env = dict(os.environ)
    if tree:  # ahead of the editable install's finder, which sys.meta_path consults last
        env["PYTHONPATH"] = tree
    proc = subprocess.run(
        [sys.executable, "-c", _MEASURE, json.dumps(argv), "1" if profile else "0"],
        env=env,
        capture_output=True,
        text=True,
        cwd=tempfile.gettempdir(),
    )
    if proc.returncode != 0 or not proc.stdout.strip():
        raise SystemExit(f"measurement failed: {argv}\n{proc.stderr[-3000:]}")
    if profile:
        print(proc.stderr, file=sys.stderr)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, nargs="+", default=[10_000, 50_000])
    parser.add_argument(
        "--tree",
        action="append",
        default=[],
        metavar="NAME=DIR",
        help="also measure the package under DIR (DIR/schedspec)",
    )
    parser.add_argument("--profile", action="store_true", help="cProfile the current tree instead, without --out")
    args = parser.parse_args()
    trees = [(name, path) for name, path in (t.split("=", 1) for t in args.tree)] + [("current", None)]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.requests:
            path = os.path.join(tmp, f"serving-{n}.json")
            with open(path, "w") as f:
                json.dump(serving_workload(n).to_json(), f)
            if args.profile:
                r = measure(None, ["simulate", path], profile=True)
                print(f"N={n}: {r['wall_s']:.1f} s under cProfile, peak {r['peak_mb']:.0f} MB")
                continue
            for name, tree in trees:
                for out in (False, True):
                    trace = os.path.join(tmp, f"trace-{name}-{n}.json")
                    r = measure(tree, ["simulate", path] + (["--out", trace, "--force"] if out else []))
                    size_mb = os.path.getsize(trace) / 2**20 if out else None
                    rows.append((n, name, out, r["wall_s"], r["peak_mb"], size_mb))
                    print(
                        f"N={n} {name} {'--out' if out else 'no --out'}: {r['wall_s']:.2f} s, "
                        f"peak {r['peak_mb']:.0f} MB" + (f", trace {size_mb:.0f} MB" if out else ""),
                        flush=True,
                    )
    if rows:
        print("\n| requests | tree | --out | wall s | peak MB | trace MB |\n|---:|---|---|---:|---:|---:|")
        for n, name, out, wall, peak, size in rows:
            print(
                f"| {n:,} | {name} | {'yes' if out else 'no'} | {wall:.2f} | {peak:.0f} | {'' if size is None else f'{size:.0f}'} |"
            )


if __name__ == "__main__":
    main()
