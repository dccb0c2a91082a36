"""`schedspec certify`: a campaign of generated workloads, and the certificate it earns.

The campaign is a pure function of (families, workloads, seed): workload i
belongs to family i mod F, so any shard of it (`--shard i/n` takes every
n-th workload) can run on another machine and the union is the same
campaign. Workers (`--jobs`) each hold their own engines.

The certificate (JSON and Markdown) records what was checked and how much:
the engines and versions, the levels, workloads and steps per family, the
behaviours the steps covered, determinism checks, and any counterexamples.
It passes only if every workload matched and the engine was deterministic.
JUnit XML, one test case per workload, lets CI show the result natively.

With `allow_divergence` (a vLLM contributor who changed the scheduler on
purpose) departures from the oracle are listed, not failed: the certificate
then passes if the engine broke no invariant and was deterministic. The
Markdown shows the first counterexamples as short step tables
(`explain.py`), because a file name alone tells a reader nothing.
"""

from __future__ import annotations

import datetime as dt
import multiprocessing
import os
import time
from collections import Counter
from typing import Any, Callable, Iterable
from xml.etree import ElementTree as ET

from ..spec.errors import SpecError
from ..spec.jsonio import write_bytes_atomic, write_json_atomic
from ..spec.invariants import INVARIANTS
from .campaign import Task, WorkloadResult, run_task
from .compare import LEVELS
from .coverage import BEHAVIOURS
from .engines.vllm_source import vllm_source_info
from .explain import markdown_table
from .families import FAMILIES
from .registry import engine_factory, engine_version, vllm_source_of

DETERMINISM_EVERY = 10
TABLES_SHOWN = 3  # counterexamples drawn as step tables in the Markdown; the rest are listed


def parse_shard(text: str) -> tuple[int, int]:
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise SpecError("--shard", text, "must look like i/n, e.g. 0/4") from None
    if not (n >= 1 and 0 <= i < n):
        raise SpecError("--shard", text, "needs 0 <= i < n")
    return i, n


def plan(engine: str, against: str, level: str, families: list[str], workloads: int, seed: int,
         shard: tuple[int, int], out_dir: str, shrink_budget_s: float = 60.0, step_timeout_s: float = 30.0) -> list[Task]:
    for f in families:
        if f not in FAMILIES:
            raise SpecError("--family", f, f"must be one of {', '.join(FAMILIES)}")
    if level not in LEVELS:
        raise SpecError("--level", level, f"must be one of {', '.join(LEVELS)}")
    if workloads < 1:
        raise SpecError("--workloads", workloads, "must be >= 1")
    engine_factory(engine), engine_factory(against)  # fail fast on a bad engine name
    i, n = shard
    return [
        Task(families[k % len(families)], k // len(families), seed, engine, against, level, out_dir,
             check_determinism=(k % DETERMINISM_EVERY == 0), shrink_budget_s=shrink_budget_s, step_timeout_s=step_timeout_s)
        for k in range(workloads) if k % n == i
    ]


def run(tasks: list[Task], jobs: int, on_done: Callable[[WorkloadResult], None] = lambda r: None) -> list[WorkloadResult]:
    from . import batched

    if batched.applicable(tasks):  # the torch engine runs a campaign as one batch of instances
        return batched.run(tasks, on_done)
    results: list[WorkloadResult] = []
    if jobs <= 1:
        for t in tasks:
            results.append(run_task(t))
            on_done(results[-1])
        return results
    ctx = multiprocessing.get_context("spawn")  # a fresh interpreter per worker: no inherited engine state
    with ctx.Pool(jobs) as pool:
        for r in pool.imap(run_task, tasks):  # in plan order, so reports are stable across --jobs
            results.append(r)
            on_done(r)
    return results


