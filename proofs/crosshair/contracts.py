"""CrossHair contracts on the reference: every invariant, at every step of every bounded scenario.

A contract is a function in PEP 316 form, `post: __return__`. Its
arguments are raw ints (`bounded.Knobs`, three `bounded.Ask`s, and `n`,
the number of requests) that `bounded.decode` branches into a well-formed
scenario within the bounds; the scenario runs through the reference's pure
API; the function returns whether the named check held at every step.
There is no `pre:` line because the decoding is the precondition: every
input decodes to a well-formed scenario (docs/crosshair.md says why that
beats preconditions here).

The checks are not restated here. A step contract evaluates one
`catalogue.INVARIANTS` predicate on the `StepView` that `view_from_states`
builds from the full states, block ids included; a history contract runs
the trace monitor's check of that name on the run's trace. The contracts
are generated from the catalogue, one per check (`check_token_bounds` for
"token-bounds"), so the report says which rule broke, a mutant is pinned
to the contract that catches it, and a new invariant gets its contract
without an edit here.

The reference keeps vLLM's own `assert`s. An AssertionError (or any other
exception) raised inside it escapes the contract, and CrossHair reports it
as a counterexample of whichever contract was running; `check_runs`
checks nothing else. `check_all` states every check at once: CrossHair's
seed is fixed and every contract branches the same way, so all contracts
run the same scenarios in the same order, and one long run of `check_all`
covers what a run of each would. `check_all_with_async` (and
`_with_prefix_caching`, `_with_spec_decode`) states every check on
scenarios with that one of the three features on, taking one more argument,
`Draws` (k and the drafts); each is a search of its own.

`explain` replays a contract concretely on given arguments and says what
broke, where: the runner calls it, in the worker that found it, with the same mutant
applied, before it reports any counterexample.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from crosshair import NoTracing, deep_realize

from ...spec.invariants.catalogue import BY_NAME, INVARIANTS, Invariant
from ...spec.invariants.monitor import check_trace
from ...spec.workload import Workload
from .bounded import Ask, Draws, Knobs, decode, workload
from .bounded_run import run, trace_of

HISTORY_CHECKS = ("finished-reported-once", "stop-is-final")  # the trace-wide checks of spec/invariants/monitor.py
ALL = "all"  # check_all: every step invariant and every history check at once
SCENARIOS_RUN = 0  # per process; the runner reports it: how many of CrossHair's paths reached the reference


def _scenario(
    k: Knobs, asks: tuple[Ask, ...], n: int, feature: str | None = None, draws: Draws | None = None
) -> Workload:
    global SCENARIOS_RUN
    # The picks are concrete already; deep_realize makes sure nothing symbolic reaches untraced code.
    config, reqs = deep_realize(decode(k, asks, n, feature, draws))
    with NoTracing():
        SCENARIOS_RUN += 1
        return workload(config, reqs)


def _checks(check: str) -> tuple[list[Invariant], list[str]]:
    """The step invariants and the history checks a contract states."""
    if check == ALL:
        return list(INVARIANTS), list(HISTORY_CHECKS)
    return ([BY_NAME[check]] if check in BY_NAME else []), ([check] if check in HISTORY_CHECKS else [])


def _violation(w: Workload, check: str) -> tuple[str, int | None, str] | None:
    """The first broken check of the run, its step and what it says; None if all held (check "": none is asked)."""
    invariants, history = _checks(check)
    records = []
    for step in run(w):
        records.append(step.record)
        if invariants:
            view = step.view()
            for inv in invariants:
                if not inv.holds(view):
                    ids = inv.name == "block-conservation" and view.ids_problem
                    return inv.name, step.record.step, ids or inv.sentence
    if history:
        for v in check_trace(trace_of(w, records), invariants=()):
            if v.invariant in history:
                return v.invariant, v.step, v.detail
    return None


def _contract(check: str) -> Callable[..., bool]:
    def contract(k: Knobs, a0: Ask, a1: Ask, a2: Ask, n: int) -> bool:
        """post: __return__"""
        w = _scenario(k, (a0, a1, a2), n)
        with NoTracing():  # concrete from here on: every branch was decided by the picks
            return _violation(w, check) is None

    contract.__name__ = contract.__qualname__ = contract_name(check)
    return contract


def _feature_contract(feature: str) -> Callable[..., bool]:
    def contract(k: Knobs, a0: Ask, a1: Ask, a2: Ask, n: int, d: Draws) -> bool:
        """post: __return__"""
        w = _scenario(k, (a0, a1, a2), n, feature, d)
        with NoTracing():
            return _violation(w, ALL) is None

    contract.__name__ = contract.__qualname__ = contract_name(ALL, feature)
    return contract


def contract_name(check: str, feature: str | None = None) -> str:
    return "check_" + (check.replace("-", "_") or "runs") + (f"_with_{feature.replace('-', '_')}" if feature else "")


# The three features (prefix caching, spec decode, async scheduling): each in scenarios of its own,
# with one contract stating every check there.
FEATURES = ("prefix-caching", "spec-decode", "async")
# contract function name -> the check it states ("": only the reference's own asserts; "all": every check).
CONTRACTS: dict[str, str] = {contract_name(c): c for c in ["", *(i.name for i in INVARIANTS), *HISTORY_CHECKS, ALL]}
FEATURE_OF: dict[str, str] = {contract_name(ALL, f): f for f in FEATURES}
CONTRACTS.update({name: ALL for name in FEATURE_OF})

# CrossHair finds each by name (`schedspec.proofs.crosshair.contracts.check_token_bounds`); they share one code
# object, so its messages give the same line for all of them, and the runner tells them apart by name.
for _name, _check in CONTRACTS.items():
    globals()[_name] = _feature_contract(FEATURE_OF[_name]) if _name in FEATURE_OF else _contract(_check)


def contract(name: str) -> Callable[..., bool]:
    return globals()[name]


@dataclass(frozen=True)
class Replay:
    """A concrete run of a contract on given arguments."""

    holds: bool
    what: str  # the broken check, or the exception's type ("AssertionError": one of the reference's asserts)
    step: int | None  # the step where it broke; None if it held or an exception ended the run
    detail: str
    workload: dict[str, Any]  # the decoded scenario, as a workload file: `schedspec simulate` replays it


def explain(name: str, k: Knobs, a0: Ask, a1: Ask, a2: Ask, n: int, d: Draws | None = None) -> Replay:
    """Run contract `name` concretely on these arguments and say what broke, at which step."""
    feature = FEATURE_OF.get(name)
    w = workload(*decode(k, (a0, a1, a2), n, feature, d))
    try:  # the replay proper: the very function CrossHair checked
        holds = contract(name)(k, a0, a1, a2, n, d) if feature else contract(name)(k, a0, a1, a2, n)
        found = None if holds else _violation(w, CONTRACTS[name])  # run again, to say what broke
    except Exception as e:  # the reference's own asserts, or any crash a mutant causes
        return Replay(False, type(e).__name__, None, _where(traceback.extract_tb(e.__traceback__)[-1], e), w.to_json())
    if holds:
        return Replay(True, "", None, "", w.to_json())
    if found is None:
        raise AssertionError(f"{name} failed, yet its rerun breaks nothing: the contract is not deterministic")
    return Replay(False, *found, w.to_json())


def _where(frame: traceback.FrameSummary, e: Exception) -> str:
    """`file:line: source` of the raising line (a planted mutant compiles into its target's own file and lines)."""
    filename, lineno, line = frame.filename, frame.lineno or 0, frame.line
    where = f"{filename.rsplit('/', 1)[-1]}:{lineno}" + (f": {line}" if line else "")
    return where + (f" ({e})" if str(e) else "")
