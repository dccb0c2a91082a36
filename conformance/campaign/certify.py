"""`schedspec certify`: a campaign of generated workloads, and the certificate it earns.

The campaign is a pure function of (families, workloads, seed): workload i
belongs to family i mod F, so any shard of it (`--shard i/n` takes every
n-th workload) can run on another machine and the union is the same
campaign. Workers (`--jobs`) each hold their own engines, and a worker that
dies costs its workload, not the run (`workers.py`).

Each workload ends `matched`, `diverged` or `error` (`differ.py`). The
verdict, and the exit status the CLI derives from it:

* 0, passed: every workload matched (or, under `--allow-divergence`,
  departed only in values), the monitors found nothing, and the engine
  was deterministic;
* 1, failed: a divergence, a crash of the engine, a broken invariant, or
  nondeterminism. `--allow-divergence` forgives only departures of values:
  a crash is never a "departure";
* 3, error: some workload could not be judged (the engine could not start,
  died, hung or answered garbage), or was skipped after `--max-errors`.
  An incomplete certificate is never a pass, whatever the rest says.

Divergences are shrunk in a second phase, the first `--max-counterexamples`
of them in plan order; the rest are listed with their unshrunk workloads.
The certificate (JSON and Markdown, `certificate_text.py`) records what was
checked and how much, with the coverage map's cells the campaign reached and
the possible ones it never did (`cell_coverage.py`); JUnit XML gives CI one
test case per workload.
"""

from __future__ import annotations

import datetime as dt
import math
import os
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

from ...spec.engine import DECLARED_FEATURES, FEATURE_METHODS
from ...spec.errors import SpecError
from ...spec.invariants import MONITORED
from ...spec.jsonio import write_bytes_atomic, write_json_atomic
from ...spec.versions import DEFAULT_RELEASE
from ..engines.declared_scope import missing_features
from ..engines.engine_spec import REFERENCE, EngineSpec
from ..engines.registry import engine_factory, engine_version
from ..engines.vllm_source import vllm_source_info
from ..harness.compare import LEVELS
from ..harness.workers import run_all
from ..workloads.families import FAMILIES, family_needs
from .behaviour_coverage import BEHAVIOURS
from .cell_coverage import summary as coverage_map_summary
from .certificate_text import junit, markdown
from .task import PARTS, Task, WorkloadResult, run_task, shrink_result, skipped

DETERMINISM_EVERY = 10  # our engines and vLLM: every 10th workload runs twice
DETERMINISM_EVERY_THIRD_PARTY = 3  # an engine we know nothing about is sampled more densely
EXIT_PASSED, EXIT_FAILED, EXIT_ERROR = 0, 1, 3


@dataclass(frozen=True)
class Options:
    """How hard to try, and how long to wait: everything a campaign needs besides what it checks."""

    jobs: int = 1
    step_timeout_s: float = 30.0
    start_timeout_s: float = 300.0
    isolate: bool | None = None
    shrink_budget: int = 400
    max_counterexamples: int = 10
    max_errors: int = 5

    def validate(self) -> None:
        for option, value, floor in (
            ("--jobs", self.jobs, 1),
            ("--shrink-budget", self.shrink_budget, 0),
            ("--max-counterexamples", self.max_counterexamples, 0),
            ("--max-errors", self.max_errors, 1),
        ):
            if value < floor:
                raise SpecError(option, value, f"must be >= {floor}")
        for option, seconds in (("--step-timeout", self.step_timeout_s), ("--start-timeout", self.start_timeout_s)):
            if not (math.isfinite(seconds) and seconds >= 0.01):
                raise SpecError(option, seconds, "must be a number of seconds >= 0.01")


class Shard(NamedTuple):
    """`--shard i/n`: every n-th workload of the campaign, starting at the i-th (0-based)."""

    part: int
    parts: int

    def __str__(self) -> str:
        return f"{self.part}/{self.parts}"


WHOLE = Shard(0, 1)  # every workload: the default


def parse_shard(text: str) -> Shard:
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise SpecError("--shard", text, "must look like i/n, e.g. 0/4") from None
    if not (n >= 1 and 0 <= i < n):
        raise SpecError("--shard", text, "needs 0 <= i < n")
    return Shard(i, n)


OUTCOMES = ("matched", "diverged", "nondeterministic", "error", "skipped")

# A run keeps each workload's task and result (outcome, coverage, counterexample) until its certificate is
# written: about 3 KB each, measured with tracemalloc over 200 workloads of every family.
BYTES_PER_WORKLOAD = 3_000
MAX_WORKLOADS_PER_RUN = 1_000_000


