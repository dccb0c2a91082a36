"""`schedspec changelog`: what the scheduler changed between two releases, or a branch and its release.

`clusters.py` explains each divergence by the spec's variant rules and
clusters them; `source_hunks.py` finds the changed scheduler hunks between
two vLLM packages, and `hunk_reach.py` measures which of them a campaign's
drivers ran; `report.py` writes it all as `changelog.md` and
`changelog.json`. May import `engines` and `harness`.
"""
