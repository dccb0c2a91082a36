"""The checks and progress lines that `contracts`, `prove`, `mutants` and `hunt` share.

So the long commands refuse the same inputs with the same words
(`check_seconds`, `check_jobs`) and report progress the same way
(`progress`: one line on stderr, which a CI log keeps). `worker_pool` is a
process pool, or, for `--jobs 1`, this process itself: no pool to start,
and a debugger still stops in the checker.
"""

from __future__ import annotations

import math
import multiprocessing
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from ..spec.errors import SpecError

if TYPE_CHECKING:
    pass


# Below 10 ms neither Z3 nor CrossHair does anything before the clock stops (prove's queries get 50 ms
# anyway), so a smaller value is a typo, not a request. Above 10^6 s (11 days) Z3's timeout, an unsigned
# 32-bit count of milliseconds, nears overflow. And 0 is refused, not passed on: Z3 reads it as no limit.
MIN_SECONDS, MAX_SECONDS = 0.01, 1e6


T = TypeVar("T")  # mypy takes a TypeVar only from an assignment of its own


R = TypeVar("R")


def check_seconds(option: str, value: float) -> None:
    """A time limit, finite and in range: `nan` compares False with everything and would pass a bare `> 0`."""
    if not (math.isfinite(value) and MIN_SECONDS <= value <= MAX_SECONDS):
        raise SpecError(option, value, f"must be a number of seconds from {MIN_SECONDS:g} to {MAX_SECONDS:.0f}")


def check_jobs(value: int) -> None:
    if value < 1:
        raise SpecError("--jobs", value, "must be >= 1")


class InThisProcess:
    """The pool's `imap_unordered`, run in this process: `--jobs 1` spawns nothing and keeps tracebacks local."""

    def __enter__(self) -> InThisProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def imap_unordered(self, fn: Callable[[T], R], items: Iterable[T], chunksize: int = 1) -> Iterator[R]:
        return map(fn, items)


def worker_pool(jobs: int) -> Any:
    """Where the work runs. Callers iterate `imap_unordered` (chunksize 1), not `map`: each result comes back as
    it lands, so progress lines are live, and the jobs still start in the order given."""
    return multiprocessing.get_context("spawn").Pool(jobs) if jobs > 1 else InThisProcess()


def progress(command: str, line: str) -> None:
    """One plain line on stderr, flushed: CI logs show it as it happens, with no bar to garble a file."""
    print(f"{command}: {line}", file=sys.stderr, flush=True)
