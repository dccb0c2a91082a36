"""A bounded campaign of the torch engine against the reference, at level `blocks`, on the CPU.

450 workloads across every family run as one batch of instances (the
batched fast path of `certify`); the certificate must pass with every
invariant monitor silent and every behaviour covered. A few workloads also
run in lock-step mode, so both paths stay certified.
"""

import json

from schedspec.cli import main
from schedspec.conformance import batched


def test_torch_campaign_passes_at_level_blocks(tmp_path, monkeypatch):
    monkeypatch.setenv("SCHEDSPEC_TORCH_DEVICE", "cpu")
    out = tmp_path / "cert"
    assert (
        main(
            [
                "certify",
                "--engine",
                "torch",
                "--level",
                "blocks",
                "--workloads",
                "450",
                "--seed",
                "3",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    cert = json.loads((out / "certificate.json").read_text())
    assert cert["passed"] and cert["workloads_run"] == 450 and not cert["invariant_violations"]
    assert cert["determinism"]["checked"] == 45 and not cert["determinism"]["nondeterministic"]
    assert all(c["matched"] == c["workloads"] for c in cert["per_family"].values())
    assert all(n > 0 for n in cert["coverage"].values()), cert["coverage"]


def test_torch_lock_step_campaign_passes(tmp_path, monkeypatch):
    monkeypatch.setenv("SCHEDSPEC_TORCH_DEVICE", "cpu")
    monkeypatch.setenv(batched.LOCKSTEP_ENV, "1")
    out = tmp_path / "cert"
    assert main(["certify", "--engine", "torch", "--workloads", "45", "--seed", "4", "--out", str(out)]) == 0
    assert json.loads((out / "certificate.json").read_text())["passed"]
