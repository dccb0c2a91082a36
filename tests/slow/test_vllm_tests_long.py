"""`schedspec vllm-tests` over four releases' whole scheduler test suites, in both modes, with replay.

At every release, in mode log and in mode raise: no test changes its
outcome under the monitors, the wrapper has no error of its own, no monitor
reports on an in-scope session, and every in-scope session replays step for
step (the rest declared, with the reason). Measured: `docs/vllm-tests.md`.
The default tier runs vLLM 0.33.0's five core files in raise mode
(`tests/campaigns/test_vllm_tests.py`). Builds each release's venv on first
use (about 2 minutes each).
"""

import json

import pytest

from schedspec.cli import main


@pytest.mark.parametrize("mode", ["log", "raise"])
@pytest.mark.parametrize("release", ["0.28.0", "0.30.0", "0.32.0", "0.33.0"])
def test_every_release_s_own_tests_pass_watched_and_replay(release, mode, tmp_path):
    out = tmp_path / f"{release}-{mode}"
    rc = main(["vllm-tests", "--vllm-version", release, "--mode", mode, "--out", str(out)])
    report = json.loads((out / "report.json").read_text())
    totals = report["totals"]
    assert rc == 0, [(r["nodeid"], r["problems"]) for r in report["tests"] if r["problems"]][:5]
    assert totals["tests"] > 100 and totals["in_scope"] > 30 and totals["steps_judged"] > 100
    assert totals["wrapper_errors"] == totals["changed_by_monitors"] == totals["monitor_reports_in_scope"] == 0
    assert totals["replays"].get("diverges", 0) == totals["replays"].get("refused", 0) == 0
