"""Run `crosshair check` on each contract, in long-lived worker processes, and report what it found, replayed.

The contracts run in at most `jobs` worker processes (`pool.py`), each of
which imports the project, CrossHair and Z3 once and then runs contract
after contract. The mutant is applied there, around each CrossHair run, so
it never leaks into the caller; and a worker serves one mutant (or none)
only: the pool is keyed by mutant, and a worker refuses a task whose mutant
differs from one it planted, so no contract runs with a mutant it did not
ask for. The worker calls CrossHair's own `check` with `--report_all`, so
its output says, per contract, one of:

* `error: ... when calling check_x(...)`: a counterexample (a False
  postcondition, or an exception raised inside the reference);
* `info: Confirmed over all paths.`: CrossHair exhausted every path, so no
  input within the bounds breaks the contract;
* `info: Not confirmed.`: the time ran out first. That is "unknown", never
  "proved": CrossHair saw no counterexample, nothing more.

A counterexample is not reported on CrossHair's word. The arguments it
printed are parsed back (no `eval`: only `Knobs(...)`, `Ask(...)` and int
literals are accepted) and the contract is replayed concretely, with
`contracts.explain`, in the same worker with the same mutant planted afresh.
Only if the replay breaks too is the verdict "counterexample"; otherwise it
is "unconfirmed". A worker that crashes, raises, or hangs past a generous
wall-clock limit (and is killed) makes its contract an "error", and a fresh
worker takes the rest.

Reuse does not change verdicts: CrossHair seeds every `check` alike and the
scenario count is reset per contract, so a count-bounded run gives the same
scenarios, verdict and counterexample after any other contracts in the
worker as in a fresh one (measured: every contract at 20 iterations, and
Z4's counterexample at its pinned 49th scenario after two other contracts).

`--timeout` is CrossHair's `--per_condition_timeout`: CPU seconds of the
worker, not wall-clock time. `--max-iterations N` (`run_contract(...,
max_iterations=N)`, what `schedspec mutants` budgets by) caps the search at
N of CrossHair's iterations instead, its `max_iterations` option, and bounds
each Z3 query by work units (CrossHair's `CROSSHAIR_SMT_RLIMIT`, set for
that check only) rather than wall-clock time; the timeout is then only a
safety cap. The time reported for a counterexample is the
wall-clock and CPU time from CrossHair's start to its first counterexample
(CrossHair stops a contract at its first).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import io
import json
import os
import re
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from ...spec.errors import SpecError
from .bounded import Ask, Draws, Knobs
from .contracts import CONTRACTS
from .pool import Failure, run_in_workers

MODULE = "schedspec.proofs.crosshair.contracts"

NO_CX = "no counterexample within bounds"
CX = "counterexample"
UNKNOWN = "unknown"
UNCONFIRMED = "unconfirmed"  # CrossHair reported one, the concrete replay did not reproduce it
ERROR = "error"  # no verdict: the worker crashed, hung (and was killed) or raised; never a pass

_PARAMS = ("k", "a0", "a1", "a2", "n", "d")  # every contract's signature (d: a feature contract's Draws)
_LINE = re.compile(r"^(?P<file>.*?):(?P<line>\d+): (?P<kind>error|info|warning): (?P<msg>.*)$")


@dataclass
class ContractResult:
    contract: str
    check: str  # the catalogue or monitor check; "" for check_runs, "all" for check_all
    mutant: str | None
    verdict: str
    seconds: float  # wall-clock, CrossHair's start to its verdict (to the first counterexample, if any)
    cpu_seconds: float
    scenarios: int  # scenarios the worker ran: CrossHair's paths through the contract
    message: str = ""  # CrossHair's line, or why there is no verdict
    args: str = ""  # the counterexample's arguments as CrossHair printed them
    replay: dict[str, Any] | None = field(default=None)  # contracts.Replay, as a dict

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def check_names(names: Iterable[str] | None) -> list[str]:
    """The contracts to run, in catalogue order; an unknown name is the user's mistake."""
    if not names:
        return list(CONTRACTS)
    for n in names:
        if n not in CONTRACTS and "check_" + n.replace("-", "_") not in CONTRACTS:
            raise SpecError("--contract", n, f"is not a contract; known: {', '.join(CONTRACTS)}")
    wanted = {n if n in CONTRACTS else "check_" + n.replace("-", "_") for n in names}
    return [c for c in CONTRACTS if c in wanted]


def check_mutant(name: str | None) -> None:
    from ...mutants import BY_NAME

    if name is not None and name not in BY_NAME:
        raise SpecError("--mutant", name, f"is not a mutant; known: {', '.join(BY_NAME)}")


# ---- parsing CrossHair's counterexample ---------------------------------------------------------


