"""`update_from_output`, request by request: who stops, at which token, as what, and the blocks it leaves.

vllm/v1/core/sched/scheduler.py:Scheduler.update_from_output. The absorbed
step's output is taken request by request, in `num_scheduled_tokens` order.
A request that finished or was aborted meanwhile is passed over, one
aborted after the model ran (`StepRecord.aborted_mid_step`) too. Otherwise
its returned tokens are appended one at a time, and `check_stop`'s verdict
(`spec.rules.stop_kind`: EOS, then stop tokens, then the length caps) is
asked after each: the first verdict that is not "not stopped" finishes the
request with that status, and the tokens after it are trimmed
(`_update_request_with_output`). A request no verdict stops stays live with
every returned token; no request finishes any other way but by an abort
(`stop-exact`). A pooling model samples nothing: a request finishes
FINISHED_STOPPED exactly in the update that brings its pooled output back,
stale or not (`pooling-exact`). Before that, the drafts the output rejected
(`num_rejected_drafts`) roll C back, unless the output is stale (the
request was preempted after that step was scheduled) or C is 0; so every
live request ends the step with C where schedule() left it less that
rollback, and T grown by every returned token (`rollback-exact`).

Under async scheduling or spec decode the update then registers the
processed full blocks in the prefix cache (`C - in_flight` tokens, after
the rollback of rejected drafts and the trim), before a stopped request's
blocks are freed (tail first): the shadow takes both, so that later hits
and block ids are judged against the cache as vLLM leaves it.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..request import RequestStatus
from ..rules import NOT_STOPPED, STOPPED, caches_on_update, num_rejected_drafts, stop_kind
from ..trace import FinishedRequest, StepRecord
from .step_walk import POOLING, ROLLBACK, STOP, StepWalk

_STATUS = {STOPPED: RequestStatus.FINISHED_STOPPED}


def _verdict(w: StepWalk, rid: str, had: int, returned: tuple[int, ...]) -> tuple[int, int]:
    """(the 1-based index of the returned token check_stop stops at, or 0; the verdict there)."""
    q = w.requests[rid]
    prompt, L = q.num_prompt_tokens, w.config.max_model_len
    for j, t in enumerate(returned, 1):
        kind: int = stop_kind(
            t == q.effective_eos_token_id,
            t in q.stop_token_ids,
            prompt + had + j,
            had + j,
            L,
            q.max_tokens,
            q.min_tokens,
            w.config.vllm_version,
        )
        if kind != NOT_STOPPED:
            return j, kind
    return 0, NOT_STOPPED


def walk_update(
    w: StepWalk, absorbed: StepRecord | None, in_flight: Mapping[str, int], last_preempted: Mapping[str, int]
) -> None:
    c, rec, rows = w.config, w.rec, w.rows
    gone = set(rec.aborted) | set(rec.aborted_mid_step)
    finished = {rid: f for rid, f in rec.finished.items() if rid not in gone}
    seen: set[str] = set()
    running_after = {r.request_id for r in rows.values() if (r.pre_running and not r.preempted) or r.admitted}
    # C as schedule() leaves it (0 after a preemption, the hit on admission, plus the grant), and T before the update.
    computed = {
        r.request_id: (0 if r.preempted else r.num_hit_tokens if r.admitted else r.pre_num_computed_tokens)
        + r.num_scheduled
        for r in rows.values()
        if r.pre_live
    }
    tokens = {rid: rows[rid].pre_num_tokens for rid in computed}
    for rid in absorbed.output.num_scheduled_tokens if absorbed is not None else ():
        r = rows.get(rid)
        if absorbed is None or r is None or not r.pre_live or rid in rec.aborted_mid_step:
            continue  # finished or aborted before this update (after the model ran, too: `aborted_mid_step`)
        seen.add(rid)
        stale = absorbed.step < last_preempted.get(rid, -1)
        if stale and rid in w.dropping:
            continue  # a cache reset's victim: its stale output is dropped whole (Scheduler.update_from_output)
        returned = absorbed.model_output.sampled_token_ids.get(rid, ())
        had = r.pre_num_tokens - r.num_prompt_tokens
        at, kind = _verdict(w, rid, had, returned)
        got = finished.get(rid)
        if c.runner == "pooling":
            _pooled(w, rid, absorbed, got)
        elif at == 0 and got is not None:
            w.flag(
                STOP, f"{rid} finishes as {got.status.name}, but check_stop stops none of its {len(returned)} tokens"
            )
        elif at and got is None:
            w.flag(STOP, f"check_stop stops {rid} at its output {had + at} ({_reason(kind)}), yet it stays live")
        elif at and got is not None:
            status = _STATUS.get(kind, RequestStatus.FINISHED_LENGTH_CAPPED)
            if got.status != status:
                w.flag(
                    STOP, f"{rid} finishes as {got.status.name} at output {had + at}, but check_stop says {status.name}"
                )
            elif len(got.output_token_ids) != had + at:
                w.flag(
                    STOP,
                    f"{rid} finishes with {len(got.output_token_ids)} outputs, but check_stop stops it at output "
                    f"{had + at}: the tokens after it are trimmed",
                )
        # Rejected drafts roll C back, unless the output is stale (the request was preempted since) or C is 0.
        drafts = absorbed.output.scheduled_spec_decode_tokens.get(rid, ())
        if drafts and returned and not stale and computed[rid] > 0:
            computed[rid] -= num_rejected_drafts(len(drafts), len(returned))
        tokens[rid] += len(returned)
        # The shadow follows the engine: what it kept, and the blocks it registers and frees.
        kept = len(got.output_token_ids) - had if got is not None else len(returned)
        w.shadow.append_outputs(rid, returned[: max(kept, 0)])
        if (
            returned
            and not stale
            and rid in running_after
            and caches_on_update(c.async_scheduling, c.num_speculative_tokens, c.vllm_version)
        ):
            trimmed = len(returned) - max(kept, 0)
            w.shadow.register(rid, computed[rid] - trimmed - in_flight.get(rid, 0))
        if got is not None:
            w.shadow.forget(rid)
    for r in rows.values():
        rid = r.request_id
        if r.post_live and rid in computed and rid not in finished:
            if r.post_num_computed_tokens != computed[rid]:
                w.flag(
                    ROLLBACK,
                    f"{rid} ends the step with num_computed_tokens {r.post_num_computed_tokens}, but its grant and "
                    f"the update's rollback of rejected drafts leave {computed[rid]}",
                )
            elif r.post_num_tokens != tokens[rid]:
                w.flag(
                    ROLLBACK,
                    f"{rid} ends the step with {r.post_num_tokens} tokens, but the update leaves {tokens[rid]}",
                )
    for rid, f in sorted(finished.items()):
        if rid not in seen and f.status != RequestStatus.FINISHED_ERROR:  # a failed grammar: grammar-wait-exact
            w.flag(STOP, f"{rid} finishes as {f.status.name} without an update that returned it tokens")
            w.shadow.forget(rid)


def _pooled(w: StepWalk, rid: str, absorbed: StepRecord, got: FinishedRequest | None) -> None:
    """A pooling model's update: a request whose pooled output is back finishes FINISHED_STOPPED with no outputs,
    stale or not, and no other update finishes it (vllm/v1/core/sched/scheduler.py:Scheduler.update_from_output
    (2416-2419))."""
    pooled = rid in absorbed.model_output.pooler_output
    if pooled and got is None:
        w.flag(POOLING, f"{rid}'s pooled output (step {absorbed.step}) is back, yet it stays live")
    elif pooled and got is not None and (got.status != RequestStatus.FINISHED_STOPPED or got.output_token_ids):
        w.flag(
            POOLING,
            f"{rid} finishes as {got.status.name} with {len(got.output_token_ids)} outputs on its pooled output; a "
            "pooling request finishes FINISHED_STOPPED with none",
        )
    elif not pooled and got is not None:
        w.flag(
            POOLING,
            f"{rid} finishes as {got.status.name} in an update with no pooled output for it (step {absorbed.step}'s "
            "chunk did not end at its prompt's end)",
        )


def _reason(kind: int) -> str:
    return "EOS or a stop token" if kind == STOPPED else "a length cap"
