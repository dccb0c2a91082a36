"""Formal checks of the reference: Z3 proofs and CrossHair contracts.

The Z3 side encodes one `schedule()` plus `update_from_output()` over N
request slots as a formula (`encoding*.py`, with async scheduling, spec decode
and prefix caching in `features.py`) and proves every invariant of the
catalogue inductive for bounded N, cutting the running pass at a loop invariant
where the whole step is too big (`cuts.py`); liveness findings and drift tests
(the encoding against the reference on concrete steps) keep the model honest,
and a failed proof comes back as a replayable concrete state. The CrossHair side
checks the invariants as contracts on the reference itself, over bounded
symbolic scenarios (`contracts.py`, `bounded.py`).
"""
