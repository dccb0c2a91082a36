"""The Z3 runs: the induction proofs and what they report.

`prove.py` proves each invariant of the catalogue inductive for N slots under both policies, splitting the step
into its two exact cases and cutting the running pass at a loop invariant (`cuts.py`); `features.py` does the
same with spec decode, prefix caching and async scheduling in the step. `liveness.py` searches for stuck states,
`async_request.py` proves the per-request async lemma, and `concrete.py` and `report.py` turn a model into a
concrete state, replay it on the reference and write it as a counterexample.
"""
