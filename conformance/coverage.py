"""Which behaviours a campaign actually exercised, counted on the reference's steps.

A certificate that says "1000 workloads agree" means little if none of them
preempted. These counters say how many compared steps showed each step behaviour,
and how many requests ended each way, so a reader can see what the
agreement covers:

* `preemption`: the step preempted a running request.
* `chunked_prefill`: some request was scheduled a prompt chunk that did not finish its prefill.
* `budget_exhausted`: the step used the whole token budget.
* `head_of_line_blocking`: requests still waited although budget and a
  sequence slot were left and nothing was preempted, so admission stopped at
  the head of the queue (blocks, the full-sequence gate, or chunking off).
* `stop_eos`, `stop_token`, `stop_max_tokens`, `stop_max_model_len`, `abort`: how requests ended.
"""

from __future__ import annotations

from collections import Counter
from typing import Iterable

from ..spec.request import RequestStatus
from ..spec.trace import StepRecord
from ..spec.workload import Workload

BEHAVIOURS = ("preemption", "chunked_prefill", "budget_exhausted", "head_of_line_blocking",
              "stop_eos", "stop_token", "stop_max_tokens", "stop_max_model_len", "abort")


def coverage(workload: Workload, records: Iterable[StepRecord]) -> Counter[str]:
    cfg = workload.config
    reqs = {r.request_id: r.request for r in workload.requests}
    seen: Counter[str] = Counter()
    for rec in records:
        out = rec.output
        if out.preempted_req_ids:
            seen["preemption"] += 1
        if any(tokens == () for tokens in rec.model_output.sampled_token_ids.values()):
            seen["chunked_prefill"] += 1
        total = out.total_num_scheduled_tokens
        if total == cfg.token_budget:
            seen["budget_exhausted"] += 1
        if (rec.state.waiting and not out.preempted_req_ids and total < cfg.token_budget
                and len(rec.state.running) < cfg.max_num_active_reqs):
            seen["head_of_line_blocking"] += 1
        for rid, f in rec.finished.items():
            seen[_stop_kind(reqs[rid], f.status, f.output_token_ids, cfg.max_model_len)] += 1
    return seen


def _stop_kind(request, status: RequestStatus, outputs: tuple[int, ...], max_model_len: int) -> str:
    if status == RequestStatus.FINISHED_ABORTED:
        return "abort"
    if status == RequestStatus.FINISHED_STOPPED:
        return "stop_eos" if outputs and outputs[-1] == request.effective_eos_token_id else "stop_token"
    if request.num_prompt_tokens + len(outputs) >= max_model_len:
        return "stop_max_model_len"
    return "stop_max_tokens"
