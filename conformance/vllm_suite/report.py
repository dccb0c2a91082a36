"""The suite's verdict, one row per test: `report.json`, `report.md` and `junit.xml`.

A row fails when the monitors changed the test's outcome (it passed without
them and not with them), when the wrapper had an error of its own, when a
monitor reported on a session in scope, or when an in-scope session did not
replay step for step. A session outside the spec (declared by the live
mode, with the reason) is listed, never judged. The totals are the README's
headline: tests run, schedulers built, in scope, steps judged, replays that
agree.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from .run import SessionReplay


@dataclass
class Row:
    nodeid: str
    plain: str
    monitored: str
    schedulers: int = 0
    in_scope: int = 0
    out_of_scope: list[str] = field(default_factory=list)
    steps_judged: int = 0
    reports: dict[str, int] = field(default_factory=dict)
    replays: list[dict[str, Any]] = field(default_factory=list)
    wrapper_errors: list[str] = field(default_factory=list)

    @property
    def problems(self) -> list[str]:
        out = []
        if self.plain == "passed" and self.monitored != "passed":
            out.append(f"passes without the monitors, {self.monitored} with them")
        out += [f"wrapper error: {e}" for e in self.wrapper_errors]
        if self.reports:
            out.append("monitor reports in scope: " + ", ".join(f"{k} x{n}" for k, n in sorted(self.reports.items())))
        out += [
            f"replay {r['verdict']}: {r['detail']}" for r in self.replays if r["verdict"] in ("diverges", "refused")
        ]
        return out


def rows(
    plain: list[dict[str, Any]], monitored: list[dict[str, Any]], replays: dict[str, list[SessionReplay]]
) -> list[Row]:
    base = {line["nodeid"]: line["outcome"] for line in plain}
    out = []
    for line in monitored:
        row = Row(line["nodeid"], base.get(line["nodeid"], "not run"), line["outcome"])
        row.wrapper_errors = list(line["wrapper_errors"])
        for s in line["sessions"]:
            row.schedulers += 1
            row.steps_judged += s["steps_judged"]
            if s["out_of_scope"]:
                row.out_of_scope += [f for f in s["out_of_scope"] if f not in row.out_of_scope]
            else:
                row.in_scope += 1
                for k, n in s["reports"].items():
                    row.reports[k] = row.reports.get(k, 0) + n
            for r in replays.get(s["capture"] or "", []):
                if r.session == s["session"]:
                    row.replays.append(asdict(r))
        out.append(row)
    return out


def totals(table: list[Row]) -> dict[str, Any]:
    sessions = [r for row in table for r in row.replays]
    verdicts = Counter(r["verdict"] for r in sessions)
    judged = verdicts["agrees"] + verdicts["diverges"] + verdicts["refused"]
    return {
        "tests": len(table),
        "passed_plain": sum(r.plain == "passed" for r in table),
        "passed_monitored": sum(r.monitored == "passed" for r in table),
        "changed_by_monitors": sum(r.plain == "passed" and r.monitored != "passed" for r in table),
        "schedulers": sum(r.schedulers for r in table),
        "in_scope": sum(r.in_scope for r in table),
        "steps_judged": sum(r.steps_judged for r in table),
        "monitor_reports_in_scope": sum(sum(r.reports.values()) for r in table),
        "wrapper_errors": sum(len(r.wrapper_errors) for r in table),
        "replays": dict(verdicts),
        "replay_agreement": f"{verdicts['agrees']} of {judged}",
        "failing_rows": sum(bool(r.problems) for r in table),
    }


def markdown(release: str, mode: str, table: list[Row], summary: dict[str, Any]) -> str:
    s = summary
    lines = [
        f"# vLLM {release}'s own scheduler tests, watched by the spec (mode {mode})",
        "",
        f"- tests: {s['tests']} ({s['passed_plain']} pass without the monitors, {s['passed_monitored']} with them; "
        f"{s['changed_by_monitors']} changed by them)",
        f"- schedulers built: {s['schedulers']}, in scope: {s['in_scope']}; steps judged: {s['steps_judged']}",
        f"- monitor reports in scope: {s['monitor_reports_in_scope']}; wrapper errors: {s['wrapper_errors']}",
        f"- replays on the reference: {s['replay_agreement']} in-scope sessions agree step for step "
        f"({', '.join(f'{k} {v}' for k, v in sorted(s['replays'].items())) or 'none'})",
        "",
        "| test | plain | monitored | schedulers (in scope) | steps judged | monitor reports | replay | scope | wrapper |",
        "| --- | --- | --- | ---: | ---: | --- | --- | --- | --- |",
    ]
    for r in table:
        replay = Counter(x["verdict"] for x in r.replays)
        first = next((x for x in r.replays if x["verdict"] in ("diverges", "refused")), None)
        cell = ", ".join(f"{k} {v}" for k, v in sorted(replay.items())) + (f": {first['detail']}" if first else "")
        reports = ", ".join(f"`{k}` x{n}" for k, n in sorted(r.reports.items()))
        lines.append(
            f"| `{r.nodeid}` | {r.plain} | {r.monitored} | {r.schedulers} ({r.in_scope}) | {r.steps_judged} | "
            f"{reports} | {cell.replace('|', '/')} | {'; '.join(r.out_of_scope).replace('|', '/')} | "
            f"{'; '.join(r.wrapper_errors).replace('|', '/')} |"
        )
    return "\n".join(lines) + "\n"


def junit(release: str, table: list[Row]) -> bytes:
    suite = ET.Element("testsuite", name=f"vllm-{release}-scheduler-tests", tests=str(len(table)))
    failures = 0
    for r in table:
        case = ET.SubElement(suite, "testcase", classname=r.nodeid.split("::")[0], name=r.nodeid.split("::", 1)[-1])
        if r.problems:
            failures += 1
            ET.SubElement(case, "failure", message=r.problems[0]).text = "\n".join(r.problems)
    suite.set("failures", str(failures))
    return ET.tostring(suite, encoding="utf-8", xml_declaration=True)
