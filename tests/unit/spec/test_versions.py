"""One switch per release: the config's `vllm_version` moves the reference and the monitors together.

Each variant of `spec/versions.py` has a workload that shows it
(`conformance/workloads/release_examples.py`). Here the reference runs it on both
sides of the release that changed the rule, and the difference is pinned;
the monitors, given the same release, pass the reference's trace and
flag the other side's. That the real releases behave so is
`tests/slow/test_vllm_releases.py`.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from schedspec.cli import main
from schedspec.conformance.workloads.families import FAMILIES, generate
from schedspec.conformance.workloads.release_examples import VERSION_WORKLOADS, at
from schedspec.reference_impl import simulate
from schedspec.spec.config import SchedulerConfig
from schedspec.spec.errors import SpecError
from schedspec.spec.invariants import check_trace
from schedspec.spec.trace import Trace
from schedspec.spec.versions import BY_NAME, DEFAULT_RELEASE, RELEASES, VARIANTS, holds, known_violation, release_key
from schedspec.spec.workload import Workload

DOCS = Path(__file__).resolve().parents[3] / "docs" / "versions.md"
SHOWN = [v for v in VARIANTS if v.workload]


def grants(trace: Trace) -> list[dict[str, int]]:
    return [dict(s.output.num_scheduled_tokens) for s in trace.steps]


def sides(name: str) -> tuple[Trace, Trace]:
    """The variant's workload under the last release before it, and under the release that changed it."""
    v = BY_NAME[name]
    w = VERSION_WORKLOADS[v.workload]()
    before = RELEASES[RELEASES.index(v.since) - 1]
    return simulate(at(w, before)), simulate(at(w, v.since))


def test_releases_are_ordered_and_every_variant_changed_at_one_of_them():
    assert list(RELEASES) == sorted(RELEASES, key=release_key) and DEFAULT_RELEASE == RELEASES[-1]
    for v in VARIANTS:
        assert v.since in RELEASES[1:], v.name
        assert [holds(v.name, r) for r in RELEASES] == [release_key(r) >= release_key(v.since) for r in RELEASES]


def test_min_tokens_held_back_every_stop_before_0_29():
    old, new = sides("min-tokens-gates-every-stop")
    assert old.steps[9].finished["r"].status.name == "FINISHED_LENGTH_CAPPED"  # EOS at output 2 ignored
    assert len(old.steps[9].finished["r"].output_token_ids) == 10
    assert new.steps[1].finished["r"].status.name == "FINISHED_STOPPED"  # EOS at output 2 finishes it


def test_padding_past_L_stopped_the_waiting_pass_before_0_29():
    old, new = sides("padding-needs-room-to-sample")
    assert "b" not in grants(old)[3] and grants(old)[13] == {"b": 1}  # b waits until r has finished
    assert grants(new)[3] == {"r": 1, "b": 1}  # admitted unpadded beside r


def test_a_prefix_hit_made_an_admission_decode_like_from_0_30():
    old, new = sides("padding-after-prefix-hit")
    assert grants(old)[2] == {"b": 1} and not old.steps[2].output.scheduled_spec_decode_tokens
    assert grants(new)[2] == {"b": 3} and new.steps[2].output.scheduled_spec_decode_tokens == {"b": (-1, -1)}


def test_a_lone_request_is_not_capped_by_the_threshold_from_0_31():
    old, new = sides("lone-request-threshold-off")
    assert [g["r"] for g in grants(old)[:7]] == [16] * 6 + [4]
    assert [g["r"] for g in grants(new)[:2]] == [64, 36]


def test_priority_self_preemption_ended_the_running_pass_before_0_33():
    old, new = sides("priority-self-preemption-continues")
    assert old.steps[2].output.preempted_req_ids == {"a"} == new.steps[2].output.preempted_req_ids
    assert grants(old)[2] == {} and grants(new)[2] == {"b": 1}


def test_sync_spec_decode_caches_accepted_blocks_at_once_from_0_33():
    old, new = sides("sync-spec-decode-caches-on-update")
    assert old.steps[3].output.scheduled_new_reqs[0].num_computed_tokens == 4
    assert new.steps[3].output.scheduled_new_reqs[0].num_computed_tokens == 8


@pytest.mark.parametrize("variant", [v.name for v in SHOWN])
def test_the_monitors_follow_the_release_they_are_given(variant):
    old, new = sides(variant)
    # A release's known violations are its own (the pooling stall before 0.32.0), reported as such.
    assert [v for v in check_trace(old) if not v.known] == [] and check_trace(new) == []
    # Each side's trace, judged by the other release's rules, breaks a decision invariant.
    swapped_old = Trace(new.workload, old.steps, old.engine, old.end)
    swapped_new = Trace(old.workload, new.steps, new.engine, new.end)
    assert check_trace(swapped_old) and check_trace(swapped_new)


