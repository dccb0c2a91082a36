"""What a person reads: step tables, timelines, divergences side by side, and the kill tables.

Pictures and tables only: each function takes finished values (a trace, the
digests of its steps, a counterexample, kills) and draws them. The one
exception is `counterexample_timelines.py`, which must run both engines again
to draw their whole runs, because a counterexample file holds the workload,
not the runs. May import every layer and the library modules of
`schedspec/`; never `schedspec.cli` (`tests/unit/project/test_layers.py`).
"""
