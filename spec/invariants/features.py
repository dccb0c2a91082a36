"""The predicates of the three features: prefix caching, speculative decoding and async scheduling.

Written like the rest of the catalogue, over a `StepView` of ints or Z3
terms, and listed in `catalogue.INVARIANTS`. Two of them read concrete-only
facts (`refs_consistent`, `cache_consistent`), as block-conservation reads
block ids: a backend that abstracts ids leaves them True.

`base` below is where a scheduled request's tokens start: its prefix hit
when it is admitted in this step (a waiting request holds no KV, so its C
before the step is 0 and the hit becomes its C), else its C before the step.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..arith import and_, fdiv, implies, ite, min_, not_, or_
from .views import Row, StepView


def _all(xs: Sequence[Any]) -> Any:
    return and_(*xs) if xs else True


def _base(r: Row) -> Any:
    return ite(r.admitted, r.num_hit_tokens, r.pre_num_computed_tokens)


def placeholder_counters(v: StepView) -> Any:
    # I-12 and I-13: only AsyncScheduler grows P, and only an engine with a step in flight (a batch queue: async
    # scheduling or pipeline parallel) has tokens in flight or stale output; without one, the engine absorbs
    # every step before the next schedule().
    batch_queue = or_(v.async_scheduling, v.pipeline_parallel_size > 1)

    def ok(r: Row) -> Any:
        counters = (r.post_num_output_placeholders, r.post_num_in_flight_tokens, r.post_num_stale_output_tokens)
        return and_(
            *[c >= 0 for c in counters],
            implies(not_(v.async_scheduling), r.post_num_output_placeholders == 0),
            implies(not_(batch_queue), and_(*[c == 0 for c in counters])),
        )

    return _all([implies(r.post_live, ok(r)) for r in v.rows])


def computed_behind_known_tokens(v: StepView) -> Any:
    # A rejection takes back C (and P) by the rejected drafts, a stop takes back the trimmed tokens, so a
    # running request has computed at most all but its last known token: T + P - C >= 1 (I-14, I-25).
    # Under pipeline parallel without async, a request whose last prompt chunk is in flight has computed all
    # its tokens until that chunk's output is back (the synchronous scheduler has no placeholders); so has a
    # pooling model's request whose whole prompt is in flight (it samples nothing: s = 0, no placeholder).
    s = v.num_sampled_tokens_per_step
    return _all(
        [
            implies(
                and_(r.post_running, or_(v.async_scheduling, r.post_num_in_flight_tokens == 0)),
                r.post_num_computed_tokens + s <= r.post_num_tokens + r.post_num_output_placeholders,
            )
            for r in v.rows
        ]
    )


def drafts_within_held(v: StepView) -> Any:
    # I-19: the drafts scheduled are what the clamps left of the drafts held (or, for a padded admission,
    # k placeholders), and only on top of everything else the request is owed, so never in a prefill chunk.
    k = v.num_speculative_tokens

    def ok(r: Row) -> Any:
        d = r.num_scheduled_spec
        return and_(
            d >= 0,
            d <= ite(r.admitted, k, r.pre_num_spec_tokens),
            implies(d > 0, _base(r) + r.num_scheduled == r.pre_num_tokens + r.pre_num_output_placeholders + d),
            implies(r.post_live, r.post_num_spec_tokens <= k),
        )

    return _all([ok(r) for r in v.rows])


def no_decode_past_max_tokens(v: StepView) -> Any:
    # MAXTOK in its scheduling form (bug zoo Z2): a step that samples for a request samples output number
    # T - prompt + 1, one further per step in flight; at most one step is in flight at schedule() (batch
    # queue of 2), and only its one sampled token is guaranteed, so min(P, 1) of it counts
    # (vllm/v1/core/sched/scheduler.py:Scheduler.schedule (800-814)).
    def samples(r: Row) -> Any:
        return and_(r.scheduled, _base(r) + r.num_scheduled >= r.pre_num_tokens + r.pre_num_output_placeholders)

    return _all(
        [
            implies(
                samples(r),
                r.pre_num_tokens + min_(r.pre_num_output_placeholders, 1) - r.num_prompt_tokens < r.max_tokens,
            )
            for r in v.rows
        ]
    )


def refcounts_match_tables(v: StepView) -> Any:
    return v.refs_consistent


def prefix_hit_below_last_token(v: StepView) -> Any:
    # I-16 (bug zoo Z7): the hit is whole blocks and stops short of the last token, which must run again to
    # produce logits; without prefix caching, or for a request that skips reading the cache, there is none.
    def ok(r: Row) -> Any:
        h = r.num_hit_tokens
        return and_(
            h >= 0,
            h < r.pre_num_tokens,
            h == fdiv(h, v.block_size) * v.block_size,
            implies(or_(not_(v.enable_prefix_caching), r.skip_reading_prefix_cache), h == 0),
        )

    return _all([implies(r.admitted, ok(r)) for r in v.rows])


def cached_blocks_match_tokens(v: StepView) -> Any:
    return v.cache_consistent
