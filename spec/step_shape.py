"""A quick, sufficient test that a trace step is valid against the step schema.

jsonschema walks a step of a few hundred live requests in about 20 ms,
which for a trace of 10,000 requests was most of `schedspec check`'s time.
`plainly_valid` answers the same question for the usual step with plain
loops, and is only ever allowed to be stricter than the schema: when it
says True the schema would say so too; when it says False (a status the
pattern admits with a trailing newline, or a real error) the caller asks
jsonschema, whose
verdict and message stand. So the schema in `trace.schema.json` stays the
one definition, and a field added there only makes this test fail safe
(`tests/unit/spec/test_trace_stream.py` holds it to being stricter).
"""

from __future__ import annotations

import re
from typing import Any

from .request import RequestStatus

_STEP = frozenset(
    {
        "step",
        "added",
        "aborted",
        "output",
        "model_output",
        "state",
        "finished",
        "updated_step",
        "draft_token_ids",
        "scheduled",
        "in_flight",
        "aborted_mid_step",
        "grammars",
    }
)
_STEP_REQUIRED = frozenset({"step", "added", "aborted", "output", "model_output", "state", "finished"})
_OUTPUT = frozenset(
    {
        "num_scheduled_tokens",
        "scheduled_new_reqs",
        "scheduled_cached_reqs",
        "scheduled_spec_decode_tokens",
        "preempted_req_ids",
        "finished_req_ids",
    }
)
_OUTPUT_REQUIRED = _OUTPUT - {"scheduled_spec_decode_tokens"}
_NEW_REQ = frozenset({"req_id", "num_computed_tokens", "block_ids", "resumed"})
_CACHED_REQ = frozenset({"req_id", "num_computed_tokens", "new_block_ids"})
_STATE = frozenset({"running", "waiting", "num_free_blocks", "requests", "num_skipped_waiting"})
_STATE_REQUIRED = frozenset({"running", "waiting", "num_free_blocks", "requests"})
_SUMMARY = frozenset({"status", "num_computed_tokens", "num_tokens", "grammar"})
_SUMMARY_REQUIRED = frozenset({"status", "num_computed_tokens", "num_tokens"})
_GRAMMARS = ("compiling", "compiled", "failed")  # a tuple: `in` must not hash an unhashable value
_FINISHED = frozenset({"status", "output_token_ids"})
# The schema's status pattern is ^[A-Z_]+$; the status names are a subset of what it admits.
_STATUSES = frozenset(n for n in RequestStatus.__members__ if re.fullmatch(r"[A-Z_]+", n))


def _bools(m: Any) -> bool:
    return type(m) is dict and all(type(k) is str and type(v) is bool for k, v in m.items())


def _int(x: Any) -> bool:
    return type(x) is int  # not bool, which JSON Schema does not count as an integer


def _nat(x: Any) -> bool:
    return type(x) is int and x >= 0


def _ids(x: Any) -> bool:
    return type(x) is list and all(type(i) is str for i in x)


def _ints(x: Any) -> bool:
    return type(x) is list and all(type(i) is int for i in x)


def _nats(x: Any) -> bool:
    return type(x) is list and all(type(i) is int and i >= 0 for i in x)


def _int_lists(x: Any) -> bool:
    return type(x) is dict and all(_ints(v) for v in x.values())


def _keys(x: Any, allowed: frozenset[str], required: frozenset[str]) -> bool:
    return type(x) is dict and x.keys() <= allowed and required <= x.keys()


def plainly_valid_output(o: Any) -> bool:
    if not _keys(o, _OUTPUT, _OUTPUT_REQUIRED):
        return False
    pairs = o["num_scheduled_tokens"]
    if type(pairs) is not list or not all(
        type(p) is list and len(p) == 2 and type(p[0]) is str and type(p[1]) is int for p in pairs
    ):
        return False
    new = o["scheduled_new_reqs"]
    if type(new) is not list or not all(
        _keys(n, _NEW_REQ, _NEW_REQ - {"resumed"})
        and type(n["req_id"]) is str
        and _int(n["num_computed_tokens"])
        and _nats(n["block_ids"])
        and type(n.get("resumed", False)) is bool
        for n in new
    ):
        return False
    cached = o["scheduled_cached_reqs"]
    if type(cached) is not list or not all(
        _keys(c, _CACHED_REQ, _CACHED_REQ)
        and type(c["req_id"]) is str
        and _int(c["num_computed_tokens"])
        and (c["new_block_ids"] is None or _nats(c["new_block_ids"]))
        for c in cached
    ):
        return False
    return (
        _int_lists(o.get("scheduled_spec_decode_tokens", {}))
        and _ids(o["preempted_req_ids"])
        and _ids(o["finished_req_ids"])
    )


def plainly_valid_state(s: Any) -> bool:
    if not (
        _keys(s, _STATE, _STATE_REQUIRED)
        and _ids(s["running"])
        and _ids(s["waiting"])
        and _nat(s["num_free_blocks"])
        and _nat(s.get("num_skipped_waiting", 0))
    ):
        return False
    requests = s["requests"]
    return type(requests) is dict and all(
        _keys(r, _SUMMARY, _SUMMARY_REQUIRED)
        and type(r["status"]) is str
        and r["status"] in _STATUSES
        and _int(r["num_computed_tokens"])
        and _int(r["num_tokens"])
        and r.get("grammar", "compiled") in _GRAMMARS
        for r in requests.values()
    )


def plainly_valid_finished(f: Any) -> bool:
    """A step's `finished` map, or `update_from_output()`'s answer."""
    return type(f) is dict and all(plainly_valid_finished_request(r) for r in f.values())


def plainly_valid_finished_request(r: Any) -> bool:
    """One finished request, as `abort_request()` answers it."""
    return (
        _keys(r, _FINISHED, _FINISHED)
        and type(r["status"]) is str
        and r["status"] in _STATUSES
        and _ints(r["output_token_ids"])
    )


def plainly_valid(d: Any) -> bool:
    """True only if `d` is valid against the step schema (`trace.schema.json`, `properties.steps.items`)."""
    if not _keys(d, _STEP, _STEP_REQUIRED):
        return False
    updated = d.get("updated_step")
    return (
        _nat(d["step"])
        and _ids(d["added"])
        and _ids(d["aborted"])
        and plainly_valid_output(d["output"])
        and _int_lists(d["model_output"])
        and plainly_valid_state(d["state"])
        and plainly_valid_finished(d["finished"])
        and (updated is None or _nat(updated))
        and _int_lists(d.get("draft_token_ids", {}))
        and type(d.get("scheduled", True)) is bool
        and _nats(d.get("in_flight", []))
        and _ids(d.get("aborted_mid_step", []))
        and _bools(d.get("grammars", {}))
    )
