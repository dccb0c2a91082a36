"""The certificate as people and CI read it: Markdown with step tables, and JUnit XML.

The Markdown leads with the verdict and the three outcomes, the behaviour
counters and the coverage map (the cells never reached named), then gives each
error with its cause and a fix (an error is the engine failing as a program,
so the reader needs to know what to do, not a step table), and the first few
shrunk counterexamples as step tables (`explain.py`), because a file name
alone tells a reader nothing. In JUnit an error is an `<error>`, a
divergence a `<failure>`, a workload never reached `<skipped>`: CI shows
the three apart, as the certificate does.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any
from xml.etree import ElementTree as ET

from ..harness.explain import markdown_table
from .cell_coverage import markdown_lines as coverage_map_lines
from .task import WorkloadResult

TABLES_SHOWN = 3  # counterexamples drawn as step tables in the Markdown; the rest are listed


def _time_line(t: dict[str, Any] | None) -> str:
    """Where the workloads' time went, in percent (`certify.time_shares`)."""
    if not t:
        return "- time: not recorded"
    parts = ", ".join(f"{part} {100 * share:.0f}%" for part, share in t["shares"].items())
    return f"- time, summed over workloads ({t['seconds']} s): {parts}"


def markdown(cert: dict[str, Any]) -> str:
    verdict = {"passed": "PASSED", "failed": "FAILED", "error": "ERROR (incomplete)"}[cert["verdict"]]
    lines = [
        f"# schedspec certificate: `{cert['engine']}` against `{cert['against']}`: {verdict}",
        "",
        f"- engine: {cert['engine_version']}; oracle: {cert['against_version']}",
        f"- levels checked: {', '.join(cert['levels_checked'])}",
        f"- campaign: seed {cert['campaign']['seed']}, {cert['campaign']['workloads']} workloads, shard {cert['campaign']['shard']}"
        + (" (empty: this shard holds no workload of the campaign)" if cert["campaign"].get("empty_shard") else ""),
        *(
            f"- not in this campaign: family `{f}`, outside the engine's declared scope ({why})"
            for f, why in cert["campaign"].get("families_out_of_scope", {}).items()
        ),
        f"- {cert['workloads_run']} workloads, {cert['steps_compared']} steps compared in {cert['elapsed_s']} s "
        f"({cert['steps_per_second']} steps/s)",
        _time_line(cert.get("time_shares")),
        "- outcomes: " + ", ".join(f"{n} {k}" for k, n in cert["outcomes"].items()),
        "",
        "| family | workloads | matched | diverged | nondeterministic | error | steps |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    if cert.get("vllm_source"):
        src = cert["vllm_source"]
        state = (
            "not a git checkout"
            if src["commit"] is None
            else f"commit {src['commit']}, {'dirty' if src['dirty'] else 'clean'}"
        )
        lines[2:2] = [f"- vLLM source: {src['path']} ({state})"]
    if cert.get("allow_divergence"):
        lines[2:2] = [
            f"- divergence allowed: {len(cert['departures'])} departures of values listed; crashes, "
            "broken invariants, nondeterminism and engine errors still fail it"
        ]
    lines += [
        f"| {f} | {c['workloads']} | {c['matched']} | {c['diverged']} | {c.get('nondeterministic', 0)} | {c['error']} "
        f"| {c['steps']} |"
        for f, c in cert["per_family"].items()
    ]
    lines += ["", "| behaviour | count |", "|---|---:|"]
    # A behaviour no step showed is a gap in the campaign, not a pass: say so where the count is read.
    lines += [f"| {b} | {n if n else '0: not exercised'} |" for b, n in cert["coverage"].items()]
    unexercised = [b for b, n in cert["coverage"].items() if not n]
    if unexercised:
        lines += ["", f"Not exercised by this campaign: {', '.join(unexercised)}. Nothing was checked of these."]
    det = cert["determinism"]
    lines += [
        "",
        f"Determinism: {det['checked']} workloads run twice; {len(det['nondeterministic'])} differed.",
        f"Invariant monitors: {cert['invariants_checked']} invariants checked on every step of the engine's "
        f"traces; {len(cert['invariant_violations'])} violations.",
    ]
    if cert.get("coverage_map"):
        lines += [""] + coverage_map_lines(cert["coverage_map"])
    if cert["errors"] or cert["skipped"]:
        lines += [
            "",
            "## Errors: workloads that could not be judged",
            "",
            "Not divergences: the engine failed as a program. Nothing here was shrunk.",
            "",
        ]
        lines += [
            f"- {e['workload']}: engine `{e['engine']}` ({e['kind']}, "
            f"{'at start' if e['step'] is None else 'step ' + str(e['step'])}): {e['cause']}. Fix: {e['fix']}"
            for e in cert["errors"]
        ]
        if cert["skipped"]:
            lines += [f"- {len(cert['skipped'])} workloads skipped: {cert['skipped'][0]['why']}"]
    if det["nondeterministic"]:
        lines += ["", "## Nondeterminism: the same workload, run twice, did not give the same result", ""]
        lines += [
            f"- {n['workload']}: first run {_run(n['first'])}; second run {_run(n['second'])}"
            for n in det["nondeterministic"]
        ]
    if cert["invariant_violations"]:
        lines += ["", "## Invariant violations", ""] + [
            f"- {v['workload']}: {v['violation']}" for v in cert["invariant_violations"]
        ]
    if cert.get("known_violations"):
        lines += ["", "## Known violations of this release (fixed in a later vLLM; not failures)", ""] + [
            f"- {v['workload']}: {v['violation']}" for v in cert["known_violations"]
        ]
    if cert["counterexamples"]:
        title = "Departures from the oracle (allowed)" if cert.get("allow_divergence") else "Counterexamples"
        lines += ["", f"## {title}", "", "| workload | step | field | shrunk size | file |", "|---|---:|---|---|---|"]
        lines += [
            f"| {c['workload']} | {c['step']} | `{c['field']}`{' (crash: never allowed)' * c['crash']} | "
            f"{_size(c['shrunk_size'])}{'; ' + c['shrink_note'] if c.get('shrink_note') else ''} | {c['file']} |"
            for c in cert["counterexamples"]
        ]
        lines += _step_tables(cert)
    return "\n".join(lines) + "\n"


def _run(outcome: Any) -> str:
    """One run of a workload, as the nondeterminism report shows it."""
    if not isinstance(outcome, dict):
        return str(outcome)
    if "kind" in outcome:
        return f"engine error ({outcome['kind']})"
    return f"diverged at step {outcome['step']} on {outcome['field']} ({outcome['a']!r} vs {outcome['b']!r})"


def _size(size: dict[str, int] | None) -> str:
    return "-" if not size else f"{size['requests']} requests, {size['max_steps']} steps"


def _step_tables(cert: dict[str, Any]) -> list[str]:
    """The first few shrunk counterexamples as step tables, each with its replay command and timeline."""
    lines: list[str] = []
    shown = [c for c in cert["counterexamples"] if c.get("shrunk")][:TABLES_SHOWN]
    for c in shown:
        t = c["shrunk"]
        n = c["shrunk_size"]["requests"]
        lines += [
            "",
            f"### {c['workload']}: shrunk to {n} request{'s' * (n != 1)}, diverges at step {t['step']} on `{t['field']}`",
            "",
            f"a: `{cert['against']}`, b: `{cert['engine']}`. Replay: `schedspec replay {c['file']}`",
            "",
        ]
        if c.get("timeline"):
            lines += [f"![{c['workload']} timeline]({os.path.basename(c['timeline'])})", ""]
        lines += markdown_table(t)
    if len(cert["counterexamples"]) > len(shown):
        lines += ["", f"({len(cert['counterexamples']) - len(shown)} more counterexamples: replay their files.)"]
    return lines


def junit(cert: dict[str, Any], results: Iterable[WorkloadResult]) -> bytes:
    results = list(results)
    allowed = cert.get("allow_divergence", False)  # a listed departure is not a failed test case

    def fails(r: WorkloadResult) -> bool:
        return bool((r.divergence and (not allowed or r.crash)) or r.nondeterministic or r.violations)

    suite = ET.Element(
        "testsuite",
        name=f"schedspec-certify-{cert['engine']}",
        tests=str(len(results)),
        failures=str(sum(1 for r in results if fails(r) and not r.error)),
        errors=str(sum(1 for r in results if r.error)),
        skipped=str(sum(1 for r in results if r.skipped)),
        time=str(cert["elapsed_s"]),
    )
    for r in results:
        case = ET.SubElement(suite, "testcase", classname=f"certify.{r.family}", name=r.name, time=f"{r.seconds:.3f}")
        if r.error:
            e = r.error
            ET.SubElement(
                case, "error", message=f"engine {e['engine']} {e['kind']}: {e['cause']}"
            ).text = f"fix: {e['fix']}"
            continue
        if r.skipped:
            ET.SubElement(case, "skipped", message=r.skipped)
            continue
        if r.divergence and allowed and not r.crash:
            ET.SubElement(
                case, "system-out"
            ).text = f"departs at step {r.divergence['step']} on {r.divergence['field']}: {r.counterexample_file}"
        if r.divergence and (not allowed or r.crash):
            d = r.divergence
            ET.SubElement(
                case, "failure", message=f"step {d['step']}: {d['field']}: {d['a']!r} != {d['b']!r}"
            ).text = f"counterexample: {r.counterexample_file}"
        elif r.nondeterministic:
            ET.SubElement(
                case, "failure", message="nondeterministic: two runs of the same workload differ"
            ).text = f"first run: {_run(r.nondeterministic['first'])}\nsecond run: {_run(r.nondeterministic['second'])}"
        elif r.violations:
            ET.SubElement(case, "failure", message=r.violations[0]).text = "\n".join(r.violations)
    return ET.tostring(suite, encoding="utf-8", xml_declaration=True)
