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
import datetime as dt
import os
import time
from collections import Counter
from typing import Any

from rich.console import Console

from ..conformance.campaign.certificate_text import markdown
from ..conformance.campaign.certify import OUTPUT_NAMES, verdict, write_outputs
from ..conformance.campaign.coverage import BEHAVIOURS, coverage
from ..conformance.campaign.coverage_map import cells, summary
from ..conformance.campaign.task import WorkloadResult
from ..conformance.engines.registry import engine_version
from ..conformance.harness.compare import LEVELS
from ..conformance.harness.counterexample import Counterexample
from ..conformance.harness.explain import WINDOW, side_by_side
from ..conformance.live_replay.replay import LiveReplay, replay_live
from ..spec.jsonio import write_json_atomic
from ..spec.trace import Trace
from ..spec.versions import RELEASES
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
        written = write_report(result, args.out, elapsed, args.plot)
        out.record(written)
        say(f"written: {', '.join(written)}")
    return EXIT_PASSED if d is None else EXIT_DIVERGED


def engine_name(result: LiveReplay) -> str:
    return f"live:{result.session.header.data.get('scheduler_class', 'unknown scheduler')}"


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
    text = markdown(cert)  # certify's Markdown; its campaign line becomes the capture's
    text = "\n".join(_capture_lines(cert) if line.startswith("- campaign:") else line for line in text.split("\n"))
    from ..spec.jsonio import write_bytes_atomic

    write_bytes_atomic(paths[1], text.encode())
    return written + paths


def _capture_lines(cert: dict[str, Any]) -> str:
    live = cert["live"]
    lines = [
        f"- capture: {live['capture']} ({len(live['parts'])} parts), session {live['session']}"
        + (f"; other sessions not replayed: {', '.join(live['other_sessions'])}" if live["other_sessions"] else "")
    ]
    lines += [f"- note: {n}" for n in live["notes"]]
    lines += [
        f"- invariant monitors: judged live inside vLLM (`schedspec.live`); off there: {', '.join(live['monitors_off']) or 'none'}"
    ]
    return "\n".join(lines)


def offline_vllm(result: LiveReplay) -> str:
    """The engine `schedspec replay` runs a live counterexample on: the offline vLLM of the capture's release."""
    version = str(result.session.header.data.get("vllm_version", "")).split("+")[0]
    return f"vllm=={version}" if version in RELEASES else "vllm"


def certificate(result: LiveReplay, elapsed: float, cx_file: str | None) -> tuple[dict[str, Any], list[WorkloadResult]]:
    """`certify`'s certificate for one workload: the capture's, judged against the reference."""
    d, w, s = result.divergence, result.workload, result.session
    name = w.name
    r = WorkloadResult(
        name, "live", result.steps_compared, elapsed, coverage(w, result.reference), cells(w, result.reference)
    )
    cxs = []
    if d is not None:
        r.divergence, r.counterexample_file = d.to_json(), cx_file
        table = side_by_side(result.reference, result.captured, d, WINDOW)
        cxs.append(
            {
                "workload": name,
                "file": cx_file,
                "step": d.step,
                "field": d.field,
                "shrunk_size": {"requests": len(w.requests), "max_steps": w.max_steps},
                "a": d.a,
                "b": d.b,
                "crash": d.crash,
                "shrunk": table,
                "shrink_note": "not shrunk: a live capture is replayed as it was",
            }
        )
    outcome = Counter({r.outcome: 1})
    engine = engine_name(result)
    cert = {
        "version": 2,
        "engine": engine,
        "engine_version": f"vllm {s.header.data.get('vllm_version', '?')} (live, pid {s.header.data.get('pid', '?')})",
        "against": "reference",
        "against_version": engine_version("reference"),
        "level": result.level,
        "levels_checked": list(LEVELS[: LEVELS.index(result.level) + 1]),
        "campaign": {"seed": None, "workloads": 1, "shard": "0/1", "families": ["live"]},
        "live": {
            "capture": result.capture.path,
            "parts": result.capture.parts,
            "session": s.id,
            "other_sessions": result.others,
            "started": s.header.data.get("started"),
            "end": None if s.end is None else s.end.data["reason"],
            "hashed_token_ids": bool(s.header.data.get("hashed_token_ids")),
            "out_of_scope": s.header.data.get("out_of_scope", []),
            "monitors_off": s.header.data.get("monitors_off", []),
            "notes": result.notes,
        },
        "vllm_source": None,
        "allow_divergence": False,
        "verdict": verdict(False, d is not None),
        "passed": d is None,
        "outcomes": {k: outcome.get(k, 0) for k in ("matched", "diverged", "error", "skipped")},
        "departures": [],
        "workloads_run": 1,
        "steps_compared": result.steps_compared,
        "elapsed_s": round(elapsed, 2),
        "steps_per_second": round(result.steps_compared / elapsed, 1) if elapsed > 0 else None,
        "per_family": {
            "live": {
                "workloads": 1,
                "matched": int(d is None),
                "diverged": int(d is not None),
                "error": 0,
                "steps": result.steps_compared,
            }
        },
        "coverage": {b: r.coverage.get(b, 0) for b in BEHAVIOURS},
        "coverage_map": summary(r.cells),
        "determinism": {"checked": 0, "nondeterministic": []},
        "counterexamples": cxs,
        "errors": [],
        "skipped": [],
        "invariant_violations": [],
        "known_violations": [],
        "invariants_checked": 0,  # the capture has no state summaries: the monitors run live, inside vLLM
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }
    return cert, [r]


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
