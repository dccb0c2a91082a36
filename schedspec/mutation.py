"""The mutant × checker kill matrix: how good each checker is, measured on real bugs.

Every mutant of `mutants.MUTANTS` is run through every checker within a
time budget. A checker kills a mutant when it reports a confirmed problem:
a monitor violation (or one of vLLM's own asserts firing) on a generated
workload, a divergence from the unmutated reference (and, where its venv
exists, the same workload diffed against the real vLLM 0.33.0), a Z3
counterexample replayed on the mutated reference, a failing Hypothesis
state-machine run, or a CrossHair counterexample replayed concretely. The
size of what each checker hands back is recorded as (requests, steps).

A mutant that no checker kills fails the run, unless it is argued
equivalent in `mutants.EQUIVALENT`.

It lives at the top, beside the CLI: scoring a mutant runs every checker,
those of `conformance/` and the Z3 and CrossHair ones of `proofs/`, and
neither of those two packages imports the other. The mutants themselves sit
below both (`schedspec.mutants`), since both plant them.

A cell that is not a kill is `survived` only when the checker finished
without finding the mutant: Z3 proved every check up to N = 3, CrossHair
explored every path, the state machine ran all its examples. A search cut
short by the cell's seconds budget (the monitors and the differ search
until the budget is spent, always) or by a solver timeout reads "budget
spent" or "unknown": it shows that nothing was found in the time, never
that the checker misses the mutant (`Kill.verdict`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .mutants import Mutant

if TYPE_CHECKING:
    from .spec.workload import Workload

CHECKERS = ("monitors", "diff", "z3", "hypothesis", "crosshair")
BUDGET_SPENT = "budget spent"  # the `what` of a cell whose seconds ran out before its search was done


@dataclass(frozen=True)
class Kill:
    mutant: str
    checker: str
    killed: bool
    what: str  # the invariant, field or assertion that caught it; why not, otherwise
    seconds: float
    size: tuple[int, int] | None  # (requests, steps) of the counterexample

    @property
    def verdict(self) -> str:
        """killed | survived (the checker finished and missed it) | unknown (its time ran out) | error."""
        if self.killed:
            return "killed"
        if self.what.startswith("checker error"):
            return "error"
        return "unknown" if self.what.startswith((BUDGET_SPENT, "unknown")) else "survived"


def _monitors_or_diff(checker: str) -> Callable[[Mutant, float], Kill]:
    def run(m: Mutant, budget_s: float) -> Kill:
        from .conformance.hunt import hunt

        t0 = time.perf_counter()
        f = hunt(m, checker, budget_s=budget_s, shrink_budget_s=budget_s)
        if f is None:
            # hunt() searches until the budget is spent and gives up only then: unknown, not survived
            return Kill(m.name, checker, False, BUDGET_SPENT, time.perf_counter() - t0, None)
        steps = f.step + 1 if f.step >= 0 else f.workload.max_steps
        what = f.what
        if checker == "diff":
            what += _against_vllm(m, f.workload)
        return Kill(m.name, checker, True, what, f.seconds_to_find, (len(f.workload.requests), steps))

    return run


def _against_vllm(m: Mutant, workload: Workload) -> str:
    """The same counterexample, the mutated reference against the real vLLM 0.33.0, when its venv exists."""
    from .conformance.engines.vllm import vllm_venv_ready

    if not vllm_venv_ready():
        return ""
    from .conformance.differ import diff
    from .conformance.registry import engine_factory
    from .mutants import applied
    from .reference_impl import ReferenceEngine

    with applied(m):
        try:
            d = diff(workload, ReferenceEngine, engine_factory("vllm"), "blocks").divergence
        except Exception as e:  # noqa: BLE001 - the vLLM check is a bonus; its failure is reported, not raised
            return f"; vs vLLM: error {type(e).__name__}"
    return f"; departs from vLLM at step {d.step}" if d is not None else "; agrees with vLLM"


def _z3(m: Mutant, budget_s: float) -> Kill:
    """The core run, or for a mutant of a feature family the feature run with the features it lives in."""
    from .proofs.runs import features as feature_mode, prove
    from .spec.invariants import INVARIANTS

    features = tuple(f for f in feature_mode.FEATURES if f in m.families)
    t0 = time.perf_counter()
    undecided = 0  # checks that timed out, or whose model did not replay: neither proved nor a kill
    for n in (1, 2, 3):
        for fcfs in (True, False):
            for inv in INVARIANTS:
                left = budget_s - (time.perf_counter() - t0)
                if left <= 0:
                    return Kill(m.name, "z3", False, "budget spent", time.perf_counter() - t0, None)
                r = (
                    feature_mode.run_job(feature_mode.Job(inv.name, n, fcfs, min(left, 30.0), m.name, features))
                    if features
                    else prove.run_job(prove.Job(inv.name, n, fcfs, min(left, 30.0), m.name))
                )
                if r.verdict == "violated":
                    return Kill(m.name, "z3", True, r.invariant, time.perf_counter() - t0, (n, 1))
                undecided += r.verdict in ("unknown", "unconfirmed")
    if undecided:
        return Kill(
            m.name,
            "z3",
            False,
            f"unknown: {undecided} checks not proved (timeout or unconfirmed)",
            time.perf_counter() - t0,
            None,
        )
    return Kill(m.name, "z3", False, "proved up to N=3", time.perf_counter() - t0, None)


def _hypothesis(m: Mutant, budget_s: float) -> Kill:
    from .conformance.state_machine_hunt import hunt_state_machine

    t0 = time.perf_counter()
    budget_s = max(budget_s, m.min_search_s)
    f = hunt_state_machine(m, budget_s=budget_s)
    if f is None:  # all examples run ("survived"), or the deadline stopped the search first
        spent = time.perf_counter() - t0
        return Kill(m.name, "hypothesis", False, BUDGET_SPENT if spent >= budget_s else "survived", spent, None)
    return Kill(m.name, "hypothesis", True, f.what, f.seconds_to_find, (f.size[0], f.size[1]))


def _crosshair(m: Mutant, budget_s: float) -> Kill:
    from .proofs.crosshair.contracts import ALL, FEATURES, contract_name
    from .proofs.crosshair.runner import run_contract
    from .spec.invariants import BY_NAME

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
    r = run_contract(contract, timeout=budget_s, mutant=m.name)
    if r.verdict != "counterexample":  # CrossHair's "unknown" is its per-contract budget running out
        what = (
            BUDGET_SPENT
            if r.verdict == "unknown"
            else "unknown: counterexample not confirmed"
            if r.verdict == "unconfirmed"
            else r.verdict
        )
        if r.message.startswith("worker exited"):  # the worker crashed: no search happened at all
            what = f"checker error: {r.message}"[:120]
        return Kill(m.name, "crosshair", False, what, r.seconds, None)
    replay = r.replay or {}
    requests = len(replay.get("workload", {}).get("requests", ()))
    size = (requests, replay["step"] + 1) if replay.get("step") is not None and requests else None
    return Kill(m.name, "crosshair", True, replay.get("what") or "assertion", r.seconds, size)


RUNNERS: dict[str, Callable[[Mutant, float], Kill]] = {
    "monitors": _monitors_or_diff("monitors"),
    "diff": _monitors_or_diff("diff"),
    "z3": _z3,
    "hypothesis": _hypothesis,
    "crosshair": _crosshair,
}


def run_cell(args: tuple[str, str, float]) -> Kill:
    """One (mutant, checker) cell; a checker that crashes is reported, not raised."""
    from .mutants import BY_NAME

    name, checker, budget_s = args
    t0 = time.perf_counter()
    try:
        return RUNNERS[checker](BY_NAME[name], budget_s)
    except Exception as e:  # noqa: BLE001 - one broken checker must not lose the whole table
        return Kill(
            name, checker, False, f"checker error: {type(e).__name__}: {e}"[:120], time.perf_counter() - t0, None
        )