def plan(
    engine: EngineSpec,
    against: EngineSpec,
    level: str,
    families: list[str],
    workloads: int,
    seed: int,
    shard: Shard,
    out_dir: str,
    options: Options = Options(),
    requested: bool = False,
) -> list[Task]:
    """The campaign's tasks. `requested`: the user named `families`; otherwise they are every family, and those
    whose feature an engine declares outside its scope are left out (`declared_scope.py`)."""
    for f in families:
        if f not in FAMILIES:
            raise SpecError("--family", f, f"must be one of {', '.join(FAMILIES)}")
    families = in_scope(engine, against, families, requested, options)
    if level not in LEVELS:
        raise SpecError("--level", level, f"must be one of {', '.join(LEVELS)}")
    if workloads < 1:
        raise SpecError("--workloads", workloads, "must be >= 1")
    i, n = shard
    share = len(range(i, workloads, n))
    if share > MAX_WORKLOADS_PER_RUN:
        gb = share * BYTES_PER_WORKLOAD / 1e9
        raise SpecError(
            "--workloads",
            workloads,
            f"would keep {share:,} workloads' results in memory, about {gb:,.0f} GB; at most "
            f"{MAX_WORKLOADS_PER_RUN:,} per run: split the campaign with --shard i/n and merge the shards",
        )
    options.validate()
    engine_factory(engine, isolate=False), engine_factory(against, isolate=False)  # fail fast
    every = DETERMINISM_EVERY if engine.builtin else DETERMINISM_EVERY_THIRD_PARTY
    return [
        Task(
            families[k % len(families)],
            k // len(families),
            seed,
            engine,
            against,
            level,
            out_dir,
            check_determinism=(k % every == 0),
            shrink_budget=options.shrink_budget,
            step_timeout_s=options.step_timeout_s,
            start_timeout_s=options.start_timeout_s,
            isolate=options.isolate,
        )
        for k in range(i, workloads, n)
    ]


def in_scope(
    engine: EngineSpec, against: EngineSpec, families: list[str], requested: bool, options: Options
) -> list[str]:
    """`families` less those needing a feature an engine declares outside its scope; a requested one is refused."""
    needed = {f: family_needs(f) for f in families if family_needs(f)}
    if not needed:
        return families
    out: set[str] = set()
    for spec in (engine, against):
        missing = missing_features(spec)
        for f, method in needed.items():
            if method in missing and requested:
                how = f"it has no {method}()" if method in FEATURE_METHODS else f"its features do not name {method!r}"
                raise SpecError(
                    "--family",
                    f,
                    f"is outside the declared scope of engine {spec.name!r}: {how} ({missing[method]}; docs/engines.md)",
                )
            if method in missing:
                out.add(f)
    return [f for f in families if f not in out]


def scope_reason(family: str, engine: EngineSpec, against: EngineSpec) -> str:
    method = family_needs(family)
    names = [s.name for s in (engine, against) if method in missing_features(s)]
    if method in FEATURE_METHODS:
        return f"engine {' and '.join(map(repr, names))} has no {method}(): {FEATURE_METHODS[method]}"
    return f"engine {' and '.join(map(repr, names))} does not name {method!r} in its features: {DECLARED_FEATURES.get(method or '', '?')}"


def _lost(task: Task) -> WorkloadResult:
    """A workload whose worker process died under it: the engine ran in the harness's own process."""
    r = WorkloadResult(f"{task.family}-{task.index}", task.family, 0, 0.0)
    r.error = {
        "side": "b",
        "engine": task.engine.name,
        "kind": "died",
        "step": None,
        "cause": "the worker process running this workload died (the engine ran in process: os._exit, a signal, "
        "or out of memory)",
        "fix": "run the engine in its own process (drop --in-process) to see where",
    }
    return r


def run(
    tasks: list[Task],
    options: Options,
    on_done: Callable[[WorkloadResult], None] = lambda r: None,
) -> list[WorkloadResult]:
    """Phase 1 runs every workload; phase 2 shrinks the first `max_counterexamples` divergences."""
    from . import batched

    errors = 0

    def count(r: WorkloadResult) -> None:
        nonlocal errors
        errors += r.error is not None
        on_done(r)

    def too_many() -> bool:
        return errors >= options.max_errors

    why = f"not run: {options.max_errors} workloads had engine errors before it (--max-errors)"
    if batched.applicable(tasks):  # the torch engine runs a campaign as one batch of instances
        results = batched.run(tasks, count)
    else:
        results = run_all(run_task, tasks, options.jobs, _lost, count, too_many, lambda t: skipped(t, why))
    to_shrink = [k for k, r in enumerate(results) if r.divergence][: options.max_counterexamples]
    if options.shrink_budget > 0 and to_shrink:
        jobs = [(tasks[k], results[k]) for k in to_shrink]
        shrunk = run_all(shrink_result, jobs, options.jobs, lambda job: job[1])
        for k, r in zip(to_shrink, shrunk):
            results[k] = r
    for r in results:
        if r.divergence and not r.steps_table and not r.shrink_note:
            r.shrink_note = (
                f"not shrunk: beyond --max-counterexamples {options.max_counterexamples}"
                if options.shrink_budget > 0
                else "not shrunk: --shrink-budget 0"
            )
    return results


