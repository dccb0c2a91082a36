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

The three features (prefix caching, spec decode, async scheduling), each counted only where the records show it for sure:

* `prefix_hit`: an admission started from cached blocks (its
  `NewRequestData.num_computed_tokens > 0`); `prefix_self_hit`: the
  admission was a resumed request's, which may hit its own earlier blocks.
* `spec_padding`: a new or resumed admission was scheduled with placeholder
  drafts (1 + k tokens for a decode-like admission, T40).
* `spec_rejection`: a request's output accepted fewer drafts than were scheduled.
* `spec_drafts_trimmed`: a request was scheduled fewer of its proposed
  drafts than the drafter proposed (budget, threshold or `max_model_len`, D4).
* `stale_output`: under async scheduling, an absorbed output named a request
  that was preempted after that output was scheduled (§6).

These are totals. The coverage map (`cell_coverage.py`, events detected by
`events.py`, which reuses `stop_kind` and `FeatureTracker` from here) says
in which mode each pass-level event happened, and which never did.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from ...spec.request import RequestStatus
from ...spec.trace import StepRecord
from ...spec.workload import Workload

BEHAVIOURS = (
    "preemption",
    "chunked_prefill",
    "budget_exhausted",
    "head_of_line_blocking",
    "stop_eos",
    "stop_token",
    "stop_max_tokens",
    "stop_max_model_len",
    "abort",
    "prefix_hit",
    "prefix_self_hit",
    "spec_padding",
    "spec_rejection",
    "spec_drafts_trimmed",
    "stale_output",
)


def behaviours_seen(workload: Workload, records: Iterable[StepRecord]) -> Counter[str]:
    cfg = workload.config
    reqs = {r.request_id: r.request for r in workload.requests}
    seen: Counter[str] = Counter()
    feature = FeatureTracker()
    for rec in records:
        seen.update(feature.observe(rec))
        out = rec.output
        if out.preempted_req_ids:
            seen["preemption"] += 1
        if any(tokens == () for tokens in rec.model_output.sampled_token_ids.values()):
            seen["chunked_prefill"] += 1
        total = out.total_num_scheduled_tokens
        if total == cfg.token_budget:
            seen["budget_exhausted"] += 1
        if (
            rec.state.waiting
            and not out.preempted_req_ids
            and total < cfg.token_budget
            and len(rec.state.running) < cfg.max_num_active_reqs
        ):
            seen["head_of_line_blocking"] += 1
        for rid, f in rec.finished.items():
            seen[stop_kind(reqs[rid], f.status, f.output_token_ids, cfg.max_model_len)] += 1
    return seen


def stop_kind(
    request, status: RequestStatus, outputs: tuple[int, ...], max_model_len: int, pooling: bool = False
) -> str:
    if status == RequestStatus.FINISHED_ABORTED:
        return "abort"
    if pooling:  # a pooling model's request ends on its pooled output, with no token
        return "pooled"
    if status == RequestStatus.FINISHED_STOPPED:
        return "stop_eos" if outputs and outputs[-1] == request.effective_eos_token_id else "stop_token"
    if request.num_prompt_tokens + len(outputs) >= max_model_len:
        return "stop_max_model_len"
    return "stop_max_tokens"


class FeatureTracker:
    """The counters of the three features; some need earlier records (proposed drafts, outputs still in flight)."""

    def __init__(self) -> None:
        self.proposed: dict[str, int] = {}  # drafts proposed after the last step, per request
        self.outputs: dict[int, frozenset[str]] = {}  # scheduled step -> the requests it scheduled
        self.preempted_at: dict[str, list[int]] = {}

    def observe(self, rec: StepRecord) -> Counter[str]:
        seen: Counter[str] = Counter()
        out, spec = rec.output, rec.output.scheduled_spec_decode_tokens
        for n in out.scheduled_new_reqs:
            if n.num_computed_tokens > 0:
                seen["prefix_hit"] += 1
                seen["prefix_self_hit"] += n.resumed
            if n.req_id in spec:
                seen["spec_padding"] += 1
        for rid, drafts in spec.items():
            sampled = rec.model_output.sampled_token_ids.get(rid, ())
            if drafts and sampled and len(sampled) < len(drafts) + 1:
                seen["spec_rejection"] += 1
        for rid in out.num_scheduled_tokens:
            proposed = self.proposed.pop(rid, 0)
            if len(spec.get(rid, ())) < proposed:
                seen["spec_drafts_trimmed"] += 1
        for rid in out.preempted_req_ids:
            self.proposed.pop(rid, None)  # preemption forgets drafts
            self.preempted_at.setdefault(rid, []).append(rec.step)
        self.proposed.update({rid: len(d) for rid, d in rec.draft_token_ids.items()})
        if rec.scheduled:
            self.outputs[rec.step] = frozenset(out.num_scheduled_tokens)
        u = rec.updated_step
        if u is not None and u != rec.step:  # async: an older step's output was absorbed
            absorbed = self.outputs.pop(u, frozenset())
            if any(u < s <= rec.step for rid in absorbed for s in self.preempted_at.get(rid, ())):
                seen["stale_output"] += 1
        return seen
