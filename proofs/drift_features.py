"""No drift under sync spec decode and prefix caching: the encoding takes the reference's step, drafts, hits and all.

The core drift test (`drift.py`) plants one sampled token per request. With
drafts the model returns 1 + accepted tokens and the drafter a proposal
after the update, and those are the encoding's free inputs. So this check
runs the reference's own engine loop (schedule, `fake_model`, update, the
`Drafter`), reads from the step what the model and drafter returned
(accepted count, where the first EOS or stop token sits, the proposal), sets
them as the slots' inputs, evaluates `encoding.step` on ints and compares
field by field through the abstraction, now including the drafts scheduled
and the drafts held after the step.

Under prefix caching the hit and the sharing are free inputs too. They are
read off the reference while it steps: its `KVCacheManager` is probed (per
engine instance, nothing global) for each lookup's hit and how many of the
hit blocks had ref count 0, and for how many of a freed request's blocks
someone else still held. The shared table entries before and after are
counted from the block tables, and compared.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Iterator

from ..reference_impl import ReferenceEngine
from ..spec.engine import Drafter, fake_model
from ..spec.state import SchedulerState
from .drift import diff_through_abstraction, from_state
from .encoding import step


def model_inputs(state: SchedulerState, generated: dict[str, tuple[int, ...]], proposals: dict[str, tuple[int, ...]],
                 ) -> dict[str, dict[str, Any]]:
    """Per request, the encoding's free inputs as the model and the drafter set them: accepted, stop position."""
    out = {}
    for rid, r in state.requests.items():
        q = r.request
        gen = generated.get(rid, ())
        special = [j for j, t in enumerate(gen, 1) if t == q.effective_eos_token_id or t in q.stop_token_ids]
        first = gen[special[0] - 1] if special else None
        out[rid] = dict(num_spec_tokens=len(r.spec_token_ids), is_prefill_chunk=r.is_prefill_chunk,
                        num_accepted=max(len(gen) - 1, 0), stop_at=special[0] if special else 1,
                        samples_eos=first is not None and first == q.effective_eos_token_id,
                        samples_stop=first is not None and first in q.stop_token_ids,
                        num_new_drafts=len(proposals.get(rid, ())))
    return out


def probe_cache(engine: ReferenceEngine) -> dict[str, dict[str, int]]:
    """Wrap this engine's KV cache manager to record each request's hit, evictable hits and still-shared frees."""
    kv, seen = engine.scheduler.kv_cache_manager, {}
    lookup, free = kv.get_computed_blocks, kv.free

    def get_computed_blocks(request):
        blocks, tokens = lookup(request)
        ref = kv.block_pool.ref_cnt
        seen.setdefault(request.request_id, {}).update(
            hit_blocks=len(blocks), evictable=sum(1 for b in blocks if ref.get(b, 0) == 0))
        return blocks, tokens

    def free_request(request):
        ref = kv.block_pool.ref_cnt
        if request.block_ids:  # under async a victim can finish later in the step, freeing nothing more
            seen.setdefault(request.request_id, {})["shared_freed"] = sum(1 for b in request.block_ids if ref.get(b, 0) > 1)
        free(request)

    kv.get_computed_blocks, kv.free = get_computed_blocks, free_request
    return seen


def shared_refs(state: SchedulerState) -> int:
    held = [b for r in state.requests.values() for b in r.block_ids]
    return len(held) - len(set(held))


def spec_steps(workload, max_steps: int = 60, max_live: int = 10) -> Iterator[tuple[SchedulerState, Any, Any, SchedulerState, dict, dict, dict]]:
    """(pre, output, model output, post after the drafter, finished, proposals, probed cache inputs) per step."""
    engine = ReferenceEngine(workload.config)
    probed = probe_cache(engine)
    drafter = Drafter(workload) if workload.config.num_speculative_tokens else None
    for k in range(min(workload.max_steps, max_steps)):
        for r in workload.arrivals_at(k):
            engine.add_request(r)
        for rid in workload.aborts_at(k):
            engine.abort_request(rid)
        pre = engine.state()
        probed.clear()
        output = engine.schedule()
        model_output = fake_model(workload, output, engine.summary())
        finished = engine.update_from_output(output, model_output)
        proposals = drafter.propose(output, model_output, engine.summary()) if drafter and output.total_num_scheduled_tokens else {}
        if proposals:
            engine.update_draft_token_ids(proposals)
        if 0 < len(pre.requests) <= max_live:
            yield pre, output, model_output, engine.state(), finished, proposals, {r: dict(v) for r, v in probed.items()}


def compare_features(pre_state: SchedulerState, output, model_output, post, finished, proposals,
                 probed: dict | None = None) -> list[tuple[str, Any, Any]]:
    """(field, encoding's value, reference's value) for every disagreement of one step with the features on."""
    pre, order = from_state(pre_state, {})
    c = pre_state.config
    pre.config.spec_decode, pre.config.num_speculative_tokens = c.num_speculative_tokens > 0, c.num_speculative_tokens
    inputs = model_inputs(pre_state, dict(model_output.sampled_token_ids), proposals)
    if c.enable_prefix_caching:
        pre.config.prefix_caching, pre.num_shared_refs = True, shared_refs(pre_state)
        for rid in order:
            inputs[rid].update(dict(hit_blocks=0, evictable=0, shared_freed=0), **(probed or {}).get(rid, {}))
    if not pre.config.spec_decode:  # the core's one sampled token: only its EOS / stop flags are read
        inputs = {rid: {f: v for f, v in x.items() if f in ("samples_eos", "samples_stop", "hit_blocks", "evictable",
                                                               "shared_freed")} for rid, x in inputs.items()}
    pre.slots = [replace(s, **inputs[rid]) for s, rid in zip(pre.slots, order)]
    enc = step(pre)
    diffs = diff_through_abstraction(enc, order, output, post, finished, pre.config.spec_decode)

    def same(field: str, a: Any, b: Any) -> None:
        if a != b:
            diffs.append((field, a, b))

    if not all(enc.inputs):
        diffs.append(("inputs within bounds", False, True))
    if c.enable_prefix_caching:
        same("num_shared_refs", enc.num_shared_refs, shared_refs(post))
    for j, rid in enumerate(order):
        if rid not in post.requests:
            same(f"{rid}.finished_stopped", enc.finished_stopped[j], finished[rid].status.name == "FINISHED_STOPPED")
    return diffs
