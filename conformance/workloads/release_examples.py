"""One small workload per release variant (`spec/versions.py`): run it at either side of the release and see the rule.

Each is built at the default release; `at(workload, version)` moves it.
`tests/unit/spec/test_versions.py` pins what the reference does on both sides,
and `tests/slow/test_vllm_releases.py` holds the real releases to it. The
scenarios follow the diff of vLLM's sources that found each variant;
`docs/versions.md` gives the numbers.
"""

from __future__ import annotations

import dataclasses

from ...spec.config import SchedulerConfig
from ...spec.controls import Control
from ...spec.request import Request
from ...spec.workload import Grammar, Workload, WorkloadRequest

EOS = 2


def _first_line(doc: str | None) -> str:
    assert doc is not None  # docstrings are kept: no `python -OO`
    return doc.split("\n")[0]


def at(workload: Workload, version: str) -> Workload:
    """The same workload under another release's semantics."""
    return workload.replace(config=dataclasses.replace(workload.config, vllm_version=version))


def min_tokens() -> Workload:
    """EOS sampled below min_tokens: it finishes the request from 0.29.0, and is ignored before."""
    config = SchedulerConfig(max_num_batched_tokens=64, max_model_len=64, block_size=16, num_gpu_blocks=20)
    r = Request("r", (5,) * 8, max_tokens=10, min_tokens=5, eos_token_id=EOS)
    return Workload(
        config,
        (WorkloadRequest(r, output_token_ids=(7, EOS, 8, 9, 10, 11, 12, 13, 14, 15)),),
        name="version-min-tokens",
        description=_first_line(min_tokens.__doc__),
    )


def padding_room() -> Workload:
    """A one-token admission after a prefix hit, one draft slot short of L: unpadded from 0.29.0, not admitted before.

    `a` leaves block 0 cached; `b` hits it (C = 16, one token left) while
    `r` decodes, so the admission is decode-like: 1 + k = 3 tokens would end
    at position 18 = L.
    """
    config = SchedulerConfig(
        max_num_batched_tokens=64,
        max_model_len=18,
        block_size=16,
        num_gpu_blocks=20,
        enable_prefix_caching=True,
        num_speculative_tokens=2,
    )
    prompt = tuple(range(10, 27))  # 17 tokens: one full block and one more
    reqs = (
        WorkloadRequest(Request("a", prompt, max_tokens=1, ignore_eos=True)),
        WorkloadRequest(Request("r", (3,) * 4, max_tokens=12, ignore_eos=True), arrival_step=1),
        WorkloadRequest(Request("b", prompt[:16] + (99,), max_tokens=1, ignore_eos=True), arrival_step=3),
    )
    return Workload(config, reqs, name="version-padding-room", description=_first_line(padding_room.__doc__))


def padding_hit() -> Workload:
    """A lone one-token admission after a prefix hit: padded to 1 + k from 0.30.0, one token before."""
    config = SchedulerConfig(
        max_num_batched_tokens=64,
        max_model_len=64,
        block_size=16,
        num_gpu_blocks=20,
        enable_prefix_caching=True,
        num_speculative_tokens=2,
    )
    prompt = tuple(range(10, 27))
    reqs = (
        WorkloadRequest(Request("a", prompt, max_tokens=1, ignore_eos=True)),
        WorkloadRequest(Request("b", prompt[:16] + (99,), max_tokens=2, ignore_eos=True), arrival_step=2),
    )
    return Workload(config, reqs, name="version-padding-hit", description=_first_line(padding_hit.__doc__))


def lone_threshold() -> Workload:
    """A lone 100-token prompt with threshold 16 and budget 64: 64 + 36 from 0.31.0, six chunks of 16 and 4 before."""
    config = SchedulerConfig(max_num_batched_tokens=64, max_model_len=128, long_prefill_token_threshold=16)
    reqs = (WorkloadRequest(Request("r", (5,) * 100, max_tokens=2, ignore_eos=True)),)
    return Workload(config, reqs, name="version-lone-threshold", description=_first_line(lone_threshold.__doc__))