def call_args(message: str, contract: str) -> str:
    """The text between the parentheses of `contract(...)` in CrossHair's message."""
    start = message.index(f"when calling {contract}(") + len(f"when calling {contract}(")
    depth = 1
    for i in range(start, len(message)):
        depth += {"(": 1, ")": -1}.get(message[i], 0)
        if depth == 0:
            return message[start:i]
    raise ValueError(f"unbalanced call in {message!r}")


def parse_args(text: str) -> tuple[Any, ...]:
    """`Knobs(1, 2, ...), Ask(...), ..., 3` back into values; anything else is refused."""
    call = ast.parse(f"f({text})", mode="eval").body
    assert isinstance(call, ast.Call)
    types: dict[str, Callable[..., Any]] = {"Knobs": Knobs, "Ask": Ask, "Draws": Draws}

    def value(node: ast.expr) -> Any:
        if isinstance(node, ast.Call) and isinstance(node.func, (ast.Name, ast.Attribute)):
            name = node.func.id if isinstance(node.func, ast.Name) else node.func.attr
            if name not in types:
                raise ValueError(f"unexpected call {ast.unparse(node)}")
            kwargs: dict[str, Any] = {}
            for kw in node.keywords:
                if kw.arg is None:  # `**mapping`: CrossHair never prints one
                    raise ValueError(f"unexpected ** in {ast.unparse(node)}")
                kwargs[kw.arg] = value(kw.value)
            return types[name](*map(value, node.args), **kwargs)
        if isinstance(node, ast.Tuple):  # Draws holds tuples of ints
            return tuple(value(e) for e in node.elts)
        v = ast.literal_eval(node)
        if not isinstance(v, (int, bool)):
            raise ValueError(f"unexpected argument {ast.unparse(node)}")
        return v

    named = {kw.arg: value(kw.value) for kw in call.keywords}  # CrossHair prints positionally; accept names too
    return tuple(value(a) for a in call.args) + tuple(named[p] for p in _PARAMS[len(call.args) :] if p in named)


# ---- the task, run in a worker ------------------------------------------------------------------------


SMT_RLIMIT = 20_000_000  # Z3 work units per query of a counted run (CrossHair's CROSSHAIR_SMT_RLIMIT)
_PLANTED: set[str] = set()  # in a worker: every mutant it has planted; the pool gives each mutant its own workers


@dataclass(frozen=True)
class Task:
    contract: str
    timeout: float
    mutant: str | None
    max_iterations: int | None = None


def _check_counted(argv: list[str], max_iterations: int) -> int:
    """`crosshair check` capped at `max_iterations` iterations: CrossHair's option, which its command line lacks."""
    from crosshair import statespace
    from crosshair.main import check, command_line_parser
    from crosshair.options import option_set_from_dict
    from crosshair.pure_importer import prefer_pure_python_imports

    args = command_line_parser().parse_args(argv)
    options = option_set_from_dict(args.__dict__)
    options.max_iterations = max_iterations
    # CrossHair reads CROSSHAIR_SMT_RLIMIT from the environment once, at its import, into this global, which each
    # new StateSpace reads. Set per check, it needs no worker of its own: one worker may run timed and counted
    # checks alike, and gets its own value back for the next task.
    was = statespace.CROSSHAIR_SMT_RLIMIT
    statespace.CROSSHAIR_SMT_RLIMIT = SMT_RLIMIT
    try:
        with prefer_pure_python_imports():
            return check(args, options, sys.stdout, sys.stderr)
    finally:
        statespace.CROSSHAIR_SMT_RLIMIT = was


def _planted(mutant: str | None) -> contextlib.AbstractContextManager[None]:
    from ...mutants import BY_NAME, applied

    if _PLANTED - {mutant}:
        raise RuntimeError(f"this worker planted {', '.join(sorted(_PLANTED))}; it cannot run a task with {mutant}")
    if mutant is None:
        return contextlib.nullcontext()
    _PLANTED.add(mutant)
    return applied(BY_NAME[mutant])


def _run_crosshair(
    contract: str, timeout: float, mutant: str | None, max_iterations: int | None = None
) -> dict[str, Any]:
    from crosshair.main import unwalled_main

    from . import contracts

    out = io.StringIO()
    argv = ["check", f"{MODULE}.{contract}", "--report_all", "--per_condition_timeout", str(timeout)]
    contracts.SCENARIOS_RUN = 0  # a per-process count, and this process runs many contracts
    with _planted(mutant):
        t0, c0 = time.perf_counter(), time.process_time()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            rc = unwalled_main(argv) if max_iterations is None else _check_counted(argv, max_iterations)
        seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {
        "rc": rc,
        "seconds": seconds,
        "cpu_seconds": cpu,
        "lines": out.getvalue().splitlines(),
        "scenarios": contracts.SCENARIOS_RUN,
        "pid": os.getpid(),
    }


