"""The README's main job: the torch engine against the reference on the default campaign, on the CPU.

1,200 workloads across every family (`schedspec certify --engine torch
--workloads 1200`) run as one batch of instances (the batched fast path of
`certify`); the certificate must pass with every invariant monitor silent,
every behaviour counted, and every possible cell of the coverage map reached
(`conformance/campaign/cell_coverage.py`). A few workloads also run in lock-step mode,
so both paths stay certified.
"""

import json

import pytest

from schedspec.cli import main
from schedspec.conformance.campaign import batched


@pytest.mark.slow_ok("the README's main job, scaled down: the torch engine certified, every possible cell reached")
def test_the_main_job_passes_and_reaches_every_possible_cell(tmp_path, monkeypatch):
    monkeypatch.setenv("SCHEDSPEC_TORCH_DEVICE", "cpu")
    out = tmp_path / "cert"
    assert main(["certify", "--engine", "torch", "--workloads", "1200", "--out", str(out)]) == 0
    cert = json.loads((out / "certificate.json").read_text())
    assert cert["passed"] and cert["workloads_run"] == 1200 and not cert["invariant_violations"]
    assert cert["level"] == "blocks" and cert["campaign"]["seed"] == 0
    assert cert["determinism"]["checked"] == 120 and not cert["determinism"]["nondeterministic"]
    assert all(c["matched"] == c["workloads"] for c in cert["per_family"].values())
    assert all(n > 0 for n in cert["coverage"].values()), cert["coverage"]
    cmap = cert["coverage_map"]
    assert cmap["never_reached"] == [] and cmap["cells_reached"] == cmap["cells_possible"] == 420, cmap
    assert (
        f"{cmap['cells_possible']} of {cmap['cells_possible']} possible cells reached"
        in (out / "certificate.md").read_text()
    )


def test_torch_lock_step_campaign_passes(tmp_path, monkeypatch):
    monkeypatch.setenv("SCHEDSPEC_TORCH_DEVICE", "cpu")
    monkeypatch.setenv(batched.LOCKSTEP_ENV, "1")
    out = tmp_path / "cert"
    assert main(["certify", "--engine", "torch", "--workloads", "45", "--seed", "4", "--out", str(out)]) == 0
    assert json.loads((out / "certificate.json").read_text())["passed"]
