"""The changelog as a person and a program read it: `changelog.md` and `changelog.json`.

One paragraph per cluster of divergences (`clusters.py`: the field that
parts first and the variant rule that explains it), the invariants release A
breaks and B keeps (`spec/versions.py:KNOWN_VIOLATIONS`), and the changelog's
own limit: the scheduler source hunks changed from A to B that no workload
of the campaign ran (`source_hunks.py`). The JSON holds the same facts for a
program; both are built here from one pass, so they cannot disagree.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...spec.versions import KNOWN_VIOLATIONS, release_key
from .clusters import Cluster, Side, variants_between
from .source_hunks import unreached_json, unreached_markdown


@dataclass(frozen=True)
class Campaign:
    """What the campaign behind a changelog ran and found, before clustering."""

    level: str
    workloads: int
    seed: int
    diverged: int
    errors: list[dict[str, Any]]


def changelog(
    side_a: Side,
    side_b: Side,
    campaign: Campaign,
    clusters: list[Cluster],
    files: dict[str, str],
    timelines: dict[int, str],
    reaches: Any,
    hunks_asked: bool,
) -> tuple[dict[str, Any], str]:
    """(`changelog.json`, `changelog.md`). `files`: each diverged workload's counterexample file name;
    `timelines`: each cluster's picture, by `id(cluster)`; `reaches`: the hunks reached, None if not measured."""
    a, b = side_a.label, side_b.label
    report: dict[str, Any] = {
        "a": a,
        "b": b,
        "engine_a": side_a.engine.name,
        "engine_b": side_b.engine.name,
        "release_b": side_b.release,
        "tree_b": None if side_b.is_release else tree_info(side_b),
        "level": campaign.level,
        "workloads": campaign.workloads,
        "seed": campaign.seed,
        "candidates": variants_between(side_a.release, side_b.release),
        "diverged": campaign.diverged,
        "errors": campaign.errors,
        "clusters": [
            {
                "field": c.first_field,
                "cause": c.explanation.key,
                "variants": list(c.explanation.variants),
                "reference_agrees": {"a": c.explanation.ref_agrees_a, "b": c.explanation.ref_agrees_b},
                "workloads": c.members,
                "counterexample": files.get(c.best.workload.name if c.best else "", ""),
                "size": {"requests": c.best_size[0], "steps": c.best_size[1]},
                "timeline": timelines.get(id(c), ""),
            }
            for c in clusters
        ],
    }
    lines = [
        f"# What the scheduler changed from vLLM {a} to {b}",
        "",
        f"{campaign.workloads} generated workloads (seed {campaign.seed}), run on both sides in lock-step at level "
        f"`{campaign.level}`: {campaign.diverged} diverged, {len(campaign.errors)} engine errors. Candidate rules between "
        f"them: {', '.join(f'`{v}`' for v in report['candidates']) or 'none'}.",
        "",
    ]
    if report["tree_b"] is not None:
        t = report["tree_b"]
        state = (
            "not a git checkout"
            if t["commit"] is None
            else f"commit {t['commit'][:12]}" + (", with uncommitted changes in vllm/" if t["dirty"] else "")
        )
        lines += [f"B is the vLLM source tree {t['path']} ({state}), judged as release {side_b.release}.", ""]
    for i, c in enumerate(clusters, 1):
        name = report["clusters"][i - 1]["counterexample"]
        lines += [f"## {i}. `{c.first_field}`: {c.explanation.key}", "", c.paragraph(side_a, side_b, name), ""]
        if report["clusters"][i - 1]["timeline"]:
            lines += [f"![both releases' runs]({report['clusters'][i - 1]['timeline']})", ""]
    if not clusters:
        lines.append("No difference found in these workloads.")
    span = (release_key(side_a.release), release_key(side_b.release))
    fixed = [k for k in KNOWN_VIOLATIONS if span[0] < release_key(k.fixed_in) <= span[1]]
    if fixed:
        lines += ["", f"## Invariants {a} breaks and {b} keeps", ""]
        lines += [f"- `{k.invariant}` (fixed in {k.fixed_in}): {k.why}." for k in fixed]
    report["known_violations_fixed"] = [{"invariant": k.invariant, "fixed_in": k.fixed_in, "why": k.why} for k in fixed]
    lines_md, report["source_hunks"] = unreached(reaches, hunks_asked, a, b)
    lines += lines_md
    return report, "\n".join(lines) + "\n"


def unreached(reaches: Any, asked: bool, a: str, b: str) -> tuple[list[str], dict[str, Any] | None]:
    """The changelog's limit: the scheduler's changed hunks from A to B that no workload of the campaign ran."""
    head = ["", f"## Changed scheduler source from {a} to {b} that no workload reached", ""]
    if reaches is None:
        why = (
            "not measured (--no-hunks)"
            if not asked
            else "not measured: the vLLM venvs lack coverage; rebuild them with conformance/vllm_env/setup_vllm_ref.sh"
        )
        return head + [why.capitalize() + "."], None
    return head + unreached_markdown(reaches), unreached_json(reaches)


def tree_info(side: Side) -> dict[str, Any]:
    """Where side B's source tree is, its commit and whether it is dirty."""
    from ..engines.vllm_source import vllm_source_info

    return vllm_source_info(side.engine.source or "")
