"""The conformance harness: does an engine schedule as vLLM 0.33.0's V1 scheduler does?

It drives engines through the `spec.engine.Engine` protocol: the reference,
the torch engine, the real vLLM behind a driver pipe (`engines/`), or anyone's
`module:callable`. The lock-step differ runs one workload on two engines and
stops at the first divergence; workload families and `schedspec certify` turn
that into a campaign and a certificate; shrinking and counterexample files make
a finding small and replayable. The same package measures its own checkers:
mutants of the reference (planted bugs), the hunts that search for them with
each checker (the invariant monitors, the differ, Z3, Hypothesis's state
machine, CrossHair), and the mutant x checker kill matrix.
"""
