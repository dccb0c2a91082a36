"""The state machine over the reference, long profile: thousands of runs, every invariant at every step.

Two worlds: the default bounds (max_model_len <= 16, a cache of one to two
sequences), where preemption is routine, and a wider one (max_model_len up to
64, eight sequences, a cache of up to three) where numbers are larger and
chunking and the threshold bite more often. Each run is derandomized, so a
failure here reproduces; the failure message is the run as a program, and
the finding's workload replays it through `simulate()`.
"""

import pytest

from schedspec.conformance.search.state_machine import Bounds
from schedspec.conformance.search.state_machine_kill import LONG, kill_by_state_machine

WORLDS = {
    "default": Bounds(),
    "wide": Bounds(max_model_len=(4, 64), max_num_seqs=8, max_sequences_in_cache=3),
}


@pytest.mark.parametrize("world", list(WORLDS))
def test_reference_keeps_every_invariant_over_thousands_of_runs(world):
    finding = kill_by_state_machine(
        None,
        budget_s=None,  # bounded by its count of examples alone
        max_examples=LONG.max_examples,
        step_count=LONG.stateful_step_count,
        bounds=WORLDS[world],
    )
    assert finding is None, f"{finding.what} after {finding.size} (requests, steps):\n{finding.original}"
