"""Worker processes that survive the work: a task that kills its worker costs that task, not the run.

`multiprocessing.Pool` loses a task whose worker dies (an engine calling
`os._exit`, the kernel's OOM killer) and then waits for it forever. Here a
`ProcessPoolExecutor` reports the death as `BrokenProcessPool`, but for
every task in flight at once, so it cannot say which one did it. So the
tasks in flight when a pool broke are re-run one at a time, each in a pool
of its own: the one that breaks its own pool is the culprit, and `lost`
turns it into a result (an `error`). The rest go on in a fresh pool.

Results come back in plan order, whatever order the workers finish in, so
reports and certificates do not depend on `--jobs`. `on_done` sees each
result as it arrives, for progress. `stop()` is asked before each new task
is handed out; once it says yes, the remaining tasks become `skipped(task)`
without running (a run whose engine errors every time should not spend
hours proving it).

An interrupt (^C, or any exception in the parent) kills the workers at
once rather than leaving the pool's `shutdown(wait=True)` to wait for the
workloads they are running, which an engine that hangs never ends. Workers
ignore SIGINT and die with their parent (`lifeline.py`), so a ^C to the
whole process group is handled once, by the parent, and nothing outlives it.
"""

from __future__ import annotations

import multiprocessing
import os
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import TypeVar

from ..engines.lifeline import worker_init

T = TypeVar("T")
R = TypeVar("R")


def run_all(
    fn: Callable[[T], R],
    tasks: Sequence[T],
    jobs: int,
    lost: Callable[[T], R],
    on_done: Callable[[R], None] = lambda r: None,
    stop: Callable[[], bool] = lambda: False,
    skipped: Callable[[T], R] | None = None,
) -> list[R]:
    results: dict[int, R] = {}

    def finish(i: int, r: R) -> None:
        results[i] = r
        on_done(r)

    todo = deque(range(len(tasks)))
    if jobs <= 1:
        while todo and not stop():
            i = todo.popleft()
            finish(i, fn(tasks[i]))
    else:
        ctx = multiprocessing.get_context("spawn")  # a fresh interpreter per worker: no inherited engine state
        while todo and not stop():
            suspects = _run_pool(fn, tasks, todo, jobs, ctx, finish, stop)
            for i in suspects:  # alone, each in its own pool: whoever breaks it is the one
                if _run_pool(fn, tasks, deque([i]), 1, ctx, finish, lambda: False):
                    finish(i, lost(tasks[i]))
    for i in todo:
        finish(i, skipped(tasks[i]) if skipped else lost(tasks[i]))
    return [results[i] for i in range(len(tasks))]


def _run_pool(
    fn: Callable[[T], R],
    tasks: Sequence[T],
    todo: deque[int],
    jobs: int,
    ctx: multiprocessing.context.BaseContext,
    finish: Callable[[int, R], None],
    stop: Callable[[], bool],
) -> list[int]:
    """Run from `todo` until it is empty, `stop()`, or the pool breaks; return the tasks in flight at the break."""
    in_flight: dict[Future[R], int] = {}
    before = set(multiprocessing.active_children())
    pool = ProcessPoolExecutor(jobs, mp_context=ctx, initializer=worker_init, initargs=(os.getpid(),))
    try:
        while todo or in_flight:
            while todo and len(in_flight) < jobs and not stop():  # no queue behind the workers: a break loses little
                i = todo.popleft()
                in_flight[pool.submit(fn, tasks[i])] = i
            if not in_flight:
                break
            done, _ = wait(in_flight, return_when=FIRST_COMPLETED)
            for f in done:
                i = in_flight.pop(f)
                try:
                    finish(i, f.result())
                except BrokenProcessPool:
                    pool.shutdown(wait=True)
                    return sorted([i, *in_flight.values()])
    except BaseException:
        _kill_workers(pool, before)
        raise
    pool.shutdown(wait=True)
    return []


def _kill_workers(pool: ProcessPoolExecutor, before: set[multiprocessing.process.BaseProcess]) -> None:
    """End the pool now: its workers are the children this process started since the pool was made."""
    pool.shutdown(wait=False, cancel_futures=True)
    workers = [p for p in multiprocessing.active_children() if p not in before]
    for p in workers:
        p.kill()
    for p in workers:
        p.join(timeout=5)
