"""Formal checks of the reference: Z3 proofs and CrossHair contracts, in four subpackages.

* `encoding/`: one `schedule()` plus `update_from_output()` over N request
  slots as a formula (`step.py`: the running pass, the waiting pass and the
  update, with spec decode, prefix caching and async scheduling behind
  concrete flags), and the symbolic pre-state and views (`symbolic.py`).
* `drift/`: the encoding run on ints against the reference's own steps, core
  and features, so the model cannot drift from the code it abstracts.
* `runs/`: what proves and reports. Every invariant of the catalogue proved
  inductive for bounded N (`prove.py`, `features.py`), the running pass cut
  at a loop invariant where the whole step is too big (`cuts.py`), liveness
  findings, the per-request async lemma, and a failed proof turned into a
  replayable concrete state (`concrete.py`, `report.py`).
* `crosshair/`: the invariants as CrossHair contracts on the reference
  itself, over bounded symbolic scenarios (`contracts.py`, `bounded.py`),
  each run and replayed in a reused worker process that plants the same
  mutant (`runner.py`, `pool.py`).
"""
