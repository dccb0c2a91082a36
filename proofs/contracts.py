"""CrossHair contracts on the reference: every invariant, at every step of every bounded scenario.

Each `check_*` function is one contract in PEP 316 form. Its arguments are
raw ints (`bounded.Knobs`, three `bounded.Ask`s, and `n`, the number of
requests) that `bounded.decode` branches into a well-formed scenario within
the bounds; the scenario runs through the reference's pure API; the
postcondition `__return__` says the named check held at every step.
The precondition is the decoding itself: every input is a well-formed
scenario, so the contracts need no `pre:` line (docs/crosshair.md says why).

The checks are not restated here. A step contract evaluates one
`catalogue.INVARIANTS` predicate on the `StepView` that `view_from_states`
builds from the full states, block ids included; a history contract runs
the trace monitor's check of that name on the run's trace. One contract per
check, so the report says which rule broke, and a mutant is pinned to the
contract that catches it.

The reference keeps vLLM's own `assert`s. An AssertionError (or any other
exception) raised inside it escapes the contract, and CrossHair reports it
as a counterexample of whichever contract was running: `check_runs` exists
so that one contract checks nothing else.

`explain` replays a contract concretely on given arguments and says what
broke, where: the runner calls it, in a fresh process with the same mutant
applied, before it reports any counterexample.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass
from typing import Any, Callable

from crosshair import NoTracing, deep_realize

from ..spec.invariants.catalogue import BY_NAME, INVARIANTS
from ..spec.invariants.monitor import check_trace
from ..spec.workload import Workload
from .bounded import Ask, Knobs, decode, run, trace_of, workload

HISTORY_CHECKS = ("finished-reported-once", "stop-is-final")  # spec/invariants/monitor.py


SCENARIOS_RUN = 0  # per process; the runner reports it: how many of CrossHair's paths reached the reference


def _scenario(k: Knobs, asks: tuple[Ask, ...], n: int) -> Workload:
    global SCENARIOS_RUN
    # The picks are concrete already; deep_realize makes sure nothing symbolic reaches untraced code.
    config, reqs = deep_realize(decode(k, asks, n))
    with NoTracing():
        SCENARIOS_RUN += 1
        return workload(config, reqs)


def _every_step(name: str, k: Knobs, asks: tuple[Ask, ...], n: int) -> bool:
    holds = BY_NAME[name].holds
    w = _scenario(k, asks, n)
    with NoTracing():  # concrete from here on: every branch was decided by the picks
        return all(holds(step.view()) for step in run(w))


def _history(name: str, k: Knobs, asks: tuple[Ask, ...], n: int) -> bool:
    w = _scenario(k, asks, n)
    with NoTracing():
        trace = trace_of(w, [step.record for step in run(w)])
        return not any(v.invariant == name for v in check_trace(trace, invariants=()))


def check_runs(k: Knobs, a0: Ask, a1: Ask, a2: Ask, n: int) -> bool:
    """post: __return__"""
    w = _scenario(k, (a0, a1, a2), n)
    with NoTracing():
        for _ in run(w):
            pass
        return True


def _contract(check: str, body: Callable[[str, Knobs, tuple[Ask, ...], int], bool]) -> Callable[..., bool]:
    def contract(k: Knobs, a0: Ask, a1: Ask, a2: Ask, n: int) -> bool:
        """post: __return__"""
        return body(check, k, (a0, a1, a2), n)

    contract.__name__ = contract.__qualname__ = contract_name(check)
    return contract


def contract_name(check: str) -> str:
    return "check_" + check.replace("-", "_")


# One contract per check, made from the catalogue, so a new invariant gets its contract without an edit here.
# CrossHair finds each by name (`schedspec.proofs.contracts.check_token_bounds`); all share one docstring line.
for _check, _body in [(i.name, _every_step) for i in INVARIANTS] + [(c, _history) for c in HISTORY_CHECKS]:
    globals()[contract_name(_check)] = _contract(_check, _body)

# contract function name -> the check it states ("" for check_runs: only the reference's own asserts).
CONTRACTS: dict[str, str] = {"check_runs": "", **{contract_name(i.name): i.name for i in INVARIANTS},
                             **{contract_name(c): c for c in HISTORY_CHECKS}}


def contract(name: str) -> Callable[..., bool]:
    return globals()[name]


@dataclass(frozen=True)
class Replay:
    """A concrete run of a contract on given arguments."""

    holds: bool
    what: str  # the broken check, or the exception's type ("AssertionError": one of the reference's asserts)
    step: int | None  # the first step where it broke; None if it held or the trace checks found it
    detail: str
    workload: dict[str, Any]  # the decoded scenario, as a workload file: `schedspec simulate` replays it


def explain(name: str, k: Knobs, a0: Ask, a1: Ask, a2: Ask, n: int) -> Replay:
    """Run contract `name` concretely on these arguments and say what broke, at which step."""
    config, reqs = decode(k, (a0, a1, a2), n)
    w = workload(config, reqs)
    check, steps = CONTRACTS[name], 0
    try:
        holds = contract(name)(k, a0, a1, a2, n)
    except Exception as e:  # the reference's own asserts, or any crash a mutant causes
        frame = traceback.extract_tb(e.__traceback__)[-1]
        return Replay(False, type(e).__name__, None, f"{e} at {frame.filename.rsplit('/', 1)[-1]}:{frame.lineno}",
                      w.to_json())
    if holds:
        return Replay(True, "", None, "", w.to_json())
    if check in HISTORY_CHECKS:
        v = next(v for v in check_trace(trace_of(w, [s.record for s in run(w)]), invariants=()) if v.invariant == check)
        return Replay(False, check, v.step, v.detail, w.to_json())
    for step in run(w):
        view = step.view()
        if not BY_NAME[check].holds(view):
            steps = step.record.step
            detail = view.ids_problem if check == "block-conservation" and view.ids_problem else BY_NAME[check].sentence
            return Replay(False, check, steps, detail, w.to_json())
    raise AssertionError(f"{name} failed, yet no step of its replay breaks {check}")  # the contract is not deterministic