@pytest.mark.parametrize("release", RELEASES[:-1])
def test_the_reference_at_every_release_passes_every_monitor_on_generated_workloads(release):
    for family in FAMILIES:
        for index in range(3):
            w = generate(family, 7, index)
            try:
                w = w.replace(config=dataclasses.replace(w.config, vllm_version=release))
            except SpecError:  # a knob this release lacks: that config is not one of its workloads
                continue
            found = check_trace(simulate(w))
            assert [v for v in found if not v.known] == [], (family, index)
            assert all(known_violation(v.invariant, release, w.config.runner) for v in found)


def test_a_knob_or_combination_a_release_lacks_is_refused_in_one_line():
    with pytest.raises(SpecError, match=r"config\.max_num_active_seqs: is not a knob of vLLM 0\.30\.0"):
        SchedulerConfig(max_num_active_seqs=2, vllm_version="0.30.0")
    with pytest.raises(SpecError, match=r"config\.long_prefill_token_threshold_adaptive: .*vLLM 0\.28\.0"):
        SchedulerConfig(
            long_prefill_token_threshold=8, long_prefill_token_threshold_adaptive=True, vllm_version="0.28.0"
        )
    with pytest.raises(
        SpecError, match=r"config\.async_scheduling: vLLM 0\.32\.0 refuses async scheduling .*'ngram_gpu'"
    ):
        SchedulerConfig(async_scheduling=True, num_speculative_tokens=2, vllm_version="0.32.0")
    gpu = SchedulerConfig(
        async_scheduling=True, num_speculative_tokens=2, speculative_method="ngram_gpu", vllm_version="0.28.0"
    )
    assert gpu.speculative_method == "ngram_gpu"  # the device's ngram is accepted at every release
    with pytest.raises(
        SpecError, match=r"config\.speculative_method: must be one of ngram, ngram_gpu .*\(got 'eagle'\)"
    ):
        SchedulerConfig(num_speculative_tokens=2, speculative_method="eagle")
    with pytest.raises(SpecError, match=r"config\.vllm_version: must be one of 0\.28\.0, .*\(got '0\.27\.0'\)"):
        SchedulerConfig.from_dict({"vllm_version": "0.27.0"})


def test_the_release_travels_in_the_workload_and_the_trace(tmp_path):
    w = at(VERSION_WORKLOADS["version-lone-threshold"](), "0.30.0")
    assert Workload.from_json(w.to_json()).config.vllm_version == "0.30.0"
    trace = simulate(w)
    assert Trace.from_json(trace.to_json()).workload.config.vllm_version == "0.30.0"
    path = tmp_path / "w.json"
    path.write_text(json.dumps(w.to_json()))
    assert main(["simulate", str(path), "--out", str(tmp_path / "t.json")]) == 0
    assert json.loads((tmp_path / "t.json").read_text())["workload"]["config"]["vllm_version"] == "0.30.0"


def test_a_bad_release_in_a_workload_file_is_exit_2_in_one_line(tmp_path, capsys):
    data = VERSION_WORKLOADS["version-lone-threshold"]().to_json()
    data["config"]["vllm_version"] = "0.3"
    path = tmp_path / "w.json"
    path.write_text(json.dumps(data))
    assert main(["simulate", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "config.vllm_version" in err and "'0.3'" in err


def test_docs_have_one_row_per_variant_with_its_release_and_workload():
    text = DOCS.read_text()
    for v in VARIANTS:
        row = next((line for line in text.splitlines() if line.startswith(f"| `{v.name}` |")), None)
        assert row is not None, f"docs/versions.md has no row for {v.name}"
        assert v.since in row and v.vllm in row and (not v.workload or f"`{v.workload}`" in row), row
    assert re.search(r"not modelled", text)


def test_a_release_s_known_violation_is_reported_and_fails_nothing(tmp_path, capsys):
    # A max-model-len workload at 0.28.0: min_tokens holds a request past L, breaking token-bounds, which
    # 0.29.0 fixed. The invariant stays; the trace's release marks the break as known.
    from schedspec.conformance.workloads.families import at_release

    w = at_release(generate("max-model-len", 0, 1), "0.28.0")
    found = check_trace(simulate(w))
    assert found and all(v.known for v in found) and "token-bounds" in {v.invariant for v in found}
    assert check_trace(simulate(at_release(generate("max-model-len", 0, 1), "0.29.0"))) == []
    path = tmp_path / "t.json"
    assert main(["simulate", json_path(tmp_path, w), "--out", str(path)]) == 0
    assert main(["check", str(path)]) == 0
    assert "known violation" in capsys.readouterr().out


def json_path(tmp_path: Path, w: Workload) -> str:
    path = tmp_path / "w.json"
    path.write_text(json.dumps(w.to_json()))
    return str(path)