def self_preemption() -> Workload:
    """PRIORITY: `a` preempts itself with `b` behind it; `b` decodes that step from 0.33.0, and waits before.

    Four usable blocks of 4: `a` (priority 1) holds 2 and `b` (priority 0) 2,
    so `a`'s third block can only come from a victim, and the least
    important running request is `a` itself.
    """
    config = SchedulerConfig(
        max_num_batched_tokens=64, max_model_len=64, block_size=4, num_gpu_blocks=5, policy="priority"
    )
    reqs = (
        WorkloadRequest(Request("a", (5,) * 7, max_tokens=4, ignore_eos=True, priority=1)),
        WorkloadRequest(Request("b", (6,) * 5, max_tokens=4, ignore_eos=True, arrival_time=1.0), arrival_step=1),
    )
    return Workload(config, reqs, name="version-self-preemption", description=_first_line(self_preemption.__doc__))


def spec_caching() -> Workload:
    """Sync spec decode: the block that `a`'s accepted drafts filled is cached at once from 0.33.0, so `b` hits 8 tokens, not 4."""
    config = SchedulerConfig(
        max_num_batched_tokens=64,
        max_model_len=64,
        block_size=4,
        num_gpu_blocks=20,
        enable_prefix_caching=True,
        num_speculative_tokens=2,
    )
    prompt, outputs = (11, 12, 13, 14, 15), (21, 22, 23, 24)
    reqs = (
        WorkloadRequest(
            Request("a", prompt, max_tokens=4, ignore_eos=True), output_token_ids=outputs, spec_proposals=((2, 2),)
        ),
        WorkloadRequest(Request("b", prompt + outputs[:3] + (99,), max_tokens=1, ignore_eos=True), arrival_step=3),
    )
    return Workload(config, reqs, name="version-spec-caching", description=_first_line(spec_caching.__doc__))


def grammar_queue() -> Workload:
    """A grammar request arriving behind plain ones (FCFS): from 0.31.0 it waits its turn, before it goes first.

    `a`, `b` and then `g` (its grammar compiled at once) arrive at step 0;
    the budget (8) fits one prompt a step. From 0.31.0 the one waiting queue
    serves `a`, `b`, then `g` (8 tokens at step 0 to `a`); before, `g` joins
    the skipped queue, which the pass walks first, and is admitted at step 0.
    """
    config = SchedulerConfig(
        max_num_batched_tokens=8, max_num_seqs=4, max_model_len=64, block_size=4, num_gpu_blocks=40
    )
    reqs = (
        WorkloadRequest(Request("a", tuple(range(10, 18)), max_tokens=2, ignore_eos=True)),
        WorkloadRequest(Request("b", tuple(range(20, 28)), max_tokens=1, ignore_eos=True)),
        WorkloadRequest(Request("g", tuple(range(30, 38)), max_tokens=1, ignore_eos=True), grammar=Grammar(0)),
    )
    return Workload(config, reqs, name="version-grammar-queue", description=_first_line(grammar_queue.__doc__))


def lora_count() -> Workload:
    """Async LoRA, max_loras 1: `a`'s output is in flight at step 1; before 0.33.0 its adapter frees the slot, and `b` is admitted.

    `a` (adapter 2, one output token) is admitted at step 0 and sampled
    there; at step 1 the async skip rule passes it over (its last token is
    in flight). From 0.33.0 every running request's adapter counts, so `b`
    (adapter 1) waits a step; before, only the scheduled ones' count, and `b`
    is admitted at step 1.
    """
    config = SchedulerConfig(
        max_num_batched_tokens=64, max_model_len=64, block_size=4, num_gpu_blocks=40, max_loras=1, async_scheduling=True
    )
    reqs = (
        WorkloadRequest(Request("a", tuple(range(10, 14)), max_tokens=1, ignore_eos=True, lora_int_id=2)),
        WorkloadRequest(Request("b", tuple(range(20, 24)), max_tokens=1, ignore_eos=True, lora_int_id=1)),
    )
    return Workload(config, reqs, name="version-lora-count", description=_first_line(lora_count.__doc__))


