"""A live capture made from a trace: what `MonitoredScheduler` would have written, had it run that trace.

`capture_of(trace)` turns any engine's trace (the reference's, from
`schedspec simulate --out`) into capture lines, and `write_capture` writes
them as parts (`PATH`, `PATH.1`, ...), each opening with its header. Uses:
fixtures for CI (a capture that must replay with no divergence, or one with a
planted change that must be caught) and tests of `replay-live`, without a
GPU or a vLLM server.

The engine loop's steps become schedule() calls: a step of `_batch_queue_steps`
that scheduled nothing is no call, so the capture's step numbers count
calls, as the live writer's do.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from ...spec.capture_format import CAPTURE_FORMAT, CAPTURE_VERSION, TokenHasher, encode_line
from ...spec.trace import Trace

SESSION = "0" * 32
SCHEDULER_CLASS = "schedspec.live.MonitoredScheduler"


def header(
    trace: Trace, session: str = SESSION, part: int = 0, first_step: int = 0, hashed: bool = False
) -> dict[str, Any]:
    config = trace.workload.config
    return {
        "kind": "header",
        "format": CAPTURE_FORMAT,
        "version": CAPTURE_VERSION,
        "session": session,
        "pid": 1,
        "started": "2026-01-01T00:00:00+00:00",
        "vllm_version": config.vllm_version.split("+")[0],
        "scheduler_class": SCHEDULER_CLASS,
        "async_scheduling": config.async_scheduling,
        "engine_async_scheduling": config.async_scheduling,  # a trace's loop is its config's
        "config": config.to_dict(),
        "hashed_token_ids": hashed,
        "out_of_scope": [],
        "monitors_off": [],
        "part": part,  # last, as the live writer adds them to its header at each part (live/session.py)
        "first_step": first_step,
    }


def capture_of(
    trace: Trace, session: str = SESSION, end: str | None = "shutdown", hash_key: bytes | None = None
) -> list[dict[str, Any]]:
    """The capture lines of `trace`, header first; `end=None` leaves the end line out (a truncated capture).

    With `hash_key`, every token id (prompts, stop and EOS ids, samples, drafts, finished outputs) goes through
    the writer's own hasher (`spec.capture_format.TokenHasher`) under that key, as `hash_token_ids` does inside
    vLLM; the placeholder draft -1 stays.
    """
    h: Callable[[int], int] = TokenHasher(hash_key).one if hash_key is not None else (lambda t: t)

    def ids(tokens: Iterable[int]) -> list[int]:
        return [t if t < 0 else h(t) for t in tokens]

    workload, records = trace.workload, {r.step: r for r in trace.steps}
    lines: list[dict[str, Any]] = [header(trace, session, hashed=hash_key is not None)]
    calls = 0
    index_of: dict[int, int] = {}  # loop step -> its schedule() call
    for r in trace.steps:
        for rid in r.added:
            q = workload.request(rid).request.to_json()
            q["prompt_token_ids"], q["stop_token_ids"] = ids(q["prompt_token_ids"]), ids(q["stop_token_ids"])
            q["eos_token_id"] = None if q["eos_token_id"] is None else h(q["eos_token_id"])
            lines.append({"kind": "add", "step": calls, "request": q})
        finished = {
            rid: {"status": f.status.name, "output_token_ids": ids(f.output_token_ids)} for rid, f in r.finished.items()
        }
        if r.aborted:
            lines.append(
                {
                    "kind": "abort",
                    "step": calls,
                    "request_ids": list(r.aborted),
                    "finished": {rid: f for rid, f in finished.items() if rid in r.aborted},
                }
            )
        if r.scheduled:
            output = r.output.to_json()
            output["scheduled_spec_decode_tokens"] = {
                k: ids(v) for k, v in output["scheduled_spec_decode_tokens"].items()
            }
            lines.append({"kind": "schedule", "step": calls, "output": output})
            index_of[r.step] = calls
            calls += 1
        if r.aborted_mid_step:  # EngineCore's aborts queue: after the model ran, before the update
            lines.append(
                {
                    "kind": "abort",
                    "step": calls,
                    "request_ids": list(r.aborted_mid_step),
                    "finished": {rid: f for rid, f in finished.items() if rid in r.aborted_mid_step},
                }
            )
        if r.updated_step is not None:
            answer = records[r.updated_step].model_output
            lines.append(
                {
                    "kind": "update",
                    "step": calls - 1,
                    "of_step": index_of[r.updated_step],
                    "sampled": {k: ids(v) for k, v in answer.sampled_token_ids.items()},
                    **({"pooler_output": sorted(answer.pooler_output)} if answer.pooler_output else {}),
                    "finished": {
                        rid: f for rid, f in finished.items() if rid not in r.aborted and rid not in r.aborted_mid_step
                    },
                }
            )
        if r.draft_token_ids:
            lines.append(
                {
                    "kind": "drafts",
                    "step": calls - 1,
                    "draft_token_ids": {k: ids(v) for k, v in r.draft_token_ids.items()},
                }
            )
    if end is not None:
        lines.append({"kind": "end", "step": calls, "reason": end})
    return lines


def write_capture(path: str, lines: list[dict[str, Any]], lines_per_part: int | None = None) -> list[str]:
    """Write capture lines to `path` (and `path.1`, ... every `lines_per_part` lines, each part with its header).

    The header of part N is the session's first header with `part` N and `first_step` the schedule() calls
    before it, as the live writer rotates. Returns the paths written.
    """
    head, body = lines[0], lines[1:]
    size = lines_per_part or max(1, len(body))
    paths, calls = [], 0
    for n, k in enumerate(range(0, max(1, len(body)), size)):
        chunk = body[k : k + size]
        part = {**head, "part": n, "first_step": calls}
        calls += sum(1 for line in chunk if line["kind"] == "schedule")
        p = path if n == 0 else f"{path}.{n}"
        with open(p, "wb") as f:
            f.writelines(encode_line(line) + b"\n" for line in [part, *chunk])
        paths.append(p)
    return paths
