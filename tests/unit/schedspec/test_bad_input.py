"""`simulate` and `replay` on bad input: one line naming the field and the value, exit 2, never a traceback.

The runnability rule (`spec.workload.check_runnable`) is tested against the
reference, not only against its own wording: every request it refuses is
shown never to be scheduled (or never to finish its prefill), and vLLM's real
livelocks, which it must let through, are shown to still run.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from schedspec.cli import main
from schedspec.conformance.workloads.builtin import BUILTIN
from schedspec.conformance.workloads.families import FAMILIES, generate
from schedspec.reference_impl import simulate
from schedspec.spec.config import SchedulerConfig
from schedspec.spec.errors import SpecError
from schedspec.spec.request import Request
from schedspec.spec.workload import Abort, Workload, WorkloadRequest, check_runnable


def one_line_error(capsys, argv: list[str]) -> str:
    assert main(argv) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("schedspec: error: "), lines
    return lines[0]


def write(path, workload: Workload) -> str:
    path.write_text(json.dumps(workload.to_json()))
    return str(path)


def req(request_id: str, prompt_len: int, arrival_step: int = 0, max_tokens: int = 4) -> WorkloadRequest:
    return WorkloadRequest(
        Request(request_id, (11,) * prompt_len, max_tokens=max_tokens, ignore_eos=True), arrival_step
    )


def small(**config) -> SchedulerConfig:
    return SchedulerConfig(
        **{
            "max_num_batched_tokens": 64,
            "max_num_seqs": 4,
            "max_model_len": 256,
            "block_size": 4,
            "num_gpu_blocks": 9,
            **config,
        }
    )


# ---- Files: any name, any bytes, the wrong kind. ----


def test_an_existing_file_is_loaded_whatever_its_name(tmp_path, capsys):
    path = write(tmp_path / "myworkload", Workload(small(), (req("a", 8),), name="mine"))
    assert main(["simulate", path]) == 0
    assert "mine: " in capsys.readouterr().out
    bad = Workload(small(), (req("a", 8),)).to_json()
    bad["requests"][0]["max_tokens"] = 0
    (tmp_path / "broken").write_text(json.dumps(bad))
    line = one_line_error(capsys, ["simulate", str(tmp_path / "broken")])
    assert "broken:workload.requests[0].max_tokens" in line and "(got 0)" in line


def test_a_name_that_is_neither_file_nor_builtin(capsys):
    line = one_line_error(capsys, ["simulate", "no-such-workload"])
    assert "WORKLOAD" in line and "'no-such-workload'" in line


def test_a_workload_that_is_not_utf8(tmp_path, capsys):
    path = tmp_path / "latin1.json"
    path.write_bytes(b'{"name": "caf\xe9"}')
    line = one_line_error(capsys, ["simulate", str(path)])
    assert str(path) in line and "UTF-8" in line and "byte 13" in line


@pytest.mark.parametrize("command", ["replay", "simulate"])
def test_a_file_handed_to_the_wrong_command_is_named_for_what_it_is(command, tmp_path, capsys):
    workload = BUILTIN["seed-preemption"]()
    workload_file = write(tmp_path / "w.json", workload)
    trace_file = tmp_path / "t.json"
    trace_file.write_text(json.dumps(simulate(workload).to_json()))
    cx_file = tmp_path / "cx.json"
    cx_file.write_text(json.dumps({"version": 1, "kind": "divergence", "workload": workload.to_json()}))
    if command == "replay":
        line = one_line_error(capsys, ["replay", workload_file])
        assert "is a workload, not a counterexample; run it with `schedspec simulate`" in line
        assert "version" not in line.split("(got")[0]
    else:
        line = one_line_error(capsys, ["simulate", str(cx_file)])
        assert "is a counterexample, not a workload; replay it with `schedspec replay`" in line
    line = one_line_error(capsys, [command, str(trace_file)])
    assert f"{trace_file}: is a trace, not a" in line and "`schedspec check`" in line
    assert "keys version, engine, end, workload, steps" in line


def test_replay_names_an_unknown_file_and_a_counterexample_version(tmp_path, capsys):
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"hello": 1}))
    line = one_line_error(capsys, ["replay", str(other)])
    assert "is not a schedspec counterexample" in line and "keys hello" in line
    newer = tmp_path / "newer.json"
    newer.write_text(json.dumps({"version": 2, "kind": "divergence"}))
    line = one_line_error(capsys, ["replay", str(newer)])
    assert "newer.json:counterexample.version" in line and "(got 2)" in line


# ---- Workloads that could only idle. ----


def refused(tmp_path, capsys, workload: Workload, field: str, value: str) -> str:
    line = one_line_error(capsys, ["simulate", write(tmp_path / "w.json", workload)])
    assert f"w.json:workload.{field}: " in line and f"(got {value})" in line, line
    return line


def test_an_arrival_at_or_past_max_steps(tmp_path, capsys):
    w = Workload(small(), (req("a", 8), req("b", 8), req("c", 8, arrival_step=12000)))
    line = refused(tmp_path, capsys, w, "requests[2].arrival_step", "12000")
    assert "max_steps (10000)" in line
    refused(tmp_path, capsys, w.replace(max_steps=12000), "requests[2].arrival_step", "12000")
    assert check_runnable(w.replace(max_steps=12001)) is None


def test_an_abort_at_or_past_max_steps(tmp_path, capsys):
    w = Workload(small(), (req("a", 8),), (Abort(50, "a"),), max_steps=50)
    refused(tmp_path, capsys, w, "aborts[0].step", "50")


def never_scheduled(w: Workload, request_id: str, steps: int = 40) -> bool:
    trace = simulate(w.replace(max_steps=steps))
    return trace.end == "max_steps" and all(request_id not in s.output.num_scheduled_tokens for s in trace.steps)


def test_a_prompt_larger_than_the_pool_is_never_admitted(tmp_path, capsys):
    """8 usable blocks of 4 tokens: 32 tokens fit, 33 never do, and with the full-sequence gate
    they are not even started. The first request runs and finishes; the second waits forever."""
    w = Workload(small(), (req("fits", 32), req("big", 33)))
    line = refused(tmp_path, capsys, w, "requests[1].prompt_token_ids", "'<33 tokens>'")
    assert "needs 9 KV blocks of 4 tokens but the pool has 8" in line and "never admitted" in line
    assert never_scheduled(w, "big")
    assert check_runnable(Workload(small(), (req("fits", 32),))) is None


def test_without_the_gate_a_prompt_larger_than_the_pool_never_completes_its_prefill(tmp_path, capsys):
    """Without `scheduler_reserve_full_isl`, a 6-token budget admits the first chunk; the prompt never completes."""
    w = Workload(small(scheduler_reserve_full_isl=False, max_num_batched_tokens=6), (req("big", 40),))
    line = refused(tmp_path, capsys, w, "requests[0].prompt_token_ids", "'<40 tokens>'")
    assert "its prefill never completes" in line
    trace = simulate(w.replace(max_steps=40))
    assert any("big" in s.output.num_scheduled_tokens for s in trace.steps)
    assert all(r.num_computed_tokens < 40 for s in trace.steps for rid, r in s.state.requests.items())
    assert trace.end == "max_steps"


def test_a_pool_of_only_the_null_block_admits_nothing(tmp_path, capsys):
    w = Workload(small(num_gpu_blocks=1), (req("a", 1),))
    refused(tmp_path, capsys, w, "requests[0].prompt_token_ids", "'<1 tokens>'")
    assert never_scheduled(w, "a")


def test_without_chunking_a_prompt_above_the_token_budget_is_never_admitted(tmp_path, capsys):
    w = Workload(small(enable_chunked_prefill=False, max_model_len=64, max_num_scheduled_tokens=16), (req("a", 20),))
    line = refused(tmp_path, capsys, w, "requests[0].prompt_token_ids", "'<20 tokens>'")
    assert "token budget (16)" in line
    assert never_scheduled(w, "a")


def test_vllms_own_livelocks_still_run(tmp_path, capsys):
    """D1, the spec-decode padding livelocks, and a pool that fits each request alone but not all at once."""
    d1 = Workload(
        SchedulerConfig(block_size=16, num_gpu_blocks=3),
        (WorkloadRequest(Request("0", (0,) * 32, max_tokens=16, ignore_eos=True)),),
        max_steps=30,
    )
    twin = tuple(range(40, 49))
    padded = Workload(
        SchedulerConfig(
            max_num_batched_tokens=16,
            max_num_seqs=4,
            max_model_len=64,
            block_size=4,
            num_gpu_blocks=4,
            enable_prefix_caching=True,
            num_speculative_tokens=4,
        ),
        (
            WorkloadRequest(Request("warm", twin, max_tokens=1, ignore_eos=True)),
            WorkloadRequest(Request("twin", twin, max_tokens=4, ignore_eos=True), 3),
        ),
        max_steps=30,
    )
    crowded = Workload(small(num_gpu_blocks=5), tuple(req(f"r{i}", 12, max_tokens=8) for i in range(3)), max_steps=300)
    for name, w in (("d1", d1), ("padded", padded), ("crowded", crowded)):
        assert main(["simulate", write(tmp_path / f"{name}.json", w)]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "stopped at max_steps=30 with 1 requests unfinished: a livelock, or max_steps too small" in out
    assert "end: max_steps" in out


def test_a_run_cut_before_its_last_report_says_so(tmp_path, capsys):
    """The request finishes in step 0; its finish is reported by step 1's schedule(), which max_steps=1 cuts."""
    w = Workload(small(), (req("a", 4, max_tokens=1),), max_steps=1)
    assert main(["simulate", write(tmp_path / "w.json", w)]) == 0
    assert "stopped at max_steps=1 before the last finish was reported: max_steps too small" in capsys.readouterr().out


