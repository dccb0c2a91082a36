"""Searches that decide a verdict, bounded by counts: hunting mutants, and hunting an engine.

`hunt.py` and `subject.py` hunt a mutant of the reference with the monitors
and the differ; `state_machine*.py` is the reference's Hypothesis state
machine and its hunt; `lockstep_*.py` drive an engine beside the reference
from a state machine (`schedspec hunt`); `budget.py` turns a count budget
and a safety cap into verdicts; `user_mutants.py` loads a user's mutant
module. May import `harness` and `workloads`.
"""
