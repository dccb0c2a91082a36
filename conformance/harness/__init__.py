"""The lock-step harness: two engines, one workload, the first step where they part.

Holds the differ (`differ.py`: start and step deadlines, crashes, a solo
run), the comparison levels (`compare.py`), counterexample files and their
replay (`counterexample.py`), the count-bounded shrinker (`shrink.py`), the
explanation of a divergence as the rule that decides it (`explain.py`), and
worker pools that survive a dying task and die on an interrupt
(`workers.py`). May import `engines` (to check and snapshot an engine's
answers); no other room.
"""
