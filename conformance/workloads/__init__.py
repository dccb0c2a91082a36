"""The workloads a campaign draws: sixteen families, each a seeded generator.

`families.py` is the catalogue and the per-release mapping (`at_release`);
`edges.py` and `mixed.py` hold the edge and mixed families, registered by
`families.py`; `strategies.py` gives the same draws as Hypothesis strategies.
The hand-written workloads live here too: `builtin.py` (the names
`schedspec simulate` takes, and the workload file reader) and
`release_examples.py` (one workload per behaviour change between releases).
Imports no room: a workload is spec data.
"""
