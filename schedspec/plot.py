"""The timeline picture: scheduled tokens per step, split by request, against the budget.

Decode tokens are summed into one grey segment per step (hundreds of
1-token segments would be noise); each prefill chunk is its own segment,
coloured by request, so a long prompt's chunks line up across steps.
Preemptions are marked above their step and named. Several traces (two
engines on one workload) are drawn as panels sharing the step axis.
"""

from __future__ import annotations

import io
from collections.abc import Sequence

from .spec.jsonio import write_bytes_atomic
from .spec.trace import Trace
from .spec.workload import Workload
from .steps import StepView, views


def plot_timelines(
    traces: Sequence[Trace], path: str, titles: Sequence[str] | None = None, mark_step: int | None = None
) -> None:
    """`mark_step` draws a vertical line through every panel there: where two engines diverged."""
    panels = [(t.workload, title, views(t)) for t, title in zip(traces, titles or [t.engine for t in traces])]
    plot_panels(panels, path, mark_step)


def plot_panels(
    panels: Sequence[tuple[Workload, str, Sequence[StepView]]], path: str, mark_step: int | None = None
) -> None:
    """The same from step views: a streamed run keeps its views, not its records."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(panels), 1, figsize=(12, 3.6 * len(panels)), sharex=True, squeeze=False)
    cmap = plt.get_cmap("tab20")
    colour: dict[str, object] = {}
    for ax, (workload, title, step_views) in zip(axes[:, 0], panels):
        budget = workload.config.token_budget
        for v in step_views:
            ax.bar(v.step, v.decode_tokens, color="0.6", width=0.85, label="decodes" if v.step == 0 else None)
            bottom = v.decode_tokens
            for rid, n in v.prefill_chunks:
                c = colour.setdefault(rid, cmap(len(colour) % 20))
                ax.bar(v.step, n, bottom=bottom, color=c, width=0.85, edgecolor="black", linewidth=0.3)
                if n >= budget * 0.08:
                    ax.text(v.step, bottom + n / 2, f"{rid}\n{n}", ha="center", va="center", fontsize=6)
                bottom += n
            if v.preempted:
                ax.plot(v.step, budget * 1.04, marker="v", color="red")
                ax.text(v.step, budget * 1.08, ",".join(v.preempted), color="red", ha="center", fontsize=7, rotation=60)
        ax.axhline(budget, color="black", linestyle="--", linewidth=0.8, label=f"token budget {budget}")
        if mark_step is not None:
            ax.axvline(mark_step, color="red", linestyle=":", linewidth=1.2, label=f"diverges at step {mark_step}")
        ax.set_ylim(0, budget * 1.25)
        ax.set_ylabel("scheduled tokens")
        ax.set_title(f"{workload.name or 'workload'}: {title}", fontsize=10)
        ax.legend(loc="upper right", fontsize=7)
    axes[-1, 0].set_xlabel("step (red: preemption)")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    write_bytes_atomic(path, buf.getvalue())
