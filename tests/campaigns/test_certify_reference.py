"""A bounded campaign of the reference against itself: the harness's own control.

It must pass with every invariant monitor silent, and its coverage counters
must show that the families reach the behaviours they aim at.
"""

import json

from schedspec.cli import main


def test_reference_campaign_passes_and_covers_every_behaviour(tmp_path):
    out = tmp_path / "cert"
    assert main(["certify", "--engine", "reference", "--workloads", "450", "--seed", "3", "--out", str(out)]) == 0
    cert = json.loads((out / "certificate.json").read_text())
    assert cert["passed"] and not cert["invariant_violations"]
    assert all(n > 0 for n in cert["coverage"].values()), cert["coverage"]
