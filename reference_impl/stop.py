"""`check_stop` (`vllm/v1/core/sched/utils.py:check_stop`), run after each appended token.

The order is the semantics (bug-zoo Z4 and Z13 are both about it):

1. EOS: the effective `eos_token_id`, which is None under `ignore_eos`;
2. a stop token, which still applies under `ignore_eos`;
3. the length caps: `num_tokens >= max_model_len` or `num_output_tokens >= max_tokens`;
4. `min_tokens` gates only what follows (repetition detection, not modelled).

So EOS and stop tokens finish a request even below `min_tokens` (T32), and
the length caps apply below it too (T33, PR #51299); before 0.29.0 `min_tokens`
came first and held back every stop (`spec/versions.py`). The verdict itself is
`rules.stop_kind`, shared with the Z3 encoding; this function applies it.
"""

from __future__ import annotations

from ..spec.request import RequestStatus
from ..spec.versions import DEFAULT_RELEASE
from . import rules
from .live_request import LiveRequest


def check_stop(request: LiveRequest, max_model_len: int, release: str = DEFAULT_RELEASE) -> bool:
    q = request.request
    last_token_id = request.output_token_ids[-1]
    is_stop_token = last_token_id in q.stop_token_ids
    kind = rules.stop_kind(
        last_token_id == q.effective_eos_token_id,
        is_stop_token,
        request.num_tokens,
        request.num_output_tokens,
        max_model_len,
        request.max_tokens,
        q.min_tokens,
        release,
    )
    if kind == rules.STOPPED:
        request.status = RequestStatus.FINISHED_STOPPED
        if is_stop_token and last_token_id != q.effective_eos_token_id:
            request.stop_reason = last_token_id
        return True
    if kind == rules.LENGTH_CAPPED:
        request.status = RequestStatus.FINISHED_LENGTH_CAPPED
        return True
    return False
