"""`schedspec changelog A B`: what the scheduler's behaviour changed between two vLLM releases, and why.

Runs release A against release B in lock-step on a campaign (two real
vLLMs, built on first use), then explains every divergence with the spec's
variant rules and clusters them by root cause (`conformance/changelog/clusters.py`).
`--out` gets `changelog.md` (one paragraph per cluster), `changelog.json`,
and the campaign's counterexamples, each replayable with `schedspec replay`.

`--engine-b vllm-source:PATH` puts a vLLM source tree in B's place: what
does my branch change, relative to the release A it branched from? The
tree runs on the default release's venv and is judged as the release its
version file names, or `--vllm-version`.

Exit status: 0 every difference found is explained by a variant rule (or
none was found); 1 some difference is "not modelled", one the spec does not
model yet (for a tree: a change the branch makes); 2 bad input; 3 an engine
failed as a program on some workload.
"""

from __future__ import annotations

import argparse
import os
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any

from rich.console import Console

from ..conformance.harness.compare import LEVELS
from ..conformance.workloads.families import FAMILIES
from ..outdir import OutDir
from ..spec.errors import SpecError
from ..spec.jsonio import write_bytes_atomic, write_json_atomic
from .argparsing import Subcommands

if TYPE_CHECKING:
    from ..conformance.engines.engine_spec import EngineSpec

OUTPUTS = ("changelog.md", "changelog.json")
PATTERNS = ("counterexample-*.json", "counterexample-*.png")


def cmd_changelog(args: argparse.Namespace, console: Console) -> int:
    from ..conformance.campaign.certify import Options, certify
    from ..conformance.changelog.clusters import (
        check_sides,
        cluster,
        engine_side,
        release_side,
        side_factories,
    )
    from ..conformance.changelog.hunk_reach import measuring, source_reach
    from ..conformance.changelog.report import Campaign, changelog
    from ..conformance.harness.counterexample import Counterexample

    side_a = release_side(args.a, "A")
    if args.engine_b is not None:
        if args.b is not None:
            raise SpecError("B", args.b, "give either B or --engine-b, not both")
        side_b = engine_side(args.engine_b, args.vllm_version)
    elif args.b is None:
        raise SpecError("B", "", "missing: give the newer release, or --engine-b vllm-source:PATH")
    else:
        if args.vllm_version is not None:
            raise SpecError("--vllm-version", args.vllm_version, "only applies with --engine-b vllm-source:PATH")
        side_b = release_side(args.b, "B")
    check_sides(side_a, side_b)
    for f in args.family or ():
        if f not in FAMILIES:
            raise SpecError("--family", f, f"must be one of {', '.join(FAMILIES)}")
    if args.workloads < 1:
        raise SpecError("--workloads", args.workloads, "must be >= 1")
    options = Options(jobs=args.jobs, shrink_budget=args.shrink_budget, max_counterexamples=args.max_counterexamples)
    options.validate()  # before the folder is made: bad input leaves nothing behind
    out = OutDir(args.out, args.force, "--out", "changelog")
    out.prepare(OUTPUTS, PATTERNS)
    with measuring(side_a, side_b) if args.hunks else nullcontext() as measured:
        cert, results = certify(
            side_b.engine,
            side_a.engine,
            args.level,
            args.family or None,
            args.workloads,
            args.seed,
            options=options,
            out_dir=out.dir,
            allow_divergence=True,
        )
    reaches = source_reach(side_a, side_b, measured) if measured is not None else None
    diverged = [r for r in results if r.divergence and r.counterexample_file]
    factories = side_factories(side_a, side_b)
    try:  # the timelines run on the same shared drivers as the clustering: closed after both, not between
        cxs = [Counterexample.load(r.counterexample_file) for r in diverged]  # type: ignore[arg-type]
        clusters = cluster(cxs, side_a, side_b, args.level, factories)
        timelines = _timelines(clusters, out.dir, side_b.engine)
    finally:
        for f in factories.values():
            getattr(f, "close_all", lambda: None)()
    files = {r.name: os.path.basename(r.counterexample_file or "") for r in diverged}
    campaign = Campaign(args.level, args.workloads, args.seed, len(diverged), cert["errors"])
    report, markdown = changelog(side_a, side_b, campaign, clusters, files, timelines, reaches, args.hunks)
    paths = [out.file(n) for n in OUTPUTS]
    write_bytes_atomic(paths[0], markdown.encode())
    write_json_atomic(paths[1], report)
    out.record(paths)
    paths = [out.final(p) for p in paths]
    not_modelled = [c for c in clusters if not c.explanation.explained]
    n = len(clusters)
    summary = f"{len(diverged)} of {args.workloads} workloads differ, in {n} cluster{'s' * (n != 1)}"
    if report["source_hunks"] is not None:
        h = report["source_hunks"]
        summary += f" ({h['reached']} of {h['hunks']} changed scheduler source hunks reached)"
    if cert["errors"]:
        console.print(f"{summary}; {len(cert['errors'])} engine errors: see {paths[1]}", style="red", markup=False)
        return 3
    if not_modelled:
        console.print(f"{summary}; {len(not_modelled)} not modelled: see {paths[0]}", style="red", markup=False)
        return 1
    explained = ", each explained by a variant rule" if clusters else ""
    console.print(f"{summary}{explained}: see {paths[0]}", style="green", markup=False)
    return 0