def test_an_aborted_request_may_be_too_big(tmp_path, capsys):
    """The abort finishes it, so the workload drains; an abort before the arrival would not, and is no exemption."""
    w = Workload(small(), (req("big", 60, arrival_step=2),), (Abort(5, "big"),), max_steps=20)
    assert main(["simulate", write(tmp_path / "w.json", w)]) == 0
    assert "end: drained" in capsys.readouterr().out
    refused(tmp_path, capsys, w.replace(aborts=(Abort(1, "big"),)), "requests[0].prompt_token_ids", "'<60 tokens>'")


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_the_families_draw_only_runnable_workloads(family):
    """Six families once drew prompts larger than their pools (105 of 2400 workloads); they now grow the pool."""
    for index in range(40):
        check_runnable(generate(family, 0, index))


@pytest.mark.parametrize("family", ["kv-pressure", "priority", "aborts", "prefix-caching", "spec-decode", "async"])
def test_the_rule_refuses_only_requests_the_reference_never_runs(family):
    """With the pool one block short of the largest prompt it must run, the rule refuses the workload, and the
    refused request never completes its prefill."""
    for index in range(8):
        w = generate(family, 0, index)
        aborted = {a.request_id for a in w.aborts if a.step >= w.request(a.request_id).arrival_step}
        bs = w.config.block_size
        need = max(-(-r.request.num_prompt_tokens // bs) for r in w.requests if r.request_id not in aborted)
        w = w.replace(config=dataclasses.replace(w.config, num_gpu_blocks=need))  # need - 1 usable
        with pytest.raises(SpecError) as e:
            check_runnable(w)
        assert e.value.where.endswith(".prompt_token_ids"), e.value  # the families keep arrivals and aborts in range
        rid = w.requests[int(e.value.where.split("[")[1].split("]")[0])].request_id
        prompt = w.request(rid).request.num_prompt_tokens
        trace = simulate(w)
        assert trace.end == "max_steps"
        assert all(
            rid not in s.state.requests or s.state.requests[rid].num_computed_tokens < prompt for s in trace.steps
        )


@pytest.mark.parametrize(
    "argv",
    [
        ["certify", "--engine", "reference", "--jobs", "abc"],
        ["prove", "--timeout", "abc"],
        ["simulate"],
        ["nope"],
        ["certify"],
    ],
    ids=["not-an-int", "not-a-float", "no-workload", "no-such-command", "missing-required"],
)
def test_argparse_errors_are_one_line_too(argv, capsys):
    """argparse's own errors would print the whole usage block first; ours is one line, as for every bad input."""
    try:
        status = main(argv)  # `simulate` without a workload is ours: returned
    except SystemExit as exc:  # argparse's: exited
        status = exc.code
    assert status == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("schedspec: error: ") and "\n" not in err and "usage:" not in err


def test_simulate_out_naming_a_folder_is_a_one_line_error(tmp_path, capsys):
    assert main(["simulate", "seed-preemption", "--out", str(tmp_path)]) == 2
    assert "is a folder" in capsys.readouterr().err
