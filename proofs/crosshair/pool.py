"""Long-lived worker processes: each imports once and runs many tasks, every task under a wall-clock limit.

Why workers live on: a fresh interpreter per CrossHair contract, and another
per replay, paid the import of the project, CrossHair and Z3 every time:
at 3 CPU-s a contract, about 0.4 CPU-s more each, an eighth of the run.

Why not `multiprocessing.Pool` or `ProcessPoolExecutor`: a task here may
hang (a Z3 query or a mutant that loops) or kill its interpreter (a crash in
Z3's C code), and the run must go on with that one task marked failed. The
`Pool` never returns the result of a task whose worker died, so its caller
would wait out the whole wall limit, and it cannot kill the one worker that
hangs; the executor, on any death, fails every pending task at once, so a
crash cannot be told apart from its bystanders, and Python 3.11's executor
cannot kill a hung worker either. Nor a `multiprocessing.Process` of our
own: it refuses to start inside a daemonic process, and `schedspec mutants`
runs each CrossHair cell in a worker of its own (daemonic) `Pool`.

So each of the `jobs` slots is a thread that owns one worker, a plain
`python -m schedspec.proofs.crosshair.pool` subprocess (nothing of the
caller's state is inherited but its `sys.path`, sent first), and a pair of
pipes to it, framed and pickled by `multiprocessing.connection`. The slot
sends a task and waits `wall_limit` seconds for the answer: on silence it
kills the worker, on EOF it reads the exit status; either way that task gets
a `Failure` and the slot starts a fresh worker for its next task.

`key` keeps workers apart: a worker only runs tasks of the key it started
with, and a task of another key gets a fresh worker. The CrossHair runner
keys by mutant, so a mutant planted in a worker can never be in effect for
a task planted with another mutant, or with none, whatever the planting's
own restore does.
"""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any, TypeVar

T = TypeVar("T")
R = TypeVar("R")

_CLOSE_S = 5.0  # how long a worker asked to stop may take before it is killed


@dataclass(frozen=True)
class Failure:
    """A task without a result, and why: its worker was killed, exited, or raised.

    Every `why` starts with "worker exited", the words `schedspec mutants` reads as a checker error (not a
    survival): the worker is gone in each case, and no search finished."""

    why: str


def _serve(tasks: Connection, results: Connection) -> None:
    """The worker's loop: the caller's `sys.path`, then one task at a time until told to stop (None) or EOF."""
    try:
        sys.path[:] = tasks.recv()  # so a task's function imports as it does in the caller
        while (task := tasks.recv()) is not None:  # the first task imports its module: once per worker
            fn, item = task
            try:
                result = fn(item)
            except BaseException as e:  # reported to the caller, never swallowed
                # Whatever the task left half-done (a planted mutant, CrossHair's tracing) is unknown: this worker ends.
                results.send((False, f"worker exited after {type(e).__name__}: {e}"))
                return
            results.send((True, result))
    except EOFError:  # the caller is gone
        return


class _Worker:
    def __init__(self, key: Hashable) -> None:
        self.key = key
        task_r, task_w = os.pipe()
        result_r, result_w = os.pipe()
        cmd = [sys.executable, "-m", __name__, str(task_r), str(result_w)]
        self.tasks, self.results = Connection(task_w, readable=False), Connection(result_r, writable=False)
        try:
            self.process = subprocess.Popen(cmd, pass_fds=(task_r, result_w), stdin=subprocess.DEVNULL)
        except BaseException:
            self.tasks.close()
            self.results.close()
            raise
        finally:  # only the worker holds its ends now, so its death reads here as EOF
            os.close(task_r)
            os.close(result_w)
        self.alive = True
        try:
            self.tasks.send(sys.path)
        except OSError:  # it died at its start: no process is left behind
            self.close(kill=True)
            raise

    def call(self, fn: Callable[[T], R], item: T, wall_limit: float) -> R | Failure:
        try:
            self.tasks.send((fn, item))
            if not self.results.poll(wall_limit):
                self.close(kill=True)
                return Failure(f"worker exited: killed after {wall_limit:g} s of wall-clock time")
            ok, value = self.results.recv()
        except (EOFError, OSError):
            self.close(kill=True, wait=_CLOSE_S)
            return Failure(f"worker exited with status {self.process.returncode}")
        if not ok:
            self.close()
            return Failure(value)
        return value

    def close(self, kill: bool = False, wait: float = 0.0) -> None:
        """Stop the worker: asked (None) unless `kill`; killed if it has not exited `wait` s (or _CLOSE_S) later."""
        if self.alive and not kill:
            try:
                self.tasks.send(None)
            except OSError:
                pass
            wait = _CLOSE_S
        try:
            self.process.wait(wait)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.tasks.close()
        self.results.close()
        self.alive = False


def run_in_workers(
    fn: Callable[[T], R],
    items: Iterable[T],
    jobs: int,
    wall_limit: Callable[[T], float],
    key: Callable[[T], Hashable] = lambda _: None,
    on_done: Callable[[int, R | Failure], None] | None = None,
) -> list[R | Failure]:
    """`fn` on every item in at most `jobs` workers, started in the order given; results in that order.

    `fn` must be picklable (a module-level function) and so must the items and results. `on_done(index,
    result)` is called from the slot threads as each task lands. The workers stop when the last task is done.
    """
    todo: queue.SimpleQueue[tuple[int, T]] = queue.SimpleQueue()
    count = 0
    for count, item in enumerate(items, 1):
        todo.put((count - 1, item))
    results: list[Any] = [None] * count

    stop = threading.Event()

    def slot() -> None:
        worker: _Worker | None = None
        try:
            while not stop.is_set():
                try:
                    i, item = todo.get_nowait()
                except queue.Empty:
                    return
                k = key(item)
                if worker is not None and (not worker.alive or worker.key != k):
                    worker.close()
                    worker = None
                try:
                    worker = worker or _Worker(k)
                    results[i] = worker.call(fn, item, wall_limit(item))
                except Exception as e:  # a worker that cannot start fails its task, not the run
                    results[i] = Failure(f"worker exited: it could not take the task: {type(e).__name__}: {e}")
                    if worker is not None:
                        worker.close(kill=True)
                if on_done:
                    on_done(i, results[i])
        finally:
            if worker is not None:
                worker.close()

    threads = [threading.Thread(target=slot, name=f"worker-slot-{n}") for n in range(min(max(1, jobs), count))]
    for t in threads:
        t.start()
    try:
        for t in threads:
            t.join()
    except BaseException:
        # Ctrl-C: the running tasks end with their workers (they got the signal too); no new task starts.
        stop.set()
        raise
    return results


if __name__ == "__main__":  # a worker: `python -m schedspec.proofs.crosshair.pool TASK_FD RESULT_FD`
    _serve(Connection(int(sys.argv[1]), writable=False), Connection(int(sys.argv[2]), readable=False))
