"""Proof counterexamples as files and as tables a person reads.

A Z3 counterexample is a state, not a workload: the scheduler state that
one step leads astray, with the token each request samples. It is written
in the counterexample format (`kind: "state"`), which `schedspec replay`
reads: replay steps the reference from that state and shows the state
before and after as two small tables, naming the broken invariant.
"""

from __future__ import annotations

from typing import Any

from rich.table import Table

from ...spec.errors import SpecError
from ...spec.invariants import PROVABLE
from ...spec.jsonio import read_json, write_json_atomic
from ...spec.state import SchedulerState, state_from_json, state_to_json
from .concrete import Sampled, replay

STATE_KIND = "state"


def write_state_counterexample(
    path: str,
    invariant: str,
    n: int,
    policy: str,
    state: SchedulerState,
    sampled: Sampled,
    mutant: str | None = None,
) -> None:
    write_json_atomic(
        path,
        {
            "version": 1,
            "kind": STATE_KIND,
            "invariant": invariant,
            "requests": n,
            "policy": policy,
            "mutant": mutant,
            "sampled_token": sampled,
            "state": state_to_json(state),
        },
    )


def load_state_counterexample(path: str) -> dict[str, Any]:
    data = read_json(path)
    where = f"{path}:counterexample"
    if not isinstance(data, dict) or data.get("kind") != STATE_KIND:
        raise SpecError(f"{where}.kind", data.get("kind") if isinstance(data, dict) else data, f"is not {STATE_KIND!r}")
    if data.get("invariant") not in PROVABLE:
        raise SpecError(f"{where}.invariant", data.get("invariant"), f"must be one of {', '.join(PROVABLE)}")
    data["state"] = state_from_json(data.get("state", {}), f"{where}.state")
    _check_sampled(data.get("sampled_token"), data["state"], f"{where}.sampled_token")
    return data


def _token_ids(x: Any) -> bool:
    return isinstance(x, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in x)


def _check_sampled(sampled: Any, state: SchedulerState, where: str) -> None:
    """What each request samples, in the shape `concrete.to_state` writes for the state's features."""
    if not isinstance(sampled, dict):
        raise SpecError(where, sampled, "must map each request id to what it samples")
    c = state.config
    for rid in state.requests:
        here, v = f"{where}.{rid}", sampled.get(rid)
        if not (c.num_speculative_tokens or c.async_scheduling):
            if not isinstance(v, int) or isinstance(v, bool):
                raise SpecError(here, v, "must be the token id it samples")
            continue
        if not isinstance(v, dict) or not _token_ids(v.get("tokens")):
            raise SpecError(
                f"{here}.tokens", v.get("tokens") if isinstance(v, dict) else v, "must be a list of token ids"
            )
        if c.async_scheduling:  # the step in flight: null, or [tokens >= 1, drafts >= 0]
            f = v.get("in_flight")
            if f is not None and not (_token_ids(f) and len(f) == 2 and f[0] >= 1 and f[1] >= 0):
                raise SpecError(f"{here}.in_flight", f, "must be null or [tokens >= 1, drafts >= 0]")
        elif not isinstance(v.get("drafts"), int) or v["drafts"] < 0:
            raise SpecError(f"{here}.drafts", v.get("drafts"), "must be the drafter's next proposal, an int >= 0")


def state_table(state: SchedulerState, title: str) -> Table:
    t = Table(title=title)
    c = state.config
    drafts, caching, asy = (
        c.num_speculative_tokens > 0,
        c.enable_prefix_caching,
        c.async_scheduling,
    )  # only where they exist
    for col in (
        "request",
        "status",
        "queue",
        "prompt",
        "outputs",
        "computed",
        "blocks",
        "max_tokens",
        "priority",
        *(("drafts",) if drafts else ()),
        *(("blocks (ids)",) if caching else ()),
        *(("placeholders", "in flight", "stale") if asy else ()),
    ):
        t.add_column(col)
    where = {rid: f"running[{i}]" for i, rid in enumerate(state.running)}
    where.update({rid: f"waiting[{i}]" for i, rid in enumerate(state.waiting)})
    for rid, r in state.requests.items():
        t.add_row(
            rid,
            r.status.name,
            where.get(rid, "-"),
            str(r.request.num_prompt_tokens),
            str(r.num_output_tokens),
            str(r.num_computed_tokens),
            str(len(r.block_ids)),
            str(r.request.max_tokens),
            str(r.request.priority),
            *((str(len(r.spec_token_ids)),) if drafts else ()),
            *((str(list(r.block_ids)),) if caching else ()),
            *(
                (str(r.num_output_placeholders), str(r.num_in_flight_tokens), str(r.num_stale_output_tokens))
                if asy
                else ()
            ),
        )
    t.caption = (
        f"free blocks {state.num_free_blocks}/{c.num_usable_blocks}, budget {c.token_budget}, "
        f"max_num_seqs {c.max_num_seqs}, max_model_len {c.max_model_len}, block_size {c.block_size}, "
        f"threshold {c.long_prefill_token_threshold}, watermark blocks {c.watermark_blocks}, "
        f"chunked prefill {c.enable_chunked_prefill}, full-sequence gate {c.scheduler_reserve_full_isl}"
        + (f", k {c.num_speculative_tokens}" if drafts else "")
        + (
            f", cached blocks {sorted(b for bs in state.cached_block_hash_to_block.values() for b in bs)}"
            if caching
            else ""
        )
    )
    return t


def replay_state(data: dict[str, Any]) -> tuple[bool, list[Any]]:
    """Step the reference from the stored state; whether the invariant breaks, and what to print."""
    invariant = PROVABLE[data["invariant"]]
    if data.get("mutant"):  # the counterexample was found with a planted bug: replay it with that bug
        from ...mutants import BY_NAME as MUTANTS, applied

        if data["mutant"] not in MUTANTS:
            raise SpecError("counterexample.mutant", data["mutant"], "is not a known mutant")
        with applied(MUTANTS[data["mutant"]]):
            broken, what = replay(data["state"], data["sampled_token"], invariant)
    else:
        broken, what = replay(data["state"], data["sampled_token"], invariant)
    shown: list[Any] = [state_table(data["state"], "before the step")]
    if "error" in what:
        shown.append(what["error"])
    else:
        out = what["output"]
        absorbed = "the step in flight returned" if data["state"].config.async_scheduling else "sampled"
        shown.append(
            f"scheduled {dict(out.num_scheduled_tokens)}, preempted {sorted(out.preempted_req_ids)}, "
            f"admitted {[n.req_id for n in out.scheduled_new_reqs]}, {absorbed} {dict(what['model_output'].sampled_token_ids)}"
            + (
                f", drafts scheduled {dict((r, len(d)) for r, d in out.scheduled_spec_decode_tokens.items())}"
                if out.scheduled_spec_decode_tokens
                else ""
            )
            + (
                f", prefix hits {dict((n.req_id, n.num_computed_tokens) for n in out.scheduled_new_reqs if n.num_computed_tokens)}"
                if data["state"].config.enable_prefix_caching
                else ""
            )
        )
        shown.append(state_table(what["post"], "after the step"))
    planted = f" (with mutant {data['mutant']})" if data.get("mutant") else ""
    shown.append(f"{'[red]violated' if broken else '[green]holds'}{planted}: {invariant.name}: {invariant.sentence}")
    return broken, shown