def prefill_cadence() -> Workload:
    """Outside data parallel, prefill_schedule_interval 3: from 0.33.0 `b`'s prefill waits for the interval; before, it is admitted at once.

    `a` is admitted at step 0, the last step that carried a prefill, and
    then decodes. `b` arrives at step 1: from 0.33.0 the scheduler keeps the
    cadence itself, so `b` waits while `a`'s decodes fill steps 1 and 2 and
    is admitted at step 3, three executed steps after `a`'s prefill; before,
    only a DP engine core throttles, and `b` is admitted at step 1.
    """
    config = SchedulerConfig(
        max_num_batched_tokens=64, max_model_len=64, block_size=4, num_gpu_blocks=40, prefill_schedule_interval=3
    )
    reqs = (
        WorkloadRequest(Request("a", tuple(range(10, 14)), max_tokens=8, ignore_eos=True)),
        WorkloadRequest(Request("b", tuple(range(20, 28)), max_tokens=1, ignore_eos=True), arrival_step=1),
    )
    return Workload(config, reqs, name="version-prefill-cadence", description=_first_line(prefill_cadence.__doc__))


def paused_waiting_pass() -> Workload:
    """A DP rank paused (mode wait) while `b` waits: from 0.32.0 `b` is admitted at once after the resume; before, it waits out the throttled steps.

    `a` is admitted at step 0 and decodes. At step 1 a pause in mode `wait`
    (PAUSED_NEW) holds new admissions, and `b` arrives at step 2, an
    unthrottled step. From 0.32.0 the waiting pass runs under PAUSED_NEW and
    takes nobody, and the step records that the queue could not drain (the
    capacity bound), so after the resume at step 3 the throttled steps do not
    defer `b`'s prefill. Before, the pass does not run under a pause, the flag
    stays clear, and `b` waits while `a` decodes through the throttled steps.
    """
    config = SchedulerConfig(
        max_num_batched_tokens=64,
        max_model_len=64,
        block_size=4,
        num_gpu_blocks=40,
        prefill_schedule_interval=2,
        data_parallel_size=2,
    )
    reqs = (
        WorkloadRequest(Request("a", tuple(range(10, 14)), max_tokens=12, ignore_eos=True)),
        WorkloadRequest(Request("b", tuple(range(20, 28)), max_tokens=1, ignore_eos=True), arrival_step=2),
    )
    controls = (Control(1, "pause", mode="wait", clear_cache=False), Control(3, "resume"))
    return Workload(
        config,
        reqs,
        name="version-paused-waiting-pass",
        description=_first_line(paused_waiting_pass.__doc__),
        throttle_prefills=tuple(range(3, 12)),
        controls=controls,
    )


def pooling_no_sample() -> Workload:
    """A pooling model's prompt of max_model_len, chunked: from 0.32.0 its last chunk reaches L and it is pooled at step 1; before, it stalls one token short.

    vLLM's own `test_pooling_chunked_prefill_can_finish_at_max_model_len`:
    a prompt of 8 with max_model_len 8 and a budget of 4. The first chunk
    is the waiting pass's (no position bound); the second is the running
    pass's, bounded by L - C - num_sampled_tokens_per_step. From 0.32.0 a
    pooling model samples nothing, so the chunk is 4 and the request is
    pooled and finished at step 1; before, it reserved a slot for a token it
    never samples, so each step grants 3, then 0, and the request never
    finishes (the run ends at max_steps).
    """
    config = SchedulerConfig(max_num_seqs=1, max_model_len=8, max_num_batched_tokens=4, runner="pooling")
    reqs = (WorkloadRequest(Request("pool", tuple(range(10, 18)), max_tokens=1)),)
    return Workload(config, reqs, name="version-pooling-no-sample", description=_first_line(pooling_no_sample.__doc__),
                    max_steps=6)  # fmt: skip


VERSION_WORKLOADS = {
    "version-min-tokens": min_tokens,
    "version-padding-room": padding_room,
    "version-padding-hit": padding_hit,
    "version-lone-threshold": lone_threshold,
    "version-self-preemption": self_preemption,
    "version-spec-caching": spec_caching,
    "version-grammar-queue": grammar_queue,
    "version-lora-count": lora_count,
    "version-prefill-cadence": prefill_cadence,
    "version-paused-waiting-pass": paused_waiting_pass,
    "version-pooling-no-sample": pooling_no_sample,
}
