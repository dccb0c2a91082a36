"""No drift under sync spec decode and prefix caching: the encoding takes the reference's step, drafts, hits and all.

The core drift test (`core.py`) plants one sampled token per request. With
drafts the model returns 1 + accepted tokens and the drafter a proposal
after the update, and those are the encoding's free inputs. So this check
runs the reference through `spec.engine.steps`, the engine loop every engine
runs (schedule, `fake_model`, update, the `Drafter`), reads from the step what the model and drafter returned
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

from collections.abc import Iterator, Mapping
from dataclasses import replace
from typing import Any

from ...reference_impl import ReferenceEngine
from ...spec.engine import steps
from ...spec.invariants.build import sampled_stop
from ...spec.output import ModelRunnerOutput, SchedulerOutput
from ...spec.state import SchedulerState
from ...spec.trace import FinishedRequest, StepRecord
from ..encoding.state import Pre
from ..encoding.step import step
from .core import diff_through_abstraction, from_state


def model_inputs(
    state: SchedulerState,
    generated: dict[str, tuple[int, ...]],
    proposals: dict[str, tuple[int, ...]],
) -> dict[str, dict[str, Any]]:
    """Per request, the encoding's free inputs as the model and the drafter set them: accepted, stop position."""
    out = {}
    for rid, r in state.requests.items():
        q = r.request
        gen = generated.get(rid, ())
        special = [j for j, t in enumerate(gen, 1) if t == q.effective_eos_token_id or t in q.stop_token_ids]
        first = gen[special[0] - 1] if special else None
        out[rid] = dict(
            num_spec_tokens=len(r.spec_token_ids),
            is_prefill_chunk=r.is_prefill_chunk,
            num_accepted=max(len(gen) - 1, 0),
            stop_at=special[0] if special else 1,
            samples_eos=first is not None and first == q.effective_eos_token_id,
            samples_stop=first is not None and first in q.stop_token_ids,
            num_new_drafts=len(proposals.get(rid, ())),
        )
    return out


def probe_cache(engine: ReferenceEngine) -> dict[str, dict[str, int]]:
    """Wrap this engine's KV cache manager to record each request's hit, evictable hits and still-shared frees."""
    kv = engine.scheduler.kv_cache_manager
    seen: dict[str, dict[str, int]] = {}
    lookup, free = kv.get_computed_blocks, kv.free

    def get_computed_blocks(request):
        blocks, tokens = lookup(request)
        ref = kv.block_pool.ref_cnt
        seen.setdefault(request.request_id, {}).update(
            hit_blocks=len(blocks), evictable=sum(1 for b in blocks if ref.get(b, 0) == 0)
        )
        return blocks, tokens

    def free_request(request):
        ref = kv.block_pool.ref_cnt
        if request.block_ids:  # under async a victim can finish later in the step, freeing nothing more
            seen.setdefault(request.request_id, {})["shared_freed"] = sum(
                1 for b in request.block_ids if ref.get(b, 0) > 1
            )
        free(request)

    # This instance's own methods, wrapped: a probe of one engine, never of the class.
    kv.get_computed_blocks, kv.free = get_computed_blocks, free_request  # type: ignore[method-assign]
    return seen


def shared_refs(state: SchedulerState) -> int:
    held = [b for r in state.requests.values() for b in r.block_ids]
    return len(held) - len(set(held))


class RecordingEngine(ReferenceEngine):
    """The reference engine, keeping what a drift check needs of the step it is in.

    `pre` is the state schedule() started from, `absorbed` the output (and
    model output) update_from_output absorbed: this step's in the sync loop,
    the older step's under async, none in a schedule-only async step.
    `probed` is the cache probe's record of the step.
    """

    def __init__(self, config) -> None:
        super().__init__(config)
        self.probed = probe_cache(self)
        self.pre: SchedulerState | None = None
        self.absorbed = NOTHING_ABSORBED

    def schedule(self):
        self.pre = self.state()
        self.probed.clear()
        return super().schedule()

    def update_from_output(self, output, model_output):
        self.absorbed = (output, model_output)
        return super().update_from_output(output, model_output)


NOTHING_ABSORBED = (SchedulerOutput(), ModelRunnerOutput({}))


