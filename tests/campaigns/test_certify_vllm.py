"""A bounded campaign of the reference against the real vLLM 0.33.0, as CI runs it.

CI's test command builds the vLLM venv first (`conformance/vllm_env/setup_vllm_ref.sh`),
so here the venv must exist; on a developer machine without it the campaign
is skipped with the command to run. 300 workloads across all families take
about 15 s once the driver is up.
"""

import json

import pytest

from schedspec.cli import main
from schedspec.conformance.engines.engine_spec import parse_engine
from schedspec.conformance.engines.registry import engine_factory
from schedspec.conformance.engines.vllm import vllm_venv_ready
from schedspec.conformance.harness.differ import diff
from schedspec.conformance.workloads.release_examples import VERSION_WORKLOADS
from schedspec.reference_impl import ReferenceEngine


@pytest.mark.skipif(not vllm_venv_ready(), reason="no vLLM venv: run conformance/vllm_env/setup_vllm_ref.sh")
@pytest.mark.slow_ok("the 300-workload campaign against vLLM 0.33.0 that the README says CI runs")
def test_reference_matches_vllm_on_a_bounded_campaign(tmp_path):
    out = tmp_path / "cert"
    rc = main(
        [
            "certify",
            "--engine",
            "vllm",
            "--workloads",
            "300",
            "--seed",
            "11",
            "--level",
            "blocks",
            "--jobs",
            "2",
            "--out",
            str(out),
        ]
    )
    cert = json.loads((out / "certificate.json").read_text())
    assert rc == 0 and cert["passed"], cert["counterexamples"] or cert["invariant_violations"]
    assert cert["workloads_run"] == 300
    assert cert["coverage"]["preemption"] > 0 and cert["coverage"]["chunked_prefill"] > 0


@pytest.mark.skipif(not vllm_venv_ready(), reason="no vLLM venv: run conformance/vllm_env/setup_vllm_ref.sh")
def test_the_release_variant_workloads_match_vllm_0_33_0():
    # Each shows one rule that changed before 0.33.0 (docs/versions.md); at 0.33.0 the real release must agree.
    # The older releases are held to the same workloads in tests/slow/test_vllm_releases_long.py.
    factory = engine_factory(parse_engine("vllm"))
    try:
        for name, make in VERSION_WORKLOADS.items():
            r = diff(make(), ReferenceEngine, factory, "blocks")
            assert r.error is None and r.divergence is None, (name, r.divergence or r.error)
    finally:
        factory.close_all()
