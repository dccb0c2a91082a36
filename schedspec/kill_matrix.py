"""The mutant × checker kill matrix: how good each checker is, measured on real bugs.

Every mutant of `mutants.MUTANTS` (or every engine of a `--from` module,
`conformance/search/user_mutants.py`) is run through every checker within a
budget. A checker kills a mutant when it reports a confirmed problem: a
monitor violation (or one of vLLM's own asserts firing) on a generated
workload, a divergence from the unmutated reference (and, where its venv
exists, the same workload diffed against the real vLLM 0.33.0), a Z3
counterexample replayed on the mutated reference, a failing Hypothesis
state-machine run, or a CrossHair counterexample replayed concretely. The
size of what each checker hands back is recorded as (requests, steps).

A mutant that no checker kills fails the run, unless it is argued
equivalent in `mutants.EQUIVALENT` (or the `--from` module's `EQUIVALENT`).

It lives at the top, beside the CLI: scoring a mutant runs every checker,
those of `conformance/` and the Z3 and CrossHair ones of `proofs/`, and
neither of those two packages imports the other. The mutants themselves sit
below both (`schedspec.mutants`), since both plant them.

**Budgets are counts** (`Budget`, `conformance/search/budget.py`), so a
verdict never depends on how loaded the machine is:

* monitors and diff search the first `examples` generated workloads, in a
  fixed order from seed 0;
* the state machine runs `examples` Hypothesis examples, derandomized from
  a fixed seed (a mutant's `min_examples` is a floor: Z5 needs 2000); for a
  `--from` engine it is the lock-step machine of `schedspec hunt`, the
  engine beside the pristine reference (`conformance/search/lockstep_hunt.py`);
* Z3 runs every check up to N = 3 with a resource limit (`rlimit`, work
  units) per query;
* CrossHair runs `examples` of its iterations, each Z3 query bounded by work
  units too.

A cell that is not a kill is `survived` only when that count was used up,
or the search space exhausted, without a find: Z3 proved every check up to
N = 3, CrossHair explored every path or ran all its iterations, the
searches ran all their examples. `cap_s` (`--budget`) is only a safety cap
in seconds: a search it stops, or a Z3 query at its resource limit, reads
"budget spent" or "unknown", never a survival (`Kill.verdict`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING

from .conformance.search.budget import DEFAULT_CAP_S, DEFAULT_EXAMPLES, DEFAULT_Z3_RLIMIT, SearchCut, z3_rlimit
from .conformance.search.subject import Subject, of_mutant
from .mutants import EQUIVALENT, MUTANTS

if TYPE_CHECKING:
    from .spec.workload import Workload

CHECKERS = ("monitors", "diff", "z3", "hypothesis", "crosshair")
ENGINE_CHECKERS = ("monitors", "diff", "hypothesis")  # the checkers that take an engine (a `--from` mutant)
BUDGET_SPENT = "budget spent"  # the `what` of a cell whose safety cap ran out before its count was done


@dataclass(frozen=True)
class Budget:
    """One cell's budget: counts that decide the verdict, and a safety cap in seconds that never does."""

    examples: int = DEFAULT_EXAMPLES  # workloads (monitors, diff), examples (hypothesis), iterations (crosshair)
    rlimit: int = DEFAULT_Z3_RLIMIT  # Z3's resource limit per query
    cap_s: float = DEFAULT_CAP_S  # the safety cap: past it, the cell is unknown


@dataclass(frozen=True)
class Kill:
    mutant: str
    checker: str
    killed: bool
    what: str  # the invariant, field or assertion that caught it; why not, otherwise
    seconds: float
    size: tuple[int, int] | None  # (requests, steps) of the counterexample
    examples: int | None = None  # examples searched up to the find, or in all when nothing was found

    @property
    def verdict(self) -> str:
        """killed | survived (its count was used up without a find) | unknown (cut short) | error."""
        if self.killed:
            return "killed"
        if self.what.startswith("checker error"):
            return "error"
        return "unknown" if self.what.startswith((BUDGET_SPENT, "unknown")) else "survived"


def _spent(s: Subject, checker: str, e: SearchCut, t0: float) -> Kill:
    return Kill(s.name, checker, False, str(e), time.perf_counter() - t0, None, e.done)


