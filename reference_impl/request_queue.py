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

from ..spec.rules import heap_key
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


RequestQueue = FCFSRequestQueue | PriorityRequestQueue


def create_request_queue(policy: str, requests: Iterable[LiveRequest] = ()) -> RequestQueue:
    return PriorityRequestQueue(requests) if policy == "priority" else FCFSRequestQueue(requests)
