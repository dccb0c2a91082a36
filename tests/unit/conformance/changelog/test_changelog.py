"""`schedspec changelog`'s explanations: which variant rule turns release A into release B.

The real releases are `tests/slow/test_vllm_releases_long.py`'s. Here the
reference at a release stands in for that release, so the answer is known:
each variant's own workload is explained by that variant alone, and an
engine that departs from every release is "not modelled".
"""

from __future__ import annotations

import dataclasses

import pytest

from schedspec.cli import main
from schedspec.conformance.changelog.clusters import Cluster, explain, variants_between
from schedspec.conformance.harness.counterexample import Counterexample
from schedspec.conformance.harness.differ import diff
from schedspec.conformance.workloads.release_examples import VERSION_WORKLOADS, at
from schedspec.reference_impl import ReferenceEngine, Scheduler, derived_engine
from schedspec.spec.config import SchedulerConfig
from schedspec.spec.versions import BY_NAME, RELEASES, VARIANTS


def release(version: str):
    """The reference, pinned to `version` whatever the workload's config says: a stand-in for vLLM `version`."""
    return lambda config: ReferenceEngine(dataclasses.replace(config, vllm_version=version))


class CapsChunksAt10(Scheduler):
    """A rule no release has: no running request is granted more than 10 tokens."""

    def grant(self, request, long_prefill_token_threshold: int, token_budget: int) -> int:
        return min(super().grant(request, long_prefill_token_threshold, token_budget), 10)


def test_the_candidates_are_the_rule_variants_between_the_releases():
    assert variants_between("0.30.0", "0.31.0") == ["lone-request-threshold-off", "one-waiting-queue"]
    assert variants_between("0.28.0", "0.33.0") == [v.name for v in VARIANTS if not v.config_only]
    assert variants_between("0.33.0", "0.33.0") == []


@pytest.mark.parametrize("variant", [v.name for v in VARIANTS if v.workload])
def test_each_variant_s_workload_is_explained_by_that_variant_alone(variant):
    v = BY_NAME[variant]
    a, b = RELEASES[RELEASES.index(v.since) - 1], v.since
    w = at(VERSION_WORKLOADS[v.workload](), a)
    assert diff(w, release(a), release(b), "blocks").divergence is not None  # the releases do differ on it
    e = explain(w, a, b, "blocks", {a: release(a), b: release(b)})
    assert e.ref_agrees_a and e.ref_agrees_b and e.explained
    assert variant in e.variants and e.alone, e


def test_a_difference_no_variant_models_is_not_modelled():
    a, b = "0.30.0", "0.31.0"
    w = at(VERSION_WORKLOADS["version-lone-threshold"](), a)
    unmodelled = derived_engine(CapsChunksAt10, "caps-chunks-at-10")
    e = explain(w, a, b, "blocks", {a: release(a), b: unmodelled})
    assert e.ref_agrees_a and not e.ref_agrees_b and not e.explained
    assert e.where_b.startswith("step 1, output.num_scheduled_tokens"), e.where_b
    cluster = Cluster("output.num_scheduled_tokens", e, ["w"], None, (2, 3))
    text = cluster.paragraph(a, b, "counterexample-w.json")
    assert "Not modelled" in text and "vLLM 0.31.0 (step 1" in text and "2 requests, 3 steps" in text


def test_a_counterexample_of_two_releases_replays_as_one(tmp_path):
    a, b = "0.30.0", "0.31.0"
    w = at(VERSION_WORKLOADS["version-lone-threshold"](), a)
    d = diff(w, release(a), release(b), "blocks").divergence
    assert d is not None and d.step == 0 and d.field.startswith("output.num_scheduled_tokens")
    cx = Counterexample.of(w, d, f"vllm=={a}", f"vllm=={b}", "blocks", {"a": a, "b": b}, w, 0)
    path = tmp_path / "cx.json"
    cx.write(str(path))
    assert Counterexample.load(str(path)).workload.config.vllm_version == a


def test_several_rules_together_when_no_single_one_explains():
    # version-spec-caching from 0.28.0 to 0.33.0: the cached block gives b its 8-token hit (0.33.0), and the
    # padding after a prefix hit (0.30.0) its 3-token grant; neither alone turns 0.28.0 into 0.33.0.
    a, b = "0.28.0", "0.33.0"
    w = at(VERSION_WORKLOADS["version-spec-caching"](), a)
    e = explain(w, a, b, "blocks", {a: release(a), b: release(b)})
    assert e.explained and not e.alone and e.key.startswith("together: ")
    assert e.variants == ("padding-after-prefix-hit", "sync-spec-decode-caches-on-update")  # and no more


@pytest.mark.parametrize(
    "argv, option",
    [
        (["0.33.0", "0.30.0"], "B"),
        (["0.27.0", "0.30.0"], "A"),
        (["0.30.0", "0.31.0", "--workloads", "0"], "--workloads"),
        (["0.30.0", "0.31.0", "--family", "nope"], "--family"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(argv, option, capsys, tmp_path):
    assert main(["changelog", *argv, "--out", str(tmp_path / "cl")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"schedspec: error: {option}:"), err


def test_a_release_with_a_variant_taken_early_is_a_config_of_its_own():
    c = SchedulerConfig(vllm_version="0.32.0+priority-self-preemption-continues")
    assert c.vllm_version.startswith("0.32.0")
    with pytest.raises(Exception, match=r"config\.vllm_version: \+lone-request-threshold-off: 0\.32\.0 already has it"):
        SchedulerConfig(vllm_version="0.32.0+lone-request-threshold-off")
    with pytest.raises(Exception, match=r"config\.vllm_version: \+nope is not a variant"):
        SchedulerConfig(vllm_version="0.32.0+nope")