def recorded_steps(
    workload, max_steps: int, max_live: int
) -> Iterator[tuple[SchedulerState, tuple, StepRecord, SchedulerState, dict]]:
    """`spec.engine.steps` on the reference, the loop every engine runs: for each step that scheduled from
    1..max_live live requests, (pre, absorbed, record, post, probed cache inputs).

    A step with a mid-step abort (`Abort.mid_step`, between the schedule and the update) is passed over: the
    encoding's step has no input there yet, so the proofs say nothing about those steps."""
    engine = RecordingEngine(workload.config)
    for k, record in enumerate(steps(engine, workload)):
        if k >= max_steps:
            return
        pre, absorbed = engine.pre, engine.absorbed
        engine.pre, engine.absorbed = None, NOTHING_ABSORBED
        if pre is not None and 0 < len(pre.requests) <= max_live and not record.aborted_mid_step:
            yield pre, absorbed, record, engine.state(), {r: dict(v) for r, v in engine.probed.items()}


# (pre, output, model output, post after the drafter, finished, proposals, probed cache inputs)
SpecStep = tuple[
    SchedulerState,
    SchedulerOutput,
    ModelRunnerOutput,
    SchedulerState,
    Mapping[str, FinishedRequest],
    Mapping[str, tuple[int, ...]],
    dict[str, dict[str, int]],
]


def spec_steps(workload, max_steps: int = 60, max_live: int = 10) -> Iterator[SpecStep]:
    """(pre, output, model output, post after the drafter, finished, proposals, probed cache inputs) per step."""
    for pre, _, record, post, probed in recorded_steps(workload, max_steps, max_live):
        yield pre, record.output, record.model_output, post, record.finished, record.draft_token_ids, probed


def encoding_pre(
    state: SchedulerState,
    generated: dict[str, tuple[int, ...]],
    proposals: dict[str, tuple[int, ...]],
    probed: dict | None,
) -> tuple[Pre, list[str], dict[str, dict[str, Any]]]:
    """The encoding's pre-state of a reference state with its features on, and each slot's free inputs."""
    pre, order = from_state(state, {})
    c = state.config
    pre.config.spec_decode, pre.config.num_speculative_tokens = c.num_speculative_tokens > 0, c.num_speculative_tokens
    inputs = model_inputs(state, generated, proposals)
    if c.enable_prefix_caching:
        pre.config.prefix_caching, pre.num_shared_refs = True, shared_refs(state)
        for rid in order:
            inputs[rid].update(dict(hit_blocks=0, evictable=0, shared_freed=0), **(probed or {}).get(rid, {}))
    return pre, order, inputs


def feature_diffs(enc: Any, order: list[str], output, post: SchedulerState, finished) -> list[tuple[str, Any, Any]]:
    """`diff_through_abstraction` with the drafts, plus what every feature step compares: the free inputs within
    their bounds, the shared table entries, and how a finished request finished."""
    c = post.config
    diffs = diff_through_abstraction(enc, order, output, post, finished, c.num_speculative_tokens > 0)
    if not all(enc.inputs):
        diffs.append(("inputs within bounds", False, True))
    if c.enable_prefix_caching and enc.num_shared_refs != shared_refs(post):
        diffs.append(("num_shared_refs", enc.num_shared_refs, shared_refs(post)))
    for j, rid in enumerate(order):
        if rid not in post.requests:
            stopped = finished[rid].status.name == "FINISHED_STOPPED"
            if enc.finished_stopped[j] != stopped:
                diffs.append((f"{rid}.finished_stopped", enc.finished_stopped[j], stopped))
    return diffs


def compare_features(
    pre_state: SchedulerState, output, model_output, post, finished, proposals, probed: dict | None = None
) -> list[tuple[str, Any, Any]]:
    """(field, encoding's value, reference's value) for every disagreement of one step with the features on."""
    pre, order, inputs = encoding_pre(pre_state, dict(model_output.sampled_token_ids), proposals, probed)
    if not pre.config.spec_decode:  # the core's one sampled token: only its EOS / stop flags are read
        inputs = {
            rid: {
                f: v
                for f, v in x.items()
                if f in ("samples_eos", "samples_stop", "hit_blocks", "evictable", "shared_freed")
            }
            for rid, x in inputs.items()
        }
    pre.slots = [replace(s, **inputs[rid]) for s, rid in zip(pre.slots, order)]
    enc = step(pre)
    diffs = feature_diffs(enc, order, output, post, finished)
    # What stop-token-finishes reads: whether the kept tokens end in a stop token, at the release's min_tokens gate.
    c = pre_state.config
    for j, rid in enumerate(order):
        r = pre_state.requests[rid]
        stop = sampled_stop(r.request, model_output, rid, r.num_tokens, c.max_model_len, c.vllm_version)
        if enc.sampled_stop[j] != stop:
            diffs.append((f"{rid}.sampled_stop", enc.sampled_stop[j], stop))
    return diffs
