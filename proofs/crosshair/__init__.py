"""CrossHair contracts: every invariant of the catalogue checked on the reference itself, over bounded scenarios.

`bounded.py` decodes CrossHair's symbolic ints into a small well-formed workload, `bounded_run.py` runs it on the
reference's pure API, `contracts.py` states the contracts, and `runner.py` runs them in long-lived worker
processes (`pool.py`: one import per worker, one mutant per worker) and replays what CrossHair reports.
"""