def _monitors_or_diff(checker: str) -> Callable[[Subject, Budget], Kill]:
    def run(s: Subject, budget: Budget) -> Kill:
        from .conformance.search.kill_campaign import kill_by_campaign

        t0 = time.perf_counter()
        try:
            f = kill_by_campaign(s, checker, examples=budget.examples, budget_s=budget.cap_s)
        except SearchCut as e:
            return _spent(s, checker, e, t0)
        if f is None:
            what = f"no problem in {budget.examples} workloads"
            return Kill(s.name, checker, False, what, time.perf_counter() - t0, None, budget.examples)
        steps = f.step + 1 if f.step >= 0 else f.workload.max_steps
        what = f.what
        if checker == "diff":
            what += _against_vllm(s, f.workload)
        return Kill(s.name, checker, True, what, f.seconds_to_find, (len(f.workload.requests), steps), f.examples)

    return run


def _against_vllm(s: Subject, workload: Workload) -> str:
    """The same counterexample, the subject against the real vLLM 0.33.0, when its venv exists."""
    from .conformance.engines.vllm import vllm_venv_ready

    if not vllm_venv_ready():
        return ""
    from .conformance.engines.engine_spec import parse_engine
    from .conformance.engines.registry import engine_factory
    from .conformance.harness.differ import diff

    with s.running():
        try:
            d = diff(workload, s.factory, engine_factory(parse_engine("vllm")), "blocks").divergence
        except Exception as e:  # noqa: BLE001 - the vLLM check is a bonus; its failure is reported, not raised
            return f"; vs vLLM: error {type(e).__name__}"
    return f"; departs from vLLM at step {d.step}" if d is not None else "; agrees with vLLM"


def _z3(s: Subject, budget: Budget) -> Kill:
    """The core run, or for a mutant of a feature family the feature run with the features it lives in."""
    from .proofs.runs import features as feature_mode, prove
    from .spec.invariants import INVARIANTS

    m = s.mutant
    assert m is not None, "Z3 runs on the reference's rules: only a catalogue mutant reaches it"
    features = tuple(f for f in feature_mode.FEATURES if f in m.families)
    t0 = time.perf_counter()
    undecided = 0  # checks at the resource limit (or the cap), or whose model did not replay: not proved, no kill
    with z3_rlimit(budget.rlimit):
        for n in (1, 2, 3):
            for fcfs in (True, False):
                for inv in INVARIANTS:
                    left = budget.cap_s - (time.perf_counter() - t0)
                    if left <= 0:
                        return Kill(m.name, "z3", False, BUDGET_SPENT, time.perf_counter() - t0, None)
                    r = (
                        feature_mode.run_job(feature_mode.Job(inv.name, n, fcfs, left, m.name, features=features))
                        if features
                        else prove.run_job(prove.Job(inv.name, n, fcfs, left, m.name))
                    )
                    if r.verdict == "violated":
                        return Kill(m.name, "z3", True, r.invariant, time.perf_counter() - t0, (n, 1))
                    undecided += r.verdict in ("unknown", "unconfirmed")
    if undecided:
        return Kill(
            m.name,
            "z3",
            False,
            f"unknown: {undecided} checks not proved (resource limit, cap, or unconfirmed)",
            time.perf_counter() - t0,
            None,
        )
    return Kill(m.name, "z3", False, "proved up to N=3", time.perf_counter() - t0, None)


def _hypothesis(s: Subject, budget: Budget) -> Kill:
    t0 = time.perf_counter()
    examples = max(budget.examples, s.mutant.min_examples if s.mutant is not None else 0)
    try:
        if s.mutant is not None:
            from .conformance.search.state_machine_kill import kill_by_state_machine

            f = kill_by_state_machine(s.mutant, budget_s=budget.cap_s, max_examples=examples)
        else:  # an engine of its own: the lock-step machine, in step with the reference
            from .conformance.search.lockstep_hunt import hunt_engine

            f = hunt_engine(s, examples=examples, budget_s=budget.cap_s)
    except SearchCut as e:
        return _spent(s, "hypothesis", e, t0)
    if f is None:  # every example ran
        what = f"no failure in {examples} examples"
        return Kill(s.name, "hypothesis", False, what, time.perf_counter() - t0, None, examples)
    return Kill(s.name, "hypothesis", True, f.what, f.seconds_to_find, (f.size[0], f.size[1]), f.examples)