def certificate(tasks: list[Task], results: list[WorkloadResult], shard: tuple[int, int], workloads: int,
                elapsed_s: float, allow_divergence: bool = False) -> dict[str, Any]:
    t0 = tasks[0]
    per_family: dict[str, dict[str, int]] = {}
    covered: Counter[str] = Counter()
    for r in results:
        c = per_family.setdefault(r.family, {"workloads": 0, "matched": 0, "steps": 0})
        c["workloads"] += 1
        c["matched"] += r.divergence is None
        c["steps"] += r.steps_compared
        covered.update(r.coverage)
    steps = sum(r.steps_compared for r in results)
    nondet = [{"workload": r.name, **r.nondeterministic} for r in results if r.nondeterministic]
    violations = [{"workload": r.name, "violation": v} for r in results for v in r.violations]
    cxs = [{"workload": r.name, "file": r.counterexample_file, "step": r.divergence["step"], "field": r.divergence["field"],
            "shrunk_size": r.shrunk_size, "a": r.divergence["a"], "b": r.divergence["b"],
            "shrunk": r.steps_table} for r in results if r.divergence]
    source = vllm_source_of(t0.engine)
    return {
        "version": 1,
        "engine": t0.engine,
        "engine_version": engine_version(t0.engine),
        "against": t0.against,
        "against_version": engine_version(t0.against),
        "level": t0.level,
        "levels_checked": list(LEVELS[: LEVELS.index(t0.level) + 1]),
        "campaign": {"seed": t0.seed, "workloads": workloads, "shard": f"{shard[0]}/{shard[1]}",
                     "families": sorted({t.family for t in tasks}, key=list(FAMILIES).index)},
        "vllm_source": vllm_source_info(source) if source is not None else None,
        "allow_divergence": allow_divergence,
        "passed": (allow_divergence or not cxs) and not nondet and not violations,
        "departures": cxs if allow_divergence else [],
        "workloads_run": len(results),
        "steps_compared": steps,
        "elapsed_s": round(elapsed_s, 2),
        "steps_per_second": round(steps / elapsed_s, 1) if elapsed_s > 0 else None,
        "per_family": per_family,
        "coverage": {b: covered.get(b, 0) for b in BEHAVIOURS},
        "determinism": {"checked": sum(t.check_determinism for t in tasks), "nondeterministic": nondet},
        "counterexamples": cxs,
        "invariant_violations": violations,
        "invariants_checked": len(INVARIANTS) + 2,  # the catalogue, plus the two trace-level checks
        "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    }


def markdown(cert: dict[str, Any]) -> str:
    verdict = "PASSED" if cert["passed"] else "FAILED"
    lines = [
        f"# schedspec certificate: `{cert['engine']}` against `{cert['against']}`: {verdict}", "",
        f"- engine: {cert['engine_version']}; oracle: {cert['against_version']}",
        f"- levels checked: {', '.join(cert['levels_checked'])}",
        f"- campaign: seed {cert['campaign']['seed']}, {cert['campaign']['workloads']} workloads, shard {cert['campaign']['shard']}",
        f"- {cert['workloads_run']} workloads, {cert['steps_compared']} steps compared in {cert['elapsed_s']} s "
        f"({cert['steps_per_second']} steps/s)", "",
        "| family | workloads | matched | steps |", "|---|---:|---:|---:|",
    ]
    if cert.get("vllm_source"):
        src = cert["vllm_source"]
        state = "not a git checkout" if src["commit"] is None else f"commit {src['commit']}, {'dirty' if src['dirty'] else 'clean'}"
        lines[2:2] = [f"- vLLM source: {src['path']} ({state})"]
    if cert.get("allow_divergence"):
        lines[2:2] = [f"- divergence allowed: {len(cert['departures'])} departures listed; only invariants and determinism fail it"]
    lines += [f"| {f} | {c['workloads']} | {c['matched']} | {c['steps']} |" for f, c in cert["per_family"].items()]
    lines += ["", "| behaviour | count |", "|---|---:|"]
    lines += [f"| {b} | {n} |" for b, n in cert["coverage"].items()]
    det = cert["determinism"]
    lines += ["", f"Determinism: {det['checked']} workloads run twice; {len(det['nondeterministic'])} differed.",
              f"Invariant monitors: {cert['invariants_checked']} invariants checked on every step of the engine's "
              f"traces; {len(cert['invariant_violations'])} violations."]
    if cert["invariant_violations"]:
        lines += ["", "## Invariant violations", ""] + [f"- {v['workload']}: {v['violation']}" for v in cert["invariant_violations"]]
    if cert["counterexamples"]:
        title = "Departures from the oracle (allowed)" if cert.get("allow_divergence") else "Counterexamples"
        lines += ["", f"## {title}", "", "| workload | step | field | shrunk size | file |", "|---|---:|---|---|---|"]
        lines += [f"| {c['workload']} | {c['step']} | `{c['field']}` | {_size(c['shrunk_size'])} | {c['file']} |" for c in cert["counterexamples"]]
        lines += _step_tables(cert)
    return "\n".join(lines) + "\n"


def _size(size: dict[str, int] | None) -> str:
    return "-" if not size else f"{size['requests']} requests, {size['max_steps']} steps"


def _step_tables(cert: dict[str, Any]) -> list[str]:
    """The first few shrunk counterexamples as step tables, each with its replay command and timeline."""
    lines: list[str] = []
    shown = [c for c in cert["counterexamples"] if c.get("shrunk")][:TABLES_SHOWN]
    for c in shown:
        t = c["shrunk"]
        n = c["shrunk_size"]["requests"]
        lines += ["", f"### {c['workload']}: shrunk to {n} request{'s' * (n != 1)}, diverges at step {t['step']} on `{t['field']}`",
                  "", f"a: `{cert['against']}`, b: `{cert['engine']}`. Replay: `schedspec replay {c['file']}`", ""]
        if c.get("timeline"):
            lines += [f"![{c['workload']} timeline]({os.path.basename(c['timeline'])})", ""]
        lines += markdown_table(t)
    if len(cert["counterexamples"]) > len(shown):
        lines += ["", f"({len(cert['counterexamples']) - len(shown)} more counterexamples: replay their files.)"]
    return lines


def junit(cert: dict[str, Any], results: Iterable[WorkloadResult]) -> bytes:
    results = list(results)
    allowed = cert.get("allow_divergence", False)  # a listed departure is not a failed test case
    suite = ET.Element("testsuite", name=f"schedspec-certify-{cert['engine']}", tests=str(len(results)),
                       failures=str(sum(1 for r in results if (r.divergence and not allowed) or r.nondeterministic or r.violations)),
                       time=str(cert["elapsed_s"]))
    for r in results:
        case = ET.SubElement(suite, "testcase", classname=f"certify.{r.family}", name=r.name, time=f"{r.seconds:.3f}")
        if r.divergence and allowed:
            ET.SubElement(case, "system-out").text = \
                f"departs at step {r.divergence['step']} on {r.divergence['field']}: {r.counterexample_file}"
        if r.divergence and not allowed:
            d = r.divergence
            ET.SubElement(case, "failure", message=f"step {d['step']}: {d['field']}: {d['a']!r} != {d['b']!r}").text = \
                f"counterexample: {r.counterexample_file}"
        elif r.nondeterministic:
            ET.SubElement(case, "failure", message=f"nondeterministic at step {r.nondeterministic['step']}")
        elif r.violations:
            ET.SubElement(case, "failure", message=r.violations[0]).text = "\n".join(r.violations)
    return ET.tostring(suite, encoding="utf-8", xml_declaration=True)


def write_outputs(out_dir: str, cert: dict[str, Any], results: list[WorkloadResult]) -> list[str]:
    os.makedirs(out_dir, exist_ok=True)
    paths = [os.path.join(out_dir, n) for n in ("certificate.json", "certificate.md", "junit.xml")]
    write_json_atomic(paths[0], cert)
    write_bytes_atomic(paths[1], markdown(cert).encode())
    write_bytes_atomic(paths[2], junit(cert, results))
    return paths


def certify(engine: str, against: str = "reference", level: str = "blocks", families: list[str] | None = None,
            workloads: int = 100, seed: int = 0, shard: tuple[int, int] = (0, 1), jobs: int = 1,
            out_dir: str = "certificate", on_done: Callable[[WorkloadResult], None] = lambda r: None,
            tasks: list[Task] | None = None, allow_divergence: bool = False) -> tuple[dict[str, Any], list[WorkloadResult]]:
    tasks = tasks or plan(engine, against, level, families or list(FAMILIES), workloads, seed, shard, out_dir)
    os.makedirs(out_dir, exist_ok=True)
    t0 = time.perf_counter()
    results = run(tasks, jobs, on_done)
    cert = certificate(tasks, results, shard, workloads, time.perf_counter() - t0, allow_divergence)
    return cert, results
