"""Every older vLLM release end to end: its venv built on first use, certified against the reference at that release.

Run with `.venv/bin/python -m pytest -m slow tests/slow/test_vllm_releases_long.py`. The first run builds
`.venv-vllm-<V>` for each release (about 2 minutes and 1.5 GB each, package registries needed); later runs
reuse them (`schedspec venvs --remove all` gives the space back).

Three things per release: each variant workload (`conformance/workloads/release_examples.py`) runs identically on the
release and on the reference at that release, on both sides of every rule; a campaign certifies the
release strictly (no `--allow-divergence`); and `schedspec changelog` between neighbours explains every
difference it finds.
"""

import json

import pytest

from schedspec.cli import main
from schedspec.conformance.engines.engine_spec import parse_engine
from schedspec.conformance.engines.registry import engine_factory
from schedspec.conformance.engines.vllm import ensure_vllm_venv
from schedspec.conformance.harness.differ import diff
from schedspec.conformance.workloads.release_examples import VERSION_WORKLOADS, at
from schedspec.reference_impl import ReferenceEngine
from schedspec.spec.versions import RELEASES

OLDER = RELEASES[:-1]


@pytest.fixture(scope="module", params=OLDER)
def release(request):
    ensure_vllm_venv(release=request.param)
    return request.param


def test_each_variant_workload_runs_on_the_release_as_the_reference_says(release):
    factory = engine_factory(parse_engine(f"vllm=={release}"))
    try:
        for name, make in VERSION_WORKLOADS.items():
            w = at(make(), release)
            if w.config.async_scheduling and w.config.num_speculative_tokens:
                continue
            r = diff(w, ReferenceEngine, factory, "blocks")
            assert r.error is None and r.divergence is None, (name, r.divergence or r.error)
    finally:
        factory.close_all()


def test_the_release_is_certified_against_the_reference_at_that_release(release, tmp_path):
    out = tmp_path / "cert"
    argv = ["certify", "--engine", f"vllm=={release}", "--workloads", "300", "--level", "blocks", "--no-plots"]
    status = main([*argv, "--out", str(out)])
    cert = json.loads((out / "certificate.json").read_text())
    assert cert["engine_version"] == f"vllm {release}"
    assert status == 0, cert["counterexamples"] or cert["errors"] or cert["invariant_violations"]


@pytest.mark.parametrize("a, b", list(zip(RELEASES, RELEASES[1:])))
def test_the_changelog_between_neighbours_explains_every_difference(a, b, tmp_path):
    for v in (a, b):
        ensure_vllm_venv(release=v)
    out = tmp_path / "changelog"
    assert main(["changelog", a, b, "--workloads", "40", "--out", str(out)]) == 0
    report = json.loads((out / "changelog.json").read_text())
    assert all(c["cause"] != "not modelled" for c in report["clusters"]), report["clusters"]