def _crosshair(s: Subject, budget: Budget) -> Kill:
    from .proofs.crosshair.contracts import ALL, FEATURES, contract_name
    from .proofs.crosshair.runner import NO_CX, UNKNOWN, run_contract
    from .spec.invariants import BY_NAME

    m = s.mutant
    assert m is not None, "CrossHair runs the reference's contracts: only a catalogue mutant reaches it"
    # A feature's mutant runs on that feature's contract (every check, with the feature on). Otherwise the
    # contract of the first invariant the mutant is expected to break; `check_runs` (vLLM's own asserts only)
    # when it is expected to show up elsewhere.
    expected = [e for e in m.expect if e in BY_NAME]
    feature = next((f for f in FEATURES if f in m.families), None)
    contract = (
        contract_name(ALL, feature)
        if feature
        else f"check_{expected[0].replace('-', '_')}"
        if expected
        else "check_runs"
    )
    r = run_contract(contract, timeout=budget.cap_s, mutant=m.name, max_iterations=budget.examples)
    if r.verdict != "counterexample":
        what = (
            "explored every path"
            if r.verdict == NO_CX
            else "unknown: counterexample not confirmed"
            if r.verdict == "unconfirmed"
            else r.verdict
        )
        if r.verdict == UNKNOWN:
            # Its iterations ran out (a finished, counted search), or the CPU-seconds cap stopped it first. The
            # CPU time measured spans the whole check, so below the cap the cap cannot have been what stopped it.
            ran_out = r.cpu_seconds < budget.cap_s and not r.message.startswith(("killed", "worker exited"))
            what = f"no counterexample in {budget.examples} iterations" if ran_out else BUDGET_SPENT
        if r.verdict == "error" or r.message.startswith("worker exited"):  # no search happened at all
            what = f"checker error: {r.message}"[:120]
        return Kill(m.name, "crosshair", False, what, r.seconds, None, r.scenarios)
    replay = r.replay or {}
    requests = len(replay.get("workload", {}).get("requests", ()))
    size = (requests, replay["step"] + 1) if replay.get("step") is not None and requests else None
    return Kill(m.name, "crosshair", True, replay.get("what") or "assertion", r.seconds, size, r.scenarios)


RUNNERS: dict[str, Callable[[Subject, Budget], Kill]] = {
    "monitors": _monitors_or_diff("monitors"),
    "diff": _monitors_or_diff("diff"),
    "z3": _z3,
    "hypothesis": _hypothesis,
    "crosshair": _crosshair,
}

Cell = tuple[str, str, Budget, str | None]  # (mutant or engine name, checker, budget, the `--from` module or None)


@cache
def _subjects(source: str | None) -> dict[str, Subject]:
    if source is None:
        return {m.name: of_mutant(m) for m in MUTANTS}
    from .conformance.search.user_mutants import load

    return load(source).subjects


def run_cell(cell: Cell) -> Kill:
    """One (mutant, checker) cell; a checker that crashes is reported, not raised."""
    name, checker, budget, source = cell
    t0 = time.perf_counter()
    try:
        return RUNNERS[checker](_subjects(source)[name], budget)
    except Exception as e:  # noqa: BLE001 - one broken checker must not lose the whole table
        return Kill(
            name, checker, False, f"checker error: {type(e).__name__}: {e}"[:120], time.perf_counter() - t0, None
        )


@dataclass(frozen=True)
class Roster:
    """What is scored: the catalogue's mutants, or a `--from` module's engines, with their origins and arguments."""

    names: list[str]  # in table order
    origin: dict[str, str]
    equivalent: dict[str, str]
    source: str | None = None  # the `--from` module


def catalogue_roster() -> Roster:
    return Roster([m.name for m in MUTANTS], {m.name: m.origin for m in MUTANTS}, dict(EQUIVALENT))


def module_roster(module: str) -> Roster:
    from .conformance.search.user_mutants import load

    found = load(module)
    return Roster(list(found.subjects), dict.fromkeys(found.subjects, module), found.equivalent, module)
