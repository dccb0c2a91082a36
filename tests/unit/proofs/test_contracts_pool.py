"""The CrossHair runner's workers: reused across contracts, kept apart by mutant, and a failure is an `error`.

The pool tasks below are this module's own functions: the workers are
spawned with the caller's `sys.path`, so they import this module by name.
The runner's tests use small iteration counts, so each takes a few seconds.
"""

import multiprocessing
import os
import time

from schedspec.proofs.crosshair import runner
from schedspec.proofs.crosshair.pool import Failure, run_in_workers
from schedspec.proofs.crosshair.runner import CX, ERROR, NO_CX, UNKNOWN, Task


def _act(item: str) -> int:
    """A pool task: what `item` says, then the worker's pid."""
    if item == "hang":
        time.sleep(600)
    if item == "crash":
        os._exit(7)
    if item == "raise":
        raise ValueError("planted")
    return os.getpid()


def test_a_worker_runs_many_tasks_in_order():
    done: list[int] = []
    got = run_in_workers(_act, ["a", "b", "c"], 1, lambda _: 60, on_done=lambda i, _: done.append(i))
    assert len(set(got)) == 1 and got[0] != os.getpid() and done == [0, 1, 2]


def test_a_failed_worker_fails_its_task_only_and_is_replaced():
    t0 = time.perf_counter()
    got = run_in_workers(
        _act, ["a", "hang", "b", "crash", "c", "raise", "d"], 1, lambda item: 2 if item == "hang" else 60
    )
    assert time.perf_counter() - t0 < 60  # the hung worker was killed at its limit, not waited out
    a, hang, b, crash, c, raised, d = got
    assert hang == Failure("worker exited: killed after 2 s of wall-clock time")
    assert crash == Failure("worker exited with status 7")
    assert raised == Failure("worker exited after ValueError: planted")
    assert all(f.why.startswith("worker exited") for f in (hang, crash, raised))  # `mutants` reads: checker error
    assert all(isinstance(x, int) for x in (a, b, c, d))
    assert len({a, b, c, d}) == 4  # each failure cost its worker: the next task ran in a fresh one


def test_a_task_of_another_key_gets_a_fresh_worker():
    got = run_in_workers(_act, ["x1", "x2", "y1", "x3"], 1, lambda _: 60, key=lambda item: item[0])
    assert got[0] == got[1] and len({got[1], got[2], got[3]}) == 3


def test_two_contracts_share_one_worker():
    tasks = [Task("check_runs", 30, None, 5), Task("check_one_place", 30, None, 5)]
    got = run_in_workers(runner.run_task, tasks, 1, runner.wall_limit)
    assert not any(isinstance(g, Failure) for g in got), got
    assert got[0]["pid"] == got[1]["pid"]  # one interpreter: the project, CrossHair and Z3 were imported once
    assert got[1]["scenarios"] <= 5  # the count restarts for each contract


def test_a_mutant_is_not_in_effect_for_the_next_contract():
    z14 = Task("check_block_conservation", 30, "Z14-double-free", 20)
    clean = Task("check_block_conservation", 30, None, 20)
    # Keyed by mutant (as the runner does): the second contract runs in a fresh worker, on the pristine reference.
    first, second = run_in_workers(runner.run_task, [z14, clean], 1, runner.wall_limit, key=lambda t: t.mutant)
    assert runner.outcome(z14, first).verdict == CX and runner.outcome(clean, second).verdict in (UNKNOWN, NO_CX)
    assert first["pid"] != second["pid"]
    # Forced into one worker, the worker itself refuses: the contract is an error, never a verdict on a mutant.
    first, second = run_in_workers(runner.run_task, [z14, clean], 1, runner.wall_limit)
    assert runner.outcome(z14, first).verdict == CX
    assert isinstance(second, Failure) and "planted Z14-double-free" in second.why


def test_a_worker_killed_mid_contract_is_an_error_and_is_replaced():
    # The middle contract runs on time (30 CPU-s), its wall limit is 3 s: it is killed inside CrossHair.
    tasks = [Task("check_one_place", 30, None, 5), Task("check_runs", 30, None), Task("check_seqs_limit", 30, None, 5)]
    before, killed, after = run_in_workers(runner.run_task, tasks, 1, lambda t: 600 if t.max_iterations else 3)
    assert killed == Failure("worker exited: killed after 3 s of wall-clock time")
    assert runner.outcome(tasks[1], killed).verdict == ERROR
    assert before["pid"] != after["pid"] and after["scenarios"] == 5


def test_a_killed_worker_is_an_error_and_the_run_goes_on(monkeypatch):
    # check_runs gets far less wall-clock time than its worker needs: it is killed, the next contract still runs.
    monkeypatch.setattr(runner, "wall_limit", lambda t: 0.3 if t.contract == "check_runs" else 600)
    seen: list[str] = []
    results = runner.run_contracts(
        ["check_runs", "check_one_place"],
        timeout=30,
        jobs=1,
        max_iterations=5,
        on_done=lambda r: seen.append(r.verdict),
    )
    killed, ran = results
    assert (
        killed.verdict == ERROR and killed.message.startswith("worker exited: killed after") and killed.scenarios == 0
    )
    assert ran.verdict in (UNKNOWN, NO_CX) and ran.scenarios > 0
    assert seen == [ERROR, ran.verdict]


def _in_daemon(_: object) -> tuple[str, int]:
    r = runner.run_contract("check_block_conservation", 30, "Z14-double-free", max_iterations=20)
    return r.verdict, r.scenarios


def test_a_daemonic_caller_can_run_contracts():
    # `schedspec mutants` runs each CrossHair cell inside a daemonic `multiprocessing.Pool` worker, where a
    # `multiprocessing.Process` may not start: the runner's workers are plain subprocesses.
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        assert pool.map(_in_daemon, [None]) == [(CX, 1)]
