"""Timelines of counterexamples: both engines' whole runs, one panel above the other.

A counterexample file holds the shrunk workload, not the runs, so drawing
it means running both engines again (through the differ, with its timeouts
and crash handling, one engine at a time). `certify` therefore draws only
the first `TIMELINES` counterexamples, and `changelog` one per cluster.
Public: `plot_pair`, `write_timelines`, `divergence_label` (the pytest
plugin, `certify`, `replay` and `changelog` use them).
"""

from __future__ import annotations

import os
from typing import Any

from ..conformance.engines.engine_spec import EngineSpec, parse_engine
from ..conformance.engines.registry import engine_factory
from ..conformance.harness.counterexample import Counterexample
from ..conformance.harness.differ import diff
from ..spec.trace import StepRecord, Trace
from ..spec.workload import Workload

TIMELINES = 5


def whole_run(workload: Workload, engine: EngineSpec) -> list[StepRecord]:
    """An engine's whole run on its own, through the differ's timeouts and crash handling (one engine, not two)."""
    names = (engine.name, engine.name)
    return diff(workload, None, engine_factory(engine), "blocks", keep_records=True, names=names).records_b


def plot_pair(cx: Counterexample, engine_b: EngineSpec, path: str, mark_step: int | None) -> None:
    """Both engines' whole runs as timeline panels, one above the other, the divergence marked with its field."""
    from .timeline import plot_timelines

    w = cx.workload
    if mark_step is not None:  # shrinking cuts max_steps down to the divergence: let both runs go on past it
        w = w.replace(max_steps=max(w.max_steps, mark_step + 30))
    engines = (parse_engine(cx.engine_a, "engine_a"), engine_b)  # the file's name for a; b as the caller runs it
    traces = [Trace(w, tuple(whole_run(w, e)), e.name) for e in engines]
    label = divergence_label(cx.divergence) if mark_step is not None else None
    plot_timelines(traces, path, [f"{cx.engine_a} (a)", f"{engine_b} (b)"], mark_step, label)


def divergence_label(d: dict[str, Any]) -> str:
    """The field that differs and how, short enough for a picture: for per-request values, only the
    requests whose values differ (`output.num_scheduled_tokens: r5 20 (a) vs 21 (b)`)."""
    a: Any = d.get("a")
    b: Any = d.get("b")
    if pairs(a) and pairs(b):
        da, db = {str(k): v for k, v in a}, {str(k): v for k, v in b}
        keys = [k for k in dict.fromkeys([*da, *db]) if da.get(k) != db.get(k)]
        what = "; ".join(f"{k} {da.get(k, '-')} (a) vs {db.get(k, '-')} (b)" for k in keys[:3])
        what += f"; +{len(keys) - 3} more" if len(keys) > 3 else ""
    else:
        what = f"{a} (a) vs {b} (b)"
    what = what if len(what) <= 70 else what[:67] + "..."
    return f"{d.get('field')}: {what}"


def pairs(v: Any) -> bool:
    """Per-request values as the differ reports them: a list of (request id, value) pairs."""
    return isinstance(v, list) and all(isinstance(x, list | tuple) and len(x) == 2 for x in v)


def write_timelines(cert: dict[str, Any], limit: int = TIMELINES) -> None:
    """A PNG beside each of the first `limit` counterexample files; its path goes into the certificate.

    An engine that crashed or hung has no timeline worth re-running it for.
    A picture that cannot be drawn is noted, never allowed to cost the certificate.
    """
    drawable = [
        c
        for c in cert["counterexamples"]
        if c.get("file") and c.get("shrunk") and not c["shrunk"]["field"].startswith(("engine", "malformed"))
    ]
    for c in drawable[:limit]:
        png = os.path.splitext(c["file"])[0] + ".png"
        try:
            engine = parse_engine(cert["engine"])
            plot_pair(Counterexample.load(c["file"]), engine, png, c["shrunk"]["step"])
            c["timeline"] = png
        except Exception as e:  # noqa: BLE001
            c["timeline_error"] = f"{type(e).__name__}: {e}"
