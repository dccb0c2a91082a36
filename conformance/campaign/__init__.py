"""`schedspec certify`: a campaign planned, run on workers, judged and written as a certificate.

`certify.py` plans and runs it; `task.py` is one workload as a worker runs
it (diff, monitors, determinism, shrinking); `batched.py` runs the torch
engine's campaign in batches; `behaviour_coverage.py` (behaviours seen) and
`cell_coverage.py` with `events.py` and `running_pass.py` (the cells of the
coverage map) say what the campaign reached; `certificate_text.py` writes
the Markdown and JUnit. May import `engines`, `harness` and `workloads`.
"""
