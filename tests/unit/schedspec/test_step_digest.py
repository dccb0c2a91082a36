"""The simulate table's columns describe one moment: a request is listed as finished in the step that
finished it, the same row whose queues and free blocks it left, not a step later when the output's
`finished_req_ids` reports it (I-18)."""

from __future__ import annotations

from schedspec.conformance.workloads.builtin import BUILTIN
from schedspec.reference_impl import simulate
from schedspec.render.step_digest import step_digest


def test_a_request_is_finished_in_the_row_that_it_leaves() -> None:
    workload = BUILTIN["seed-preemption"]()
    trace = simulate(workload)
    rows = {r.step: step_digest(r, workload) for r in trace.steps}
    finished_at = {rid: step for step, v in rows.items() for rid in v.finished}
    assert set(finished_at) == {r.request.request_id for r in workload.requests}
    for rid, step in finished_at.items():
        before = trace.steps[step - 1].state
        after = trace.steps[step].state
        assert rid in before.running and rid not in after.running and rid not in after.requests, (rid, step)
    # p0 and p1 finish together, and the row shows what they left: nothing running, every block free.
    assert finished_at["p0"] == finished_at["p1"]
    row = rows[finished_at["p0"]]
    assert (row.finished, row.running) == (("p0", "p1"), 0)
    assert row.free_blocks == workload.config.num_gpu_blocks - 1  # block 0 is the null block
