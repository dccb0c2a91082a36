"""`schedspec vllm-tests`' own parts, offline: the index page, which files run, the per-test verdict.

The suite itself (vLLM 0.33.0's tests, fetched, run twice, replayed) runs in
`tests/campaigns/test_vllm_tests.py`; here each rule of its verdict is
checked on made-up lines, each shown to fail the row it should.
"""

from __future__ import annotations

import json
import tarfile

import pytest

from schedspec.conformance.vllm_suite import sdist
from schedspec.conformance.vllm_suite.environment import STUB_MODELS, hub_cache
from schedspec.conformance.vllm_suite.report import junit, markdown, rows, totals
from schedspec.conformance.vllm_suite.run import SessionReplay, scheduler_test_files
from schedspec.spec.errors import InfrastructureError

PAGE = """<html><body>
<a href="https://files.example/aa/vllm-0.32.0.tar.gz#sha256={}">vllm-0.32.0.tar.gz</a>
<a href="https://files.example/bb/vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl#sha256={}">wheel</a>
<a href="https://files.example/cc/vllm-0.33.0.tar.gz#sha256={}">vllm-0.33.0.tar.gz</a>
</body></html>""".format("1" * 64, "2" * 64, "3" * 64)


def test_the_sdist_is_found_on_the_simple_page_with_its_digest():
    assert sdist.sdist_link(PAGE, "0.33.0") == ("https://files.example/cc/vllm-0.33.0.tar.gz", "3" * 64)
    with pytest.raises(InfrastructureError, match="lists no vllm-0.31.0.tar.gz"):
        sdist.sdist_link(PAGE, "0.31.0")


def test_fetch_keeps_only_tests_checks_the_digest_and_caches(tmp_path, monkeypatch):
    source = tmp_path / "src" / "vllm-0.33.0"
    (source / "tests" / "v1" / "core").mkdir(parents=True)
    (source / "tests" / "v1" / "core" / "test_scheduler.py").write_text("def test_x(): create_scheduler()\n")
    (source / "vllm").mkdir()
    (source / "vllm" / "big.py").write_text("x = 1\n")
    archive = tmp_path / "vllm-0.33.0.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(source, arcname="vllm-0.33.0")
    import hashlib

    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    page = f'<a href="{archive.as_uri()}#sha256={digest}">vllm-0.33.0.tar.gz</a>'
    (tmp_path / "index" / "vllm").mkdir(parents=True)
    (tmp_path / "index" / "vllm" / "index.html").write_text(page)
    monkeypatch.setenv("PIP_INDEX_URL", (tmp_path / "index").as_uri())
    monkeypatch.setattr(sdist, "tests_root", lambda release: tmp_path / "cache" / f"vllm-{release}")
    monkeypatch.setattr(sdist.urllib.request, "urlopen", _open_dir_index)
    root = sdist.fetch_tests("0.33.0")
    assert (root / "tests" / "v1" / "core" / "test_scheduler.py").is_file() and not (root / "vllm").exists()
    assert scheduler_test_files(root) == ["tests/v1/core/test_scheduler.py"]
    archive.write_bytes(b"changed")  # cached: not fetched again
    assert sdist.fetch_tests("0.33.0") == root

    (tmp_path / "index" / "vllm" / "index.html").write_text(page.replace(digest, "0" * 64))
    monkeypatch.setattr(sdist, "tests_root", lambda release: tmp_path / "cache2" / f"vllm-{release}")
    with pytest.raises(InfrastructureError, match="sha256"):
        sdist.fetch_tests("0.33.0")
    assert not (tmp_path / "cache2" / "vllm-0.33.0").exists()  # nothing half-written looks complete


def _open_dir_index(url, timeout=None):
    """file:// URLs, with a folder's index.html for the simple page (what an index server does)."""
    import urllib.request

    if url.endswith("/"):
        url += "index.html"
    return urllib.request.build_opener().open(url, timeout=timeout)


def test_the_hub_cache_has_a_config_for_each_stub_model(tmp_path):
    hub_cache(tmp_path)
    for name in STUB_MODELS:
        repo = tmp_path / "hub" / ("models--" + name.replace("/", "--"))
        rev = (repo / "refs" / "main").read_text()
        assert json.loads((repo / "snapshots" / rev / "config.json").read_text())["architectures"]


def _line(nodeid, outcome, sessions=(), errors=()):
    return {"nodeid": nodeid, "outcome": outcome, "sessions": list(sessions), "wrapper_errors": list(errors)}


def _session(sid, capture, reports=None, scope=(), judged=3):
    return {
        "session": sid,
        "capture": capture,
        "steps_judged": judged,
        "reports": reports or {},
        "out_of_scope": list(scope),
        "wrapper_error": None,
    }


def test_a_row_fails_on_each_of_the_four_problems_and_only_then():
    plain = [_line(f"t.py::{n}", "passed") for n in ("clean", "changed", "wrapper", "report", "diverges", "scoped")]
    plain.append(_line("t.py::env", "failed"))
    monitored = [
        _line("t.py::clean", "passed", [_session("s1", "c1")]),
        _line("t.py::changed", "failed", [_session("s2", "c2")]),
        _line("t.py::wrapper", "passed", [], ["could not start: KeyError"]),
        _line("t.py::report", "passed", [_session("s3", "c3", {"grant-exact": 2})]),
        _line("t.py::diverges", "passed", [_session("s4", "c4")]),
        _line("t.py::scoped", "passed", [_session("s5", "c5", {"grant-exact": 1}, ["LoRA"])]),
        _line("t.py::env", "failed", []),
    ]
    replays = {
        "c1": [SessionReplay("c1", "s1", "agrees", 3)],
        "c4": [SessionReplay("c4", "s4", "diverges", 2, "step 1: output.num_scheduled_tokens")],
        "c5": [SessionReplay("c5", "s5", "declared", 0, "LoRA")],
    }
    table = rows(plain, monitored, replays)
    failing = {r.nodeid.split("::")[1]: r.problems[0] for r in table if r.problems}
    assert set(failing) == {"changed", "wrapper", "report", "diverges"}
    assert "with them" in failing["changed"] and "wrapper error" in failing["wrapper"]
    assert "grant-exact x2" in failing["report"] and failing["diverges"].startswith("replay diverges")
    summary = totals(table)
    assert summary["changed_by_monitors"] == 1 and summary["wrapper_errors"] == 1
    assert summary["in_scope"] == 4 and summary["monitor_reports_in_scope"] == 2
    assert summary["replay_agreement"] == "1 of 2"
    assert "0.33.0" in markdown("0.33.0", "log", table, summary)
    assert b'failures="4"' in junit("0.33.0", table)
