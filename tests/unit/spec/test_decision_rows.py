"""The decision invariants' row forms agree with their walks, the twins they restate for Z3.

`decision_rows.py` states six of the eight decision invariants a second
time, over a view's rows, so that Z3 can prove them. A twin that drifts from
its walk proves the wrong rule. So on every step of the core families both
must hold, and a step that breaks a row form must break its walk too: a row
form may be weaker than its walk (under PRIORITY it bounds what a turn after
a victim got), never stronger. A tampered step shows each row form can fail.
"""

from __future__ import annotations

import dataclasses

import pytest

from schedspec.conformance.search.kill_campaign import CORE_FAMILIES
from schedspec.conformance.workloads.families import generate
from schedspec.reference_impl import simulate
from schedspec.spec.invariants import DECISION_ROWS, DECISIONS, check_trace
from schedspec.spec.invariants.decision_rows import DECISION_ROWS_BY_NAME
from schedspec.spec.invariants.replay import TraceReplay


def test_six_decisions_have_a_row_form_and_the_rest_are_left_to_the_monitors():
    """Block ids and hashes are abstracted away by the Z3 encoding, and the deployment features (structured output,
    LoRA, pipeline parallel's cadence, the engine's calls outside schedule(), pooling) are outside its scope."""
    assert [d.name for d in DECISION_ROWS] == [d.name for d in DECISIONS if d.name in DECISION_ROWS_BY_NAME]
    assert {d.name for d in DECISIONS} - set(DECISION_ROWS_BY_NAME) == {
        "prefix-hit-exact",
        "block-choice-exact",
        "grammar-wait-exact",
        "lora-limit-exact",
        "decode-cadence-exact",
        "prefill-cadence-exact",
        "controls-exact",
        "pooling-exact",
    }
    for row, walk in zip(DECISION_ROWS, [d for d in DECISIONS if d.name in DECISION_ROWS_BY_NAME]):
        assert (row.sentence, row.vllm, row.ids) == (walk.sentence, walk.vllm, walk.ids)
        assert row.holds is not walk.holds


@pytest.mark.parametrize("family", CORE_FAMILIES)
def test_the_reference_keeps_every_row_form_and_every_walk(family):
    for i in range(8):
        trace = simulate(generate(family, 11, i))
        assert check_trace(trace, DECISION_ROWS) == [], trace.workload.name
        assert check_trace(trace, DECISIONS) == [], trace.workload.name


def _views(family: str, seed: int, index: int = 0):
    trace = simulate(generate(family, seed, index))
    replay = TraceReplay(trace)
    return [replay.step(rec) for rec in trace.steps]


def _first(views, applies):
    return next((v, r) for v in views for r in v.rows if applies(v, r))


def _with_row(view, row, **changes):
    rows = tuple(dataclasses.replace(r, **changes) if r is row else r for r in view.rows)
    return dataclasses.replace(view, rows=rows)


def test_each_row_form_catches_a_tampered_step():
    views = _views("budget", 3) + _views("kv-pressure", 1, 2) + _views("stops", 3)
    for v in views:  # the untampered steps are clean
        assert all(inv.holds(v) for inv in DECISION_ROWS)
    form = DECISION_ROWS_BY_NAME

    v, r = _first(views, lambda v, r: r.pre_running and r.scheduled)
    assert not form["grant-exact"].holds(_with_row(v, r, num_scheduled=r.num_scheduled + 1))

    v, r = _first(views, lambda v, r: r.pre_running and r.scheduled and r.pre_run_pos == 0)
    assert not form["running-work-conserving"].holds(_with_row(v, r, scheduled=False, num_scheduled=0))

    v, r = _first(views, lambda v, r: r.admitted)
    assert not form["admission-exact"].holds(_with_row(v, r, admitted=False))

    v, r = _first(views, lambda v, r: r.pre_live and r.post_live and r.scheduled)
    assert not form["rollback-exact"].holds(_with_row(v, r, post_num_computed_tokens=r.post_num_computed_tokens + 1))
    assert not form["stop-exact"].holds(_with_row(v, r, post_live=False))

    v, r = _first(views, lambda v, r: r.preempted)
    assert v.fcfs
    survivor = next(q for q in v.rows if q.pre_running and not q.preempted)
    # A survivor behind the victim: the victims are no longer the tail of running.
    assert not form["victims-exact"].holds(_with_row(v, survivor, pre_run_pos=r.pre_run_pos + len(v.rows)))