def _timelines(clusters: list[Any], out_dir: str, engine_b: EngineSpec) -> dict[int, str]:
    """A PNG of both releases' runs beside each cluster's counterexample; one that cannot be drawn is skipped."""
    from ..render.counterexample_timelines import plot_pair

    drawn: dict[int, str] = {}
    for c in clusters:
        if c.best is None or str(c.best.divergence.get("field", "")).startswith(("engine", "malformed")):
            continue
        name = f"counterexample-{c.best.workload.name}.png"
        try:
            plot_pair(c.best, engine_b, os.path.join(out_dir, name), c.best.divergence.get("step"))
            drawn[id(c)] = name
        except Exception:  # noqa: BLE001 - a picture never costs the changelog
            continue
    return drawn


def add_changelog_parser(sub: Subcommands) -> None:
    p = sub.add_parser("changelog", help="what the scheduler's behaviour changed between two vLLM releases, and why")
    p.add_argument("a", metavar="A", help="the older release, e.g. 0.30.0")
    p.add_argument("b", metavar="B", nargs="?", help="the newer release, e.g. 0.33.0 (or give --engine-b)")
    p.add_argument(
        "--engine-b",
        metavar="ENGINE",
        help="B as a vLLM source tree, vllm-source:PATH (your branch against release A), or vllm==V",
    )
    p.add_argument(
        "--vllm-version",
        metavar="V",
        help="the release the tree in --engine-b is judged as (default: the tree's own version file)",
    )
    p.add_argument("--workloads", type=int, default=100, help="generated workloads (default 100)")
    p.add_argument("--family", action="append", help="a workload family (repeatable; default: all)")
    p.add_argument("--seed", type=int, default=0, help="campaign seed (default 0)")
    p.add_argument("--level", default="blocks", choices=LEVELS, help="what is compared (default blocks)")
    p.add_argument("--jobs", type=int, default=1, help="worker processes (default 1)")
    p.add_argument("--shrink-budget", type=int, default=400, help="candidates tried per shrink (default 400)")
    p.add_argument("--max-counterexamples", type=int, default=10, help="divergences shrunk (default 10)")
    p.add_argument("--out", default="changelog", metavar="DIR", help="folder for the changelog (default changelog)")
    p.add_argument("--force", action="store_true", help="replace an earlier run's outputs in --out")
    p.add_argument(
        "--no-hunks",
        dest="hunks",
        action="store_false",
        help="do not measure which changed scheduler source hunks the workloads reached (faster: the drivers "
        "run about 2.5x slower while measuring)",
    )
    p.set_defaults(func=cmd_changelog)