def certificate(
    tasks: list[Task],
    results: list[WorkloadResult],
    shard: Shard,
    workloads: int,
    elapsed_s: float,
    allow_divergence: bool = False,
    head: Task | None = None,
    families: list[str] | None = None,
    out_of_scope: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The certificate of a run. `head` stands for the campaign when this shard drew no workload."""
    t0 = tasks[0] if tasks else head
    assert t0 is not None, "an empty shard's certificate needs the campaign's head task"
    per_family: dict[str, dict[str, int]] = {}
    covered: Counter[str] = Counter()
    reached: Counter[str] = Counter()
    for r in results:
        c = per_family.setdefault(
            r.family, {"workloads": 0, "matched": 0, "diverged": 0, "nondeterministic": 0, "error": 0, "steps": 0}
        )
        c["workloads"] += 1
        c[r.outcome if r.outcome != "skipped" else "error"] += 1
        c["steps"] += r.steps_compared
        covered.update(r.behaviours)
        reached.update(r.cells)
    steps = sum(r.steps_compared for r in results)
    nondet = [{"workload": r.name, **r.nondeterministic} for r in results if r.nondeterministic]
    violations = [{"workload": r.name, "violation": v} for r in results for v in r.violations]
    cxs = [
        {
            "workload": r.name,
            "file": r.counterexample_file,
            "step": r.divergence["step"],
            "field": r.divergence["field"],
            "shrunk_size": r.shrunk_size,
            "a": r.divergence["a"],
            "b": r.divergence["b"],
            "crash": r.crash,
            "shrunk": r.steps_table,
            "shrink_note": r.shrink_note,
        }
        for r in results
        if r.divergence
    ]
    errors = [{"workload": r.name, **r.error} for r in results if r.error]
    not_run = [{"workload": r.name, "why": r.skipped} for r in results if r.skipped]
    crashes = [c for c in cxs if c["crash"]]
    departures = [c for c in cxs if not c["crash"]]
    outcomes = Counter(r.outcome for r in results)
    source = t0.engine.source
    return {
        "version": 2,
        "engine": t0.engine.name,
        "engine_version": engine_version(t0.engine),
        "against": t0.against.name,
        "against_version": engine_version(t0.against),
        "level": t0.level,
        "levels_checked": list(LEVELS[: LEVELS.index(t0.level) + 1]),
        "campaign": {
            "seed": t0.seed,
            "workloads": workloads,
            "shard": str(shard),
            "families": sorted({t.family for t in tasks}, key=list(FAMILIES).index),
            # what was asked for, so that `schedspec merge` can tell shards of one campaign and order their workloads
            "families_requested": list(families or [t0.family]),
            # left out of the default families: a feature an engine declares outside its scope (declared_scope.py)
            "families_out_of_scope": out_of_scope or {},
            "empty_shard": not tasks,  # a CI matrix with more shards than workloads: this one holds none
        },
        "vllm_source": vllm_source_info(source) if source is not None else None,
        "allow_divergence": allow_divergence,
        **judged(errors, not_run, departures, crashes, nondet, violations, allow_divergence),
        "outcomes": {k: outcomes.get(k, 0) for k in OUTCOMES},
        "departures": departures if allow_divergence else [],
        "workloads_run": len(results) - len(not_run),
        "steps_compared": steps,
        "elapsed_s": round(elapsed_s, 2),
        "steps_per_second": round(steps / elapsed_s, 1) if elapsed_s > 0 else None,
        "time_shares": time_shares(results),
        "per_family": per_family,
        "coverage": {b: covered.get(b, 0) for b in BEHAVIOURS},
        "coverage_map": coverage_map_summary(reached),
        "determinism": {"checked": sum(r.ran_twice for r in results), "nondeterministic": nondet},
        "counterexamples": cxs,
        "errors": errors,
        "skipped": not_run,
        "invariant_violations": violations,
        # broken by the engine's release, which vLLM later fixed (spec/versions.py): reported, never failed
        "known_violations": [{"workload": r.name, "violation": v} for r in results for v in r.known_violations],
        "invariants_checked": len(MONITORED) + 2,  # the catalogue and the decisions, plus two trace-level checks
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }


def time_shares(results: list[WorkloadResult]) -> dict[str, Any]:
    """Where the workloads' time went, as a share of their summed seconds: the oracle's engine, the engine under
    test, the differ, the monitors, and the rest (coverage, counterexample files). Summed over workers, so with
    `--jobs` above 1 the seconds are more than the wall time; the shares say which part to make faster."""
    spent = {p: sum(r.seconds_in[p] for r in results) for p in PARTS}
    total = sum(spent.values())
    return {
        "seconds": round(total, 2),
        "shares": {p: round(s / total, 3) if total > 0 else 0.0 for p, s in spent.items()},
    }


def judged(
    errors: list[Any],
    not_run: list[Any],
    departures: list[Any],
    crashes: list[Any],
    nondet: list[Any],
    violations: list[Any],
    allow_divergence: bool,
) -> dict[str, Any]:
    """The verdict and `passed`: an incomplete run is an error, whatever else it found; a merge judges alike."""
    incomplete = bool(errors or not_run)
    failed = bool((departures and not allow_divergence) or crashes or nondet or violations)
    return {"verdict": verdict(incomplete, failed), "passed": not incomplete and not failed}


def verdict(incomplete: Any, failed: Any) -> str:
    return "error" if incomplete else "failed" if failed else "passed"


def exit_status(cert: dict[str, Any]) -> int:
    return {"passed": EXIT_PASSED, "failed": EXIT_FAILED, "error": EXIT_ERROR}[cert["verdict"]]


OUTPUT_NAMES = ("certificate.json", "certificate.md", "junit.xml")
OUTPUT_PATTERNS = ("counterexample-*.json", "counterexample-*.png")


def write_outputs(out_dir: str, cert: dict[str, Any], results: list[WorkloadResult]) -> list[str]:
    """The three reports; the caller (`OutDir`) already checked the folder and settled what was there."""
    os.makedirs(out_dir, exist_ok=True)
    paths = [os.path.join(out_dir, n) for n in OUTPUT_NAMES]
    write_json_atomic(paths[0], cert)
    write_bytes_atomic(paths[1], markdown(cert).encode())
    write_bytes_atomic(paths[2], junit(cert, results))
    return paths


def ensure_engines_built(engine: EngineSpec, against: EngineSpec, say: Callable[[str], None]) -> None:
    """The first use of a vLLM release builds its 1.5 GB venv: say so, and do it before the campaign's clock starts.

    A source tree (`vllm@PATH`, `vllm==V@PATH`) runs on the default release's venv, whatever V it is judged as.
    """
    from ..engines.vllm import ensure_vllm_venv, vllm_venv_path, vllm_venv_ready

    releases = []
    for e in (engine, against):
        if e.is_vllm:
            releases.append(e.release if e.release and e.source is None else DEFAULT_RELEASE)
    for release in dict.fromkeys(releases):
        if vllm_venv_ready(release=release):
            continue
        say(
            f"certify: building the vLLM {release} venv in {vllm_venv_path(release)} (first use only: about 90 s, "
            "1.5 GB, CPU torch, --no-deps; `schedspec venvs --list` shows them) ..."
        )
        ensure_vllm_venv(release=release)
        say(f"certify: vLLM {release} venv ready")


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def certify(
    engine: EngineSpec,
    against: EngineSpec = REFERENCE,
    level: str = "blocks",
    families: list[str] | None = None,
    workloads: int = 100,
    seed: int = 0,
    shard: Shard = WHOLE,
    options: Options = Options(),
    out_dir: str = "certificate",
    on_done: Callable[[WorkloadResult], None] = lambda r: None,
    tasks: list[Task] | None = None,
    allow_divergence: bool = False,
) -> tuple[dict[str, Any], list[WorkloadResult]]:
    asked = families or list(FAMILIES)
    families = in_scope(engine, against, asked, False, options)  # what `plan` drew from (a cached answer)
    out_of_scope = {f: scope_reason(f, engine, against) for f in asked if f not in families}
    tasks = tasks or plan(engine, against, level, families, workloads, seed, shard, out_dir, options)
    os.makedirs(out_dir, exist_ok=True)
    head = tasks[0] if tasks else Task(families[0], 0, seed, engine, against, level, out_dir, False)
    if tasks:
        ensure_engines_built(head.engine, head.against, _stderr)  # not counted in steps/s
    t0 = time.perf_counter()
    results = run(tasks, options, on_done) if tasks else []
    cert = certificate(
        tasks, results, shard, workloads, time.perf_counter() - t0, allow_divergence, head, families, out_of_scope
    )
    return cert, results
