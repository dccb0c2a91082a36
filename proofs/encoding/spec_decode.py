"""Sync speculative decoding in the step encoding: the update side of a request that sampled with drafts.

The update (`update.py`) calls this for every slot when `Config.spec_decode`
is set; the scheduling side (owed T + S - C, the draft count the clamps
leave, the padded decode-like admission) is in the passes (`running.py`,
`waiting.py`), each decision a call into `reference_impl.rules`, as
everywhere else.

What the model returns is free in the formula, constrained only as a real
verifier and drafter are:

* `num_accepted` in 0 .. drafts scheduled: the model appends m = 1 + accepted
  tokens (`fake_model`: the first mismatch ends the run);
* `stop_at`, the position (1-based) among the m tokens of the first EOS or
  stop token, which `samples_eos` / `samples_stop` say is there at all;
* `num_new_drafts` in 0 .. k: the drafter's next proposal, kept only for a
  request that sampled and still runs (`update_draft_token_ids`).

vLLM appends the m tokens one by one and runs `check_stop` after each
(update.py `_update_request_with_output`). With k symbolic that loop cannot
be unrolled, so the encoding finds the first position whose verdict is not
NOT_STOPPED among candidates. `rules.stop_kind` depends on the position j
only through comparisons of T + j and O + j with L, max_tokens and
min_tokens, and through "token j is the stop token"; its verdict is constant
between the points where one of those comparisons can flip, so the first
stopping position is 1 or one of those points. The candidates are each such
point, for offsets 0 and 1 (`>=` and `>`), which covers the rule and its
mutants (Z4, Z13, stop-at-L). The verdict at that position is
`rules.stop_kind`'s, so EOS/stop still wins over a length cap on the same
token, and the tokens after it are trimmed (C -= dropped).
"""

from __future__ import annotations

from typing import Any

from ...reference_impl import rules
from ...spec.arith import and_, ite, or_
from ...spec.versions import DEFAULT_RELEASE

Int = Any


def kind_at(s: Any, j: Int, L: Int, release: str = DEFAULT_RELEASE) -> Int:
    """`check_stop` after the j-th appended token (1-based)."""
    return rules.stop_kind(
        and_(s.samples_eos, j == s.stop_at),
        and_(s.samples_stop, j == s.stop_at),
        s.num_tokens + j,
        s.num_output_tokens + j,
        L,
        s.max_tokens,
        s.min_tokens,
        release,
    )


def first_stop(s: Any, m: Int, L: Int, release: str = DEFAULT_RELEASE) -> Int:
    """The position (1-based) of the first of the m appended tokens whose `check_stop` stops, or m + 1."""
    O, T0 = s.num_output_tokens, s.num_tokens
    points = [
        1,
        s.stop_at,
        s.stop_at + 1,
        L - T0,
        L - T0 + 1,
        s.max_tokens - O,
        s.max_tokens - O + 1,
        s.min_tokens - O,
        s.min_tokens - O + 1,
    ]
    p: Int = m + 1  # none yet
    for q in points:
        hit = and_(1 <= q, q <= m, kind_at(s, q, L, release) != rules.NOT_STOPPED)
        p = ite(and_(hit, q < p), q, p)
    return p


def sample(s: Any, C: Int, drafts: Int, sampled: Any, L: Int, k: Int, release: str = DEFAULT_RELEASE) -> dict[str, Any]:
    """C (already advanced by the grant) after rejection and trimming, T after the append, and the verdict.

    `drafts` is the number of drafts scheduled for the request (0 if none).
    Returns the new C and T, `done`, the verdict `kind`, `stop_seen` (the
    EOS/stop token was appended, not trimmed) and `inputs`, the facts that
    bound the free model outputs.
    """
    m = 1 + s.num_accepted
    # Rejected drafts roll C back (P is 0 in the synchronous engine):
    # vllm/v1/core/sched/scheduler.py:Scheduler.update_from_output (2352-2364).
    C = ite(and_(sampled, drafts > 0, C > 0), C - rules.num_rejected_drafts(drafts, m), C)
    p = first_stop(s, m, L, release)
    done = and_(sampled, p <= m)
    appended = ite(done, p, m)
    return dict(
        C=C - ite(done, m - p, 0),
        T=s.num_tokens + ite(sampled, appended, 0),
        done=done,
        kind=kind_at(s, p, L, release),
        stop_seen=and_(sampled, or_(s.samples_eos, s.samples_stop), s.stop_at <= appended),
        inputs=[
            s.num_accepted >= 0,
            s.num_accepted <= drafts,
            s.stop_at >= 1,
            s.stop_at <= m,
            s.num_new_drafts >= 0,
            s.num_new_drafts <= k,
        ],
    )
