"""The timeline picture: every step of a run, readable from the picture alone.

Each trace is drawn as two stacked axes that share the step axis:

* **tokens per step**: decode tokens and prefill tokens stacked, against the budget line, on a
  log scale. A linear axis up to a 1,024-token budget drew a step of four 1-token decodes
  as an empty column (about 70 of `seed-preemption`'s 76 steps looked empty); on the log scale a
  1-token step and a 1,000-token step are both bars.
* **one lane per request**: what the request did at each step. A wide blue bar is a prefill chunk
  (orange when a resumed request recomputes), labelled with its tokens; a narrow green bar a decode;
  a dotted line a step spent waiting; a thin grey line a step spent running without a grant. The
  events are marks: admitted and resumed (a triangle at the step's left), preempted (a red X),
  finished (a black square at the step's right).

Several traces (two engines on one workload, for a replay) are drawn one above the other on the same
scales, with the same lanes in the same order. The diverging step is a magenta band through every axis,
labelled with the field that differs: magenta, because red already means a preemption.

`draw` returns the figure, so that a test can check its parts (legend entries, where each mark is) rather
than its pixels; `plot_panels` and `plot_timelines` write it as a PNG.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

from ..spec.jsonio import write_bytes_atomic
from ..spec.trace import Trace
from ..spec.workload import Workload
from .step_digest import StepDigest, views

MAX_LANES = 24  # past this many requests, the lanes show the ones with the most events
BAR_FLOOR = 0.5  # where the token bars start: below the log axis' bottom (0.7), since log(0) has no place
CHUNK, RECOMPUTE, DECODE = "tab:blue", "tab:orange", "tab:green"
DIVERGENCE = "magenta"
LEGEND = {  # label: (kind, style) in the order the legend lists them
    "prefill chunk (tokens)": ("bar", CHUNK),
    "recompute after preemption": ("bar", RECOMPUTE),
    "decode": ("bar", DECODE),
    "waiting": ("line", ":"),
    "running, no tokens this step": ("line", "-"),
    "admitted": ("mark", ">", "black"),
    "resumed": ("mark", ">", RECOMPUTE),
    "preempted": ("mark", "X", "red"),
    "finished": ("mark", "s", "black"),
}


def plot_timelines(
    traces: Sequence[Trace],
    path: str,
    titles: Sequence[str] | None = None,
    mark_step: int | None = None,
    mark_label: str | None = None,
) -> None:
    """`mark_step` (with `mark_label`, the field that differs) is where two engines diverged."""
    panels = [(t.workload, title, views(t)) for t, title in zip(traces, titles or [t.engine for t in traces])]
    plot_panels(panels, path, mark_step, mark_label)


def plot_panels(
    panels: Sequence[tuple[Workload, str, Sequence[StepDigest]]],
    path: str,
    mark_step: int | None = None,
    mark_label: str | None = None,
) -> None:
    """The same from step views: a streamed run keeps its views, not its records."""
    import matplotlib.pyplot as plt

    fig = draw(panels, mark_step, mark_label)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    write_bytes_atomic(path, buf.getvalue())


def lanes(panels: Sequence[tuple[Workload, str, Sequence[StepDigest]]]) -> tuple[list[str], int]:
    """The requests drawn, top to bottom in arrival order, and how many were left out: all of them if they
    fit, else the `MAX_LANES` with the most events (chunks, admissions, preemptions), the same in every panel."""
    order = [r.request.request_id for r in panels[0][0].requests]
    if len(order) <= MAX_LANES:
        return order, 0
    events = dict.fromkeys(order, 0)
    for _, _, digests in panels:
        for v in digests:
            for rid in [r for r, _ in v.prefill_chunks] + list(v.new + v.resumed + v.preempted):
                events[rid] += 1
    kept = set(sorted(order, key=lambda r: -events[r])[:MAX_LANES])
    return [r for r in order if r in kept], len(order) - len(kept)


def draw(
    panels: Sequence[tuple[Workload, str, Sequence[StepDigest]]],
    mark_step: int | None = None,
    mark_label: str | None = None,
) -> Any:
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown, left_out = lanes(panels)
    lane_height = 0.32 * len(shown) + 0.8
    ratios = [r for _ in panels for r in (1.6, lane_height)]
    fig, axes = plt.subplots(
        2 * len(panels), 1, figsize=(13, sum(ratios) + 1.2), sharex=True, gridspec_kw={"height_ratios": ratios}
    )
    last = max((v.step for _, _, digests in panels for v in digests), default=0)
    drawn: set[str] = set()  # the legend lists what the picture shows, nothing else
    for i, (workload, title, digests) in enumerate(panels):
        top, bottom = axes[2 * i], axes[2 * i + 1]
        _tokens(top, workload, digests, f"{workload.name or 'workload'}: {title}")
        _lanes(bottom, shown, left_out, digests, drawn, label_chunks=last <= 150)
        if mark_step is not None:
            for ax in (top, bottom):
                ax.axvspan(mark_step - 0.5, mark_step + 0.5, color=DIVERGENCE, alpha=0.18, zorder=0)
            top.annotate(
                f"diverges at step {mark_step}" + (f": {mark_label}" if mark_label else ""),
                (mark_step, 1.0),
                xycoords=("data", "axes fraction"),
                xytext=(4, -12),
                textcoords="offset points",
                color=DIVERGENCE,
                fontsize=9,
                fontweight="bold",
            )
    axes[-1].set_xlim(-0.7, last + 0.7)
    axes[-1].xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))  # steps are whole
    axes[-1].set_xlabel("step")
    fig.legend(handles=_legend(drawn, mark_step is not None), loc="upper center", ncol=5, fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.55 / fig.get_figheight()))
    return fig


def _tokens(ax: Any, workload: Workload, digests: Sequence[StepDigest], title: str) -> None:
    import matplotlib.ticker

    budget = workload.config.token_budget
    steps = [v.step for v in digests]
    decode = [v.decode_tokens for v in digests]
    prefill: list[int] = []
    recompute: list[int] = []  # a resumed request's chunks, told apart as in the lanes
    preempted_once: set[str] = set()
    for v in digests:
        prefill.append(sum(n for r, n in v.prefill_chunks if r not in preempted_once))
        recompute.append(sum(n for r, n in v.prefill_chunks if r in preempted_once))
        preempted_once.update(v.preempted)
    # stacked: each bar's top is the running total, so on the log axis a bar ends at its step's token count
    totals = [0] * len(steps)
    for part, colour in ((decode, DECODE), (prefill, CHUNK), (recompute, RECOMPUTE)):
        tops = [t + n for t, n in zip(totals, part)]
        _bars(ax, steps, [max(t, BAR_FLOOR) for t in totals], tops, colour)
        totals = tops
    ax.axhline(budget, color="black", linestyle="--", linewidth=0.8)
    ax.text(1.0, budget, f" budget {budget}", transform=ax.get_yaxis_transform(), va="center", fontsize=7)
    ax.set_yscale("log")  # a step with no tokens draws nothing, as it should
    ax.set_ylim(0.7, budget * 3)
    ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda t, _: f"{t:g}"))
    ax.set_ylabel("tokens\n(log scale)", fontsize=8)
    ax.set_title(title, fontsize=10, loc="left")


# Where a mark sits in its step's slot: an arrival at the left edge, a preemption in the middle, a finish at the right.
MARK_OFFSET = {"admitted": -0.5, "resumed": -0.5, "preempted": 0.0, "finished": 0.5}
BAR_HEIGHT = {"prefill chunk (tokens)": 0.62, "recompute after preemption": 0.62, "decode": 0.26}


def _bars(ax: Any, steps: Sequence[int], bottoms: Sequence[float], tops: Sequence[float], colour: str) -> None:
    """A step's bar from `bottom` to `top`, for every step with a positive height: one artist for the whole
    run, since one patch per bar made a 561-step picture take 5 s to lay out."""
    from matplotlib.collections import PolyCollection

    boxes = [[(s - 0.4, b), (s - 0.4, t), (s + 0.4, t), (s + 0.4, b)] for s, b, t in zip(steps, bottoms, tops) if t > b]
    ax.add_collection(PolyCollection(boxes, facecolors=colour, edgecolors="none"))


def _lanes(
    ax: Any, shown: list[str], left_out: int, digests: Sequence[StepDigest], drawn: set[str], label_chunks: bool
) -> None:
    """Each lane's parts, gathered over the run and drawn as one artist per kind and request (`gid` "kind:rid"):
    a 12,000-step run draws a few hundred artists, not one per step and request."""
    y = {rid: i for i, rid in enumerate(shown)}
    steps: dict[tuple[str, str], list[int]] = {}  # (kind, request) -> the steps it shows in
    preempted_once: set[str] = set()
    running: set[str] = set()
    for v in digests:
        granted = set(v.decodes) | {r for r, _ in v.prefill_chunks}
        running |= set(v.new) | set(v.resumed)
        parts = [
            ("recompute after preemption" if r in preempted_once else "prefill chunk (tokens)", r)
            for r, _ in v.prefill_chunks
        ]
        parts += [("decode", r) for r in v.decodes]
        parts += [("waiting", r) for r in v.waiting_ids if r not in granted]
        # in the running queue without a grant (a skipped request): neither a bar nor waiting
        idle = running - granted - set(v.waiting_ids) - set(v.preempted)
        parts += [("running, no tokens this step", r) for r in sorted(idle)]
        parts += [
            (what, r) for what, rids in zip(MARK_OFFSET, (v.new, v.resumed, v.preempted, v.finished)) for r in rids
        ]
        for kind, rid in parts:
            if rid in y:
                steps.setdefault((kind, rid), []).append(v.step)
        if label_chunks:
            for rid, n in v.prefill_chunks:
                if rid in y:
                    ax.text(v.step, y[rid], str(n), ha="center", va="center", fontsize=6, color="white")
        preempted_once.update(v.preempted)
        running -= set(v.preempted) | set(v.finished)
    for (kind, rid), at in steps.items():
        drawn.add(kind)
        style, lane, gid = LEGEND[kind], y[rid], f"{kind}:{rid}"
        if style[0] == "bar":
            h = BAR_HEIGHT[kind]
            ax.broken_barh([(s - 0.43, 0.86) for s in at], (lane - h / 2, h), facecolors=style[1], gid=gid)
        elif style[0] == "line":
            runs = _runs(at)
            dotted = kind == "waiting"
            ax.hlines(
                [lane] * len(runs),
                [a - 0.5 for a, _ in runs],
                [b + 0.5 for _, b in runs],
                colors="0.45" if dotted else "0.6",
                linestyles=style[1],
                linewidth=1.2 if dotted else 1.0,
                gid=gid,
            )
        else:
            x = [s + MARK_OFFSET[kind] for s in at]
            ax.plot(x, [lane] * len(x), marker=style[1], color=style[2], markersize=7, ls="none", gid=gid)
    ax.set_yticks(range(len(shown)), shown, fontsize=8)
    ax.set_ylim(len(shown) - 0.5, -0.5)  # the first arrival on top
    ax.set_ylabel("requests" + (f"\n({left_out} more not drawn)" if left_out else ""), fontsize=8)
    ax.grid(axis="x", color="0.92", linewidth=0.6)
    ax.set_axisbelow(True)


def _runs(steps: list[int]) -> list[tuple[int, int]]:
    """Consecutive steps as (first, last) runs: one line segment each."""
    runs: list[tuple[int, int]] = []
    for s in steps:
        if runs and s == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], s)
        else:
            runs.append((s, s))
    return runs


def _legend(drawn: set[str], with_divergence: bool) -> list[Any]:
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles: list[Any] = []
    for label, (kind, *style) in LEGEND.items():
        if label not in drawn:
            continue
        if kind == "bar":
            handles.append(Patch(color=style[0], label=label))
        elif kind == "line":
            handles.append(Line2D([], [], linestyle=style[0], color="0.45", label=label))  # type: ignore[arg-type]
        else:
            handles.append(Line2D([], [], marker=style[0], color=style[1], linestyle="none", label=label))
    if with_divergence:
        handles.append(Patch(color=DIVERGENCE, alpha=0.3, label="diverging step"))
    return handles
