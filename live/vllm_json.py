"""vLLM's scheduler objects as the spec's JSON: the one home of that conversion.

Design notes
------------
* Two programs read vLLM's objects and speak the spec's JSON: the CPU driver
  (`conformance/vllm_env/driver.py`, which answers the harness) and the
  monitored schedulers of `schedspec.live` (which capture and check a running
  vLLM). One rule, one home: both call these functions, so a capture and a
  driver's reply can never disagree on what a vLLM object means.
* It imports only the standard library and reads vLLM's objects by attribute
  (duck typing), because the driver runs in the vLLM venv where schedspec is
  not installed and loads this file by its path, while `schedspec.live` imports
  it as a module. Nothing here imports vLLM, so it also loads in the project
  venv (the unit tests feed it stand-in objects).
* The shapes mirror `spec/output.py` (`SchedulerOutput.to_json`),
  `spec/trace.py` (`StateSummary.to_json`, `FinishedRequest.to_json`),
  `spec/request.py` and `spec/config.py`; the spec's `from_json`s read them.
* Layout: the spec's is the V2 model runner's (a resumed request listed among
  the new ones, with its full block table). vLLM falls back to the V1 layout
  (resumed requests among the cached ones, `resumed_req_ids`) only where it
  runs the V1 runner; `scheduler_output` lays that out as V2 would. Under V2
  a resumed request among the cached ones would mean the spec's model is
  wrong, so it raises rather than guess.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from typing import Any


def finished(r: Any) -> dict[str, Any]:
    """`FinishedRequest.to_json` of a finished vLLM `Request`."""
    return {"status": r.status.name, "output_token_ids": list(r.output_token_ids)}


def scheduler_output(so: Any, scheduler: Any) -> dict[str, Any]:
    """`SchedulerOutput.to_json` of vLLM's `SchedulerOutput`, just after `scheduler.schedule()` returned it."""
    requests = scheduler.requests
    new = [
        {
            "req_id": d.req_id,
            "num_computed_tokens": d.num_computed_tokens,
            "block_ids": list(d.block_ids[0]),
            "resumed": requests[d.req_id].num_preemptions > 0,
        }
        for d in so.scheduled_new_reqs
    ]
    cr = so.scheduled_cached_reqs
    if cr.resumed_req_ids and scheduler.use_v2_model_runner:
        raise RuntimeError(f"resumed requests among the cached ones: {sorted(cr.resumed_req_ids)}")
    cached = []
    for i, rid in enumerate(cr.req_ids):
        blocks = None if cr.new_block_ids[i] is None else list(cr.new_block_ids[i][0])
        if rid in cr.resumed_req_ids:
            # The V1 runner's layout (ngram before 0.33.0): the V2 one lists a resumed request as new,
            # after the new ones, with the same blocks (Scheduler.schedule's output).
            new.append(
                {
                    "req_id": rid,
                    "num_computed_tokens": cr.num_computed_tokens[i],
                    "block_ids": blocks or [],
                    "resumed": True,
                }
            )
        else:
            cached.append({"req_id": rid, "num_computed_tokens": cr.num_computed_tokens[i], "new_block_ids": blocks})
    return {
        "num_scheduled_tokens": [[k, v] for k, v in so.num_scheduled_tokens.items()],
        "scheduled_new_reqs": new,
        "scheduled_cached_reqs": cached,
        "scheduled_spec_decode_tokens": {k: list(v) for k, v in so.scheduled_spec_decode_tokens.items()},
        "preempted_req_ids": sorted(so.preempted_req_ids or ()),
        "finished_req_ids": sorted(so.finished_req_ids),
    }


def summary(scheduler: Any, grammar_seen: Mapping[str, str] | None = None) -> dict[str, Any]:
    """`StateSummary.to_json` of the scheduler's state now: the queues in order, free blocks, each live request.

    `grammar_seen`: each grammar as the scheduler last found it, for a live engine whose compile futures finish
    on their own time (a future done since the last schedule() is news to the scheduler only at the next one);
    without it, the grammar as it stands (the driver sets them itself)."""
    waiting, num_skipped = waiting_order(scheduler)
    d: dict[str, Any] = {
        "running": [r.request_id for r in scheduler.running],
        "waiting": waiting,
        "num_free_blocks": scheduler.kv_cache_manager.block_pool.get_num_free_blocks(),
        "requests": {rid: _request_summary(r, grammar_seen) for rid, r in scheduler.requests.items()},
    }
    if num_skipped:
        d["num_skipped_waiting"] = num_skipped
    return d


