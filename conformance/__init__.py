"""The conformance harness: does an engine schedule as vLLM 0.33.0's V1 scheduler does?

It drives engines through the `spec.engine.Engine` protocol: the reference,
the torch engine, the real vLLM behind a driver pipe (`engines/`), or anyone's
`module:callable`. The lock-step differ runs one workload on two engines and
stops at the first divergence; workload families and `schedspec certify` turn
that into a campaign and a certificate; shrinking and counterexample files make
a finding small and replayable; planted divergences and misbehaving engines
show that the harness catches what it claims to. For the mutant x checker kill
matrix (`schedspec/mutation.py`) it hunts the mutants of `schedspec.mutants`
with three of the checkers: the invariant monitors, the differ, and a
Hypothesis state machine over the reference (Z3 and CrossHair are `proofs/`).
"""