def replay_counterexample(contract: str, args: str, mutant: str | None) -> dict[str, Any]:
    from .contracts import explain

    values = parse_args(args)
    with _planted(mutant):
        return asdict(explain(contract, *values))


def run_task(task: Task) -> dict[str, Any]:
    """CrossHair on one contract and, if it reports a counterexample, the replay (a dict, or why it failed)."""
    got = _run_crosshair(task.contract, task.timeout, task.mutant, task.max_iterations)
    verdict, _, args = classify(got["lines"], task.contract)
    if verdict == CX:
        try:
            got["replay"] = replay_counterexample(task.contract, args, task.mutant)
        except Exception as e:  # an unparsable argument, or a replay that crashes outside the contract
            got["replay"] = f"{type(e).__name__}: {e}"
    return got


# ---- the caller's side -----------------------------------------------------------------------------


def classify(lines: list[str], contract: str) -> tuple[str, str, str]:
    """CrossHair's output for one contract as (verdict before replay, its message, the counterexample's args)."""
    parsed = [m.groupdict() for m in map(_LINE.match, lines) if m]
    for p in parsed:
        if p["kind"] == "error" and f"when calling {contract}(" in p["msg"]:
            return CX, p["msg"], call_args(p["msg"], contract)
    for p in parsed:
        if p["msg"].startswith("Confirmed over all paths"):
            return NO_CX, p["msg"], ""
    other = [p["msg"] for p in parsed if not p["msg"].startswith("Not confirmed")]
    return UNKNOWN, "; ".join(other) or "time ran out before every path was explored", ""


def wall_limit(task: Task) -> float:
    """The CPU budget is CrossHair's; this only catches a hung worker, so it is generous (a loaded machine)."""
    return 3 * task.timeout + 240


def outcome(task: Task, got: dict[str, Any] | Failure) -> ContractResult:
    """A worker's answer (or its failure) as the contract's verdict."""
    check = CONTRACTS[task.contract]
    if isinstance(got, Failure):  # never a pass: the contract was not checked
        return ContractResult(task.contract, check, task.mutant, ERROR, 0.0, 0.0, 0, got.why)
    base = dict(
        contract=task.contract,
        check=check,
        mutant=task.mutant,
        seconds=round(got["seconds"], 2),
        cpu_seconds=round(got["cpu_seconds"], 2),
        scenarios=got["scenarios"],
    )
    verdict, message, args = classify(got["lines"], task.contract)
    if verdict != CX:
        return ContractResult(**base, verdict=verdict, message=message)
    replay = got.get("replay")
    if not isinstance(replay, dict):
        return ContractResult(**base, verdict=UNCONFIRMED, message=f"{message} (replay failed: {replay})", args=args)
    return ContractResult(
        **base, verdict=UNCONFIRMED if replay["holds"] else CX, message=message, args=args, replay=replay
    )


def run_contracts(
    names: Iterable[str] | None = None,
    timeout: float = 30.0,
    mutant: str | None = None,
    jobs: int = 1,
    on_done: Callable[[ContractResult], None] | None = None,
    max_iterations: int | None = None,
) -> list[ContractResult]:
    """Every named contract (default: all), in at most `jobs` workers; results in catalogue order."""
    names = check_names(names)
    check_mutant(mutant)
    tasks = [Task(n, timeout, mutant, max_iterations) for n in names]

    def done(i: int, got: dict[str, Any] | Failure) -> None:
        if on_done:
            on_done(outcome(tasks[i], got))

    got = run_in_workers(run_task, tasks, jobs, wall_limit, key=lambda t: t.mutant, on_done=done)
    return [outcome(t, g) for t, g in zip(tasks, got)]


def run_contract(
    contract: str, timeout: float = 30.0, mutant: str | None = None, max_iterations: int | None = None
) -> ContractResult:
    """One `crosshair check` on one contract, in a worker of its own, its output classified, its counterexample replayed."""
    return run_contracts([contract], timeout, mutant, 1, max_iterations=max_iterations)[0]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m schedspec.proofs.crosshair.runner",
        description="crosshair check on one contract, a mutant applied, in this process (what a worker runs)",
    )
    ap.add_argument("contract", choices=list(CONTRACTS))
    ap.add_argument("--timeout", type=float, default=30.0, help="CrossHair's per-condition timeout, CPU seconds")
    ap.add_argument("--mutant", help="a mutant name (schedspec.mutants), applied while CrossHair runs")
    ap.add_argument("--replay", metavar="ARGS", help="replay these arguments concretely instead of running CrossHair")
    ap.add_argument("--max-iterations", type=int, help="CrossHair's iteration cap (the timeout is then a safety cap)")
    a = ap.parse_args(argv)
    check_mutant(a.mutant)
    task = Task(a.contract, a.timeout, a.mutant, a.max_iterations)
    result = replay_counterexample(a.contract, a.replay, a.mutant) if a.replay is not None else run_task(task)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