def _request_summary(r: Any, grammar_seen: Mapping[str, str] | None) -> dict[str, Any]:
    d = {"status": r.status.name, "num_computed_tokens": r.num_computed_tokens, "num_tokens": r.num_tokens}
    grammar = grammar_state(r) if grammar_seen is None else grammar_seen.get(r.request_id)
    if grammar is not None:
        d["grammar"] = grammar
    return d


def grammar_state(r: Any) -> str | None:
    """Where a request's grammar stands, as the scheduler would find it: None (no structured output),
    "compiling" (no grammar yet, or its compile future not done), "failed" (an exception), "compiled".
    Reads a future without consuming it (vllm/v1/structured_output/request.py:StructuredOutputRequest)."""
    so = getattr(r, "structured_output_request", None)
    if so is None:
        return None
    g = getattr(so, "_grammar", None)
    if g is None:
        return "compiling"
    if hasattr(g, "done") and hasattr(g, "exception"):  # a concurrent.futures.Future
        if not g.done():
            return "compiling"
        return "failed" if g.exception() is not None else "compiled"
    return "failed" if isinstance(g, Exception) else "compiled"


def waiting_order(scheduler: Any) -> tuple[list[str], int]:
    """The waiting requests in the order the waiting pass walks them, and how many lead from a second queue.

    0.31.0 on: `kv_holding_waiting` (requests holding KV blocks), then `waiting`. 0.28.0-0.30.0: under FCFS
    `skipped_waiting` first, then `waiting` (`_select_waiting_queue_for_scheduling`), and the count of the
    first is the spec's `num_skipped_waiting`; under PRIORITY the pass takes the smaller head, one heap's order.
    A priority queue iterates in pop order.
    """
    first = getattr(scheduler, "kv_holding_waiting", None)
    if first is None:
        first = getattr(scheduler, "skipped_waiting", None)
    rest = list(scheduler.waiting)
    if first is None or not len(first):
        return [r.request_id for r in rest], 0
    head = list(first)
    if type(first).__name__.startswith("Priority"):
        return [r.request_id for r in heapq.merge(head, rest)], 0
    counted = len(head) if hasattr(scheduler, "skipped_waiting") else 0
    return [r.request_id for r in head + rest], counted


def sampled(so: Any, runner_output: Any) -> dict[str, list[int]]:
    """`ModelRunnerOutput.to_json`: the tokens each request of `so` sampled, in `num_scheduled_tokens` order."""
    index, tokens = runner_output.req_id_to_index, runner_output.sampled_token_ids
    out: dict[str, list[int]] = {}
    for rid in so.num_scheduled_tokens:
        i = index.get(rid)
        out[rid] = [] if i is None or i >= len(tokens) else [int(t) for t in tokens[i]]
    return out


def pooled(so: Any, runner_output: Any) -> list[str]:
    """The requests of `so` whose pooled output came back (`ModelRunnerOutput.pooler_output[i]` is not None: a
    pooling model's step that ended at the prompt's end), in `num_scheduled_tokens` order."""
    outputs = getattr(runner_output, "pooler_output", None)
    if not outputs:
        return []
    index = runner_output.req_id_to_index
    return [
        rid
        for rid in so.num_scheduled_tokens
        if (i := index.get(rid)) is not None and i < len(outputs) and outputs[i] is not None
    ]


def grammar_events(scheduler: Any, compiling: Mapping[str, Any]) -> dict[str, bool]:
    """Just after a schedule(): the grammars it found done, of the `compiling` requests (id -> vLLM Request) the
    scheduler last saw compiling. A request promoted out of WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR found its grammar
    compiled; one in `grammar_compile_error_reqs` found it failed
    (vllm/v1/core/sched/scheduler.py:Scheduler._handle_blocked_waiting_request). A future that finished while the
    pass was not looking is news only when a pass finds it, as it is to the scheduler."""
    errors = getattr(scheduler, "grammar_compile_error_reqs", None) or ()
    found: dict[str, bool] = {}
    for rid, r in compiling.items():
        if rid in errors:
            found[rid] = False
        elif r.status.name in ("WAITING", "RUNNING"):  # promoted, and perhaps admitted at once
            found[rid] = True
    return found


