"""One older vLLM release in the default suite: 0.28.0, the one furthest from 0.33.0 (every variant rule and
every known violation of `spec/versions.py` lies between them).

CI's test command builds its venv (`conformance/vllm_env/setup_vllm_ref.sh 0.28.0`); on a developer machine
without it the tests are skipped with the command to run. The other releases are
`tests/slow/test_vllm_releases_long.py`'s.
"""

import json

import pytest

from schedspec.cli import main
from schedspec.conformance.engines.engine_spec import parse_engine
from schedspec.conformance.engines.registry import engine_factory
from schedspec.conformance.engines.vllm import vllm_venv_ready
from schedspec.conformance.harness.differ import diff
from schedspec.conformance.workloads.release_examples import VERSION_WORKLOADS, at
from schedspec.reference_impl import ReferenceEngine

RELEASE = "0.28.0"
needs_venv = pytest.mark.skipif(
    not vllm_venv_ready(release=RELEASE),
    reason=f"no vLLM {RELEASE} venv: run conformance/vllm_env/setup_vllm_ref.sh {RELEASE}",
)


@needs_venv
@pytest.mark.slow_ok("the oldest release modelled, certified end to end on its own venv: 100 workloads")
def test_vllm_0_28_0_is_certified_against_the_reference_at_0_28_0(tmp_path):
    out = tmp_path / "cert"
    argv = ["certify", "--engine", f"vllm=={RELEASE}", "--workloads", "100", "--level", "blocks", "--no-plots"]
    status = main([*argv, "--out", str(out)])
    cert = json.loads((out / "certificate.json").read_text())
    assert status == 0 and cert["passed"], cert["counterexamples"] or cert["errors"] or cert["invariant_violations"]
    assert cert["engine_version"] == f"vllm {RELEASE}" and cert["workloads_run"] == 100


@needs_venv
def test_the_variant_workloads_run_on_vllm_0_28_0_as_the_reference_at_0_28_0_says():
    factory = engine_factory(parse_engine(f"vllm=={RELEASE}"))
    try:
        for name, make in VERSION_WORKLOADS.items():
            r = diff(at(make(), RELEASE), ReferenceEngine, factory, "blocks")
            assert r.error is None and r.divergence is None, (name, r.divergence or r.error)
    finally:
        factory.close_all()
