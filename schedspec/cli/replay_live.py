"""`schedspec replay-live`: replay a capture of a live vLLM server on the reference (`docs/live.md`).

It shows what `replay` shows for a counterexample: the steps before the
divergence side by side (`explain.side_by_side`, drawn by `replay`'s own
table), the diverging field, a PNG timeline of both runs, and, with `--out`,
a certificate in `certify`'s formats (`certificate.json`, `certificate.md`,
`junit.xml`) for one workload, the rebuilt one, written beside it
(`workload.json`) and, on a divergence, as a counterexample that `schedspec
replay` runs on the offline vLLM of the capture's release.
"""

from __future__ import annotations

import argparse
import os
import time

from rich.console import Console

from ..conformance.campaign.certify import OUTPUT_NAMES, write_outputs
from ..conformance.harness.compare import LEVELS
from ..conformance.harness.counterexample import Counterexample
from ..conformance.harness.explain import WINDOW, side_by_side
from ..conformance.live_replay.certificate import certificate, certificate_markdown, engine_name, offline_vllm
from ..conformance.live_replay.replay import LiveReplay, replay_live
from ..spec.jsonio import write_bytes_atomic, write_json_atomic
from ..spec.trace import Trace
from .argparsing import Subcommands

EXIT_PASSED, EXIT_DIVERGED = 0, 1
WORKLOAD, COUNTEREXAMPLE, TIMELINE = "workload.json", "counterexample-live.json", "timeline.png"


def cmd_replay_live(args: argparse.Namespace, console: Console) -> int:
    from ..outdir import OutDir
    from ..spec.errors import SpecError

    if args.plot and not args.out:
        raise SpecError("--plot", True, "needs --out DIR: the timeline is written there as timeline.png")
    out = OutDir(args.out, args.force, "--out", "replay-live") if args.out else None
    t0 = time.perf_counter()
    result = replay_live(args.capture, args.session, args.level)
    elapsed = time.perf_counter() - t0

    def say(text: str, style: str | None = None) -> None:
        console.print(text, style=style, markup=False, highlight=False, soft_wrap=True)

    s, d = result.session, result.divergence
    say(
        f"{args.capture}: {len(result.capture.parts)} part(s), session {s.id}, {engine_name(result)} "
        f"(vLLM {s.header.data.get('vllm_version', '?')}), {len(result.workload.requests)} requests, "
        f"{len(result.captured)} steps, level {result.level}"
        + (", token ids hashed" if s.header.data.get("hashed_token_ids") else "")
    )
    if result.others:
        say(
            f"other sessions in this capture (a restarted server; replay one with --session ID): {', '.join(result.others)}"
        )
    for note in result.notes:
        say(f"note: {note}", style="yellow")
    if d is None:
        say(f"no divergence: the reference agrees with the capture on all {result.steps_compared} steps", style="green")
    else:
        from ..render.side_by_side import rich_side_by_side

        console.print(
            rich_side_by_side(side_by_side(result.reference, result.captured, d, args.window), "reference", "live")
        )
        say(f"diverges at step {d.step}: {d.field}: reference={d.a!r} live={d.b!r}", style="red")
    if out is not None:
        out.prepare([*OUTPUT_NAMES, WORKLOAD, COUNTEREXAMPLE, TIMELINE])
        written = write_report(result, out.dir, elapsed, args.plot)
        out.record(written)
        say(f"written: {', '.join(out.final(p) for p in written)}")
    return EXIT_PASSED if d is None else EXIT_DIVERGED


def write_report(result: LiveReplay, out_dir: str, elapsed: float, plot: bool) -> list[str]:
    """The certificate (JSON, Markdown, JUnit), the rebuilt workload, the counterexample and the timeline."""
    written = [os.path.join(out_dir, WORKLOAD)]
    write_json_atomic(written[0], result.workload.to_json())
    d = result.divergence
    cx_file = None
    if d is not None:
        cx_file = os.path.join(out_dir, COUNTEREXAMPLE)
        w = result.workload
        Counterexample.of(w, d, "reference", offline_vllm(result), result.level, {}, w, 0).write(cx_file)
        written.append(cx_file)
    cert, results = certificate(result, elapsed, cx_file)
    if plot:
        from ..render.timeline import plot_timelines

        png = os.path.join(out_dir, TIMELINE)
        traces = [
            Trace(result.workload, tuple(r), name)
            for r, name in ((result.reference, "reference"), (result.captured, "live"))
        ]
        mark = (None, None) if d is None else (d.step, d.field)
        plot_timelines(traces, png, ["reference (a)", f"{engine_name(result)} (b)"], *mark)
        written.append(png)
        for c in cert["counterexamples"]:
            c["timeline"] = png
    paths = write_outputs(out_dir, cert, results)
    write_bytes_atomic(paths[1], certificate_markdown(cert).encode())
    return written + paths


def add_replay_live_parser(sub: Subcommands) -> None:
    p = sub.add_parser(
        "replay-live", help="replay a capture of a live vLLM server (schedspec.live) on the reference, step by step"
    )
    p.add_argument("capture", metavar="CAPTURE", help="the capture's first part (PATH; PATH.1, ... are read too)")
    p.add_argument(
        "--session", metavar="ID", help="the session to replay (its id or a unique prefix; default: the first)"
    )
    p.add_argument("--level", default="blocks", choices=list(LEVELS), help="what must agree (default: blocks)")
    p.add_argument("--out", metavar="DIR", help="write certificate.json/.md, junit.xml, workload.json here")
    p.add_argument("--force", action="store_true", help="replace the outputs of an earlier run in --out")
    p.add_argument("--plot", action="store_true", help="draw both runs' timelines in --out as timeline.png")
    p.add_argument("--window", type=int, default=WINDOW, help="steps shown before the divergence")
    p.set_defaults(func=cmd_replay_live)