def request(r: Any) -> dict[str, Any]:
    """The spec `Request`'s JSON (as in a workload's request) of a vLLM `Request` just added.

    `eos_token_id` is the effective one (None under ignore_eos, as vLLM's `SamplingParams` keeps it), which the
    spec's `Request` also holds.
    """
    p = r.sampling_params
    eos = getattr(p, "eos_token_id", None) if p is not None else None
    return {
        "request_id": r.request_id,
        "prompt_token_ids": list(r.prompt_token_ids or ()),
        "max_tokens": r.max_tokens,
        "min_tokens": getattr(p, "min_tokens", 0) if p is not None else 0,
        "eos_token_id": eos,
        "ignore_eos": bool(getattr(p, "ignore_eos", False)) if p is not None else False,
        "stop_token_ids": sorted(getattr(p, "stop_token_ids", None) or ()) if p is not None else [],
        "priority": r.priority,
        "arrival_time": r.arrival_time,
        **({"structured_output": True} if getattr(r, "structured_output_request", None) is not None else {}),
        **({"lora_int_id": r.lora_request.lora_int_id} if getattr(r, "lora_request", None) is not None else {}),
        **({"skip_reading_prefix_cache": True} if getattr(r, "skip_reading_prefix_cache", False) else {}),
    }


def config(
    vllm_config: Any, num_gpu_blocks: int, block_size: int, async_scheduling: bool, release: str
) -> dict[str, Any]:
    """The spec `SchedulerConfig`'s dict (`SchedulerConfig.from_dict`) of a built scheduler's VllmConfig."""
    sc, cc = vllm_config.scheduler_config, vllm_config.cache_config
    spec = vllm_config.speculative_config
    # VllmConfig fills these two in with their fallbacks; the spec's None means the same, and is its default.
    scheduled = getattr(sc, "max_num_scheduled_tokens", None)
    active = getattr(sc, "max_num_active_seqs", None)
    return {
        "max_num_batched_tokens": sc.max_num_batched_tokens,
        "max_num_seqs": sc.max_num_seqs,
        "max_model_len": vllm_config.model_config.max_model_len,
        "block_size": block_size,
        "num_gpu_blocks": num_gpu_blocks,
        "long_prefill_token_threshold": sc.long_prefill_token_threshold,
        "long_prefill_token_threshold_adaptive": bool(getattr(sc, "long_prefill_token_threshold_adaptive", False)),
        "enable_chunked_prefill": bool(sc.enable_chunked_prefill),
        "policy": sc.policy,
        "watermark": getattr(sc, "watermark", 0.0),
        "scheduler_reserve_full_isl": bool(getattr(sc, "scheduler_reserve_full_isl", True)),
        "max_num_scheduled_tokens": None if scheduled == sc.max_num_batched_tokens else scheduled,
        "max_num_active_seqs": None if active == sc.max_num_seqs else active,
        "enable_prefix_caching": bool(cc.enable_prefix_caching),
        "num_speculative_tokens": int(spec.num_speculative_tokens) if spec is not None else 0,
        "speculative_method": spec.method if spec is not None else "ngram",
        "async_scheduling": async_scheduling,
        # In `SchedulerConfig`'s field order: a capture's header is written byte for byte as a fixture's.
        "prefill_schedule_interval": int(getattr(sc, "prefill_schedule_interval", 1) or 1),
        "data_parallel_size": int(getattr(vllm_config.parallel_config, "data_parallel_size", 1) or 1),
        "pipeline_parallel_size": int(getattr(vllm_config.parallel_config, "pipeline_parallel_size", 1) or 1),
        "max_loras": vllm_config.lora_config.max_loras if getattr(vllm_config, "lora_config", None) else None,
        "runner": getattr(vllm_config.model_config, "runner_type", "generate"),
        "vllm_version": release,
    }
