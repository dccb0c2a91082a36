"""Long campaigns: thousands of workloads against vLLM, and long mutant hunts.

Run with `.venv/bin/python -m pytest -m slow tests/slow`.
"""

import json

import pytest

from schedspec.cli import main
from schedspec.conformance.engines.vllm import vllm_venv_ready


@pytest.mark.skipif(not vllm_venv_ready(), reason="no vLLM venv: run conformance/vllm_env/setup_vllm_ref.sh")
def test_reference_matches_vllm_on_3000_workloads(tmp_path):
    out = tmp_path / "cert"
    assert (
        main(["certify", "--engine", "vllm", "--workloads", "3000", "--seed", "5", "--jobs", "2", "--out", str(out)])
        == 0
    )
    assert json.loads((out / "certificate.json").read_text())["passed"]
