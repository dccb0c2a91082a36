"""A replayed live capture as a certificate, in `certify`'s formats, for one workload: the rebuilt one.

The capture's certificate keeps `certify`'s fields, so one reader (CI, the
JUnit view, `schedspec replay`) serves both, and adds a `live` section: the
capture and its parts, the session, what was out of scope or off in the
live monitors, and the notes of the rebuild. Its Markdown is `certify`'s,
with the campaign line replaced by the capture's.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from typing import Any

from ...spec.versions import RELEASES
from ..campaign.behaviour_coverage import BEHAVIOURS, behaviours_seen
from ..campaign.cell_coverage import cells, summary
from ..campaign.certificate_text import markdown
from ..campaign.certify import verdict
from ..campaign.task import WorkloadResult
from ..engines.engine_spec import parse_engine
from ..engines.registry import engine_version
from ..harness.compare import LEVELS
from ..harness.explain import WINDOW, side_by_side
from .replay import LiveReplay


def engine_name(result: LiveReplay) -> str:
    return f"live:{result.session.header.data.get('scheduler_class', 'unknown scheduler')}"


def offline_vllm(result: LiveReplay) -> str:
    """The engine `schedspec replay` runs a live counterexample on: the offline vLLM of the capture's release."""
    version = str(result.session.header.data.get("vllm_version", "")).split("+")[0]
    return f"vllm=={version}" if version in RELEASES else "vllm"


def certificate(result: LiveReplay, elapsed: float, cx_file: str | None) -> tuple[dict[str, Any], list[WorkloadResult]]:
    """`certify`'s certificate for one workload: the capture's, judged against the reference."""
    d, w, s = result.divergence, result.workload, result.session
    name = w.name
    r = WorkloadResult(
        name, "live", result.steps_compared, elapsed, behaviours_seen(w, result.reference), cells(w, result.reference)
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
        "against_version": engine_version(parse_engine("reference")),
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
        "coverage": {b: r.behaviours.get(b, 0) for b in BEHAVIOURS},
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


def capture_lines(cert: dict[str, Any]) -> str:
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


def certificate_markdown(cert: dict[str, Any]) -> str:
    """`certify`'s Markdown, its campaign line replaced by the capture's."""
    text = markdown(cert)
    return "\n".join(capture_lines(cert) if line.startswith("- campaign:") else line for line in text.split("\n"))
