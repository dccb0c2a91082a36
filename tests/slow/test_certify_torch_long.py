"""The full campaign for the torch engine: 5000 workloads against the reference at level `blocks`, on the CPU.

Run with `.venv/bin/python -m pytest -m slow tests/slow/test_certify_torch_long.py` (about a minute on
the 2-core dev box). With a GPU, `benchmarks/gpu_check.sh` runs the same check on CUDA.
"""

import json

from schedspec.cli import main


def test_torch_engine_certified_on_the_full_campaign(tmp_path, monkeypatch):
    monkeypatch.setenv("SCHEDSPEC_TORCH_DEVICE", "cpu")
    out = tmp_path / "cert"
    assert main(["certify", "--engine", "torch", "--level", "blocks", "--workloads", "5000", "--seed", "5",
                 "--out", str(out)]) == 0
    cert = json.loads((out / "certificate.json").read_text())
    assert cert["passed"] and cert["workloads_run"] == 5000 and not cert["invariant_violations"]
    assert not cert["determinism"]["nondeterministic"] and not cert["counterexamples"]
