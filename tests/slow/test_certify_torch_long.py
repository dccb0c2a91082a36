"""The full campaign for the torch engine: 5000 workloads against the reference at level `blocks`, on the CPU.

The campaign draws every family, the feature ones (`prefix-caching`, `spec-decode`, `async`) included, and
each of those three also gets a campaign of its own, so a feature's workloads are not diluted by the rest.
Run with `.venv/bin/python -m pytest -m slow tests/slow/test_certify_torch_long.py` (about two minutes on
the 2-core dev box). With a GPU, `benchmarks/gpu_check.sh` runs the same check on CUDA.
"""

import json

import pytest

from schedspec.cli import main


def _certified(tmp_path, args: list[str], workloads: int) -> dict:
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
                str(workloads),
                "--out",
                str(out),
                *args,
            ]
        )
        == 0
    )
    cert = json.loads((out / "certificate.json").read_text())
    assert cert["passed"] and cert["workloads_run"] == workloads and not cert["invariant_violations"]
    assert not cert["determinism"]["nondeterministic"] and not cert["counterexamples"]
    return cert


def test_torch_engine_certified_on_the_full_campaign(tmp_path, monkeypatch):
    monkeypatch.setenv("SCHEDSPEC_TORCH_DEVICE", "cpu")
    cert = _certified(tmp_path, ["--seed", "5"], 5000)
    assert {"prefix-caching", "spec-decode", "async"} <= set(cert["per_family"])


@pytest.mark.parametrize("family", ["prefix-caching", "spec-decode", "async"])
def test_torch_engine_certified_on_each_feature_family(tmp_path, monkeypatch, family):
    monkeypatch.setenv("SCHEDSPEC_TORCH_DEVICE", "cpu")
    _certified(tmp_path, ["--family", family, "--seed", "6"], 1000)
