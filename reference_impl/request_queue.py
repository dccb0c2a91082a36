"""The waiting queue, FCFS or PRIORITY (`vllm/v1/core/sched/request_queue.py`).

FCFS is vLLM's deque. PRIORITY is vLLM's heap, kept here as a sorted list:
every observable use of a heap (peek, pop, iteration, removal) depends only
on its contents in `Request.__lt__` order (`spec.rules.heap_key`), and a
sorted list shows that order plainly. "Prepend" therefore means different things: the head of the deque,
or just another push into the heap (bug-zoo Z9 discusses the consequence).
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Iterable, Iterator

from ..spec.request import BLOCKED_STATUSES
from ..spec.rules import heap_key
from ..spec.versions import DEFAULT_RELEASE, holds
from .live_request import LiveRequest


def _heap_order(request: LiveRequest) -> tuple[int, float, str]:
    return heap_key(request.priority, request.arrival_time, request.request_id)


class FCFSRequestQueue:
    def __init__(self, requests: Iterable[LiveRequest] = ()) -> None:
        self._q: deque[LiveRequest] = deque(requests)

    def add_request(self, request: LiveRequest) -> None:
        self._q.append(request)

    def pop_request(self) -> LiveRequest:
        return self._q.popleft()

    def peek_request(self) -> LiveRequest:
        return self._q[0]

    def prepend_request(self, request: LiveRequest) -> None:
        self._q.appendleft(request)

    def prepend_requests(self, requests: Iterable[LiveRequest]) -> None:
        # deque.extendleft reverses; callers pass an already reversed deque (T38, Z5).
        self._q.extendleft(requests)

    def remove_requests(self, requests: Iterable[LiveRequest]) -> None:
        gone = {r.request_id for r in requests}
        self._q = deque(r for r in self._q if r.request_id not in gone)

    def __iter__(self) -> Iterator[LiveRequest]:
        return iter(self._q)

    def __len__(self) -> int:
        return len(self._q)


class PriorityRequestQueue:
    def __init__(self, requests: Iterable[LiveRequest] = ()) -> None:
        self._q: list[LiveRequest] = sorted(requests, key=_heap_order)

    def add_request(self, request: LiveRequest) -> None:
        bisect.insort(self._q, request, key=_heap_order)

    def pop_request(self) -> LiveRequest:
        return self._q.pop(0)

    def peek_request(self) -> LiveRequest:
        return self._q[0]

    def prepend_request(self, request: LiveRequest) -> None:
        self.add_request(request)  # "no concept of prepending" in a heap

    def prepend_requests(self, requests: Iterable[LiveRequest]) -> None:
        for request in requests:
            self.add_request(request)

    def remove_requests(self, requests: Iterable[LiveRequest]) -> None:
        gone = {r.request_id for r in requests}
        self._q = [r for r in self._q if r.request_id not in gone]

    def __iter__(self) -> Iterator[LiveRequest]:
        return iter(self._q)

    def __len__(self) -> int:
        return len(self._q)


class SkippedFirstQueue:
    """vLLM 0.28.0-0.30.0's two FCFS queues, seen as the one queue the waiting pass walks (`one-waiting-queue`).

    A request that arrives blocked (waiting for its grammar) joins `skipped_waiting`
    (vllm/v1/core/sched/scheduler.py:Scheduler._enqueue_waiting_request), and the pass's skipped requests are
    prepended there; FCFS serves that queue first (`_select_waiting_queue_for_scheduling`). A preempted request
    is prepended to `waiting`, so it lands behind them. Iteration is the pass's order: skipped, then waiting.
    Under PRIORITY the pass takes the smaller of the two heads, which is one heap's order, so there the two
    queues are one `PriorityRequestQueue`.
    """

    def __init__(self, requests: Iterable[LiveRequest] = (), num_skipped: int = 0) -> None:
        everything = list(requests)
        self.skipped: deque[LiveRequest] = deque(everything[:num_skipped])
        self.waiting: deque[LiveRequest] = deque(everything[num_skipped:])

    def add_request(self, request: LiveRequest) -> None:
        (self.skipped if request.status in BLOCKED_STATUSES else self.waiting).append(request)

    def _head_queue(self) -> deque[LiveRequest]:
        return self.skipped or self.waiting

    def pop_request(self) -> LiveRequest:
        return self._head_queue().popleft()

    def peek_request(self) -> LiveRequest:
        return self._head_queue()[0]

    def prepend_request(self, request: LiveRequest) -> None:
        self.waiting.appendleft(request)  # a preemption: the front of `waiting`, behind the skipped queue

    def prepend_requests(self, requests: Iterable[LiveRequest]) -> None:
        self.skipped.extendleft(requests)  # the pass's skipped requests, ahead of older skipped ones

    def remove_requests(self, requests: Iterable[LiveRequest]) -> None:
        gone = {r.request_id for r in requests}
        self.skipped = deque(r for r in self.skipped if r.request_id not in gone)
        self.waiting = deque(r for r in self.waiting if r.request_id not in gone)

    @property
    def num_skipped(self) -> int:
        return len(self.skipped)

    def __iter__(self) -> Iterator[LiveRequest]:
        yield from self.skipped
        yield from self.waiting

    def __len__(self) -> int:
        return len(self.skipped) + len(self.waiting)


RequestQueue = FCFSRequestQueue | PriorityRequestQueue | SkippedFirstQueue


def create_request_queue(
    policy: str, requests: Iterable[LiveRequest] = (), release: str = DEFAULT_RELEASE, num_skipped: int = 0
) -> RequestQueue:
    if policy == "priority":
        return PriorityRequestQueue(requests)
    if not holds("one-waiting-queue", release):
        return SkippedFirstQueue(requests, num_skipped)
    return FCFSRequestQueue(requests)
