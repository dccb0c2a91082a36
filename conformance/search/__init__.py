"""Searches that decide a verdict, bounded by counts: killing a mutant, and hunting an engine.

The two words are kept apart: a mutant is *killed* (the kill matrix's
word), an engine is *hunted* (`schedspec hunt`). `kill_campaign.py` and
`subject.py` kill a mutant of the reference with the monitors and the
differ; `state_machine.py` is the reference's Hypothesis state machine and
`state_machine_kill.py` its search for a mutant; `lockstep_*.py` hunt an
engine beside the reference from a state machine (`schedspec hunt`);
`budget.py` turns a count budget and a safety cap into verdicts;
`user_mutants.py` loads a user's mutant module. May import `harness` and
`workloads`.
"""
