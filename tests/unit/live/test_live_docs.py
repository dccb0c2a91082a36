"""The CI example of docs/live.md runs as written, and its exit codes and reports are what the doc says.

The commands are parsed out of the doc's `## In CI` bash block, never retyped,
so the doc and this test cannot drift apart. `schedspec` and `python` are run
from this venv; the capture comes from `capture_of`, as the doc says.
"""

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
DOC = ROOT / "docs" / "live.md"
BIN = Path(sys.executable).parent


def ci_commands() -> list[str]:
    section = DOC.read_text().split("## In CI", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block is not None, "docs/live.md lost its CI example"
    return [line for line in block.group(1).splitlines() if line.strip()]


def run(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    argv = shlex.split(command)
    argv[0] = str(BIN / "schedspec") if argv[0] == "schedspec" else sys.executable if argv[0] == "python" else argv[0]
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=600)


def test_the_ci_example_runs_as_written(tmp_path):
    commands = ci_commands()
    assert [c.split()[0] for c in commands] == ["schedspec", "python", "schedspec"]
    assert commands[-1].startswith("schedspec replay-live capture.jsonl")
    for command in commands:
        done = run(command, tmp_path)
        assert done.returncode == 0, (command, done.stdout, done.stderr)
    report = tmp_path / "live-report"
    assert "PASSED" in (report / "certificate.md").read_text()
    assert json.loads((report / "certificate.json").read_text())["steps_compared"] > 0
    assert (report / "junit.xml").exists() and (report / "timeline.png").exists()


def test_a_changed_step_fails_the_example_with_exit_1_and_garbage_with_exit_2(tmp_path):
    *make, replay = ci_commands()
    for command in make:
        assert run(command, tmp_path).returncode == 0
    capture = tmp_path / "capture.jsonl"
    lines = capture.read_text().splitlines()
    k = next(
        i
        for i, line in enumerate(lines)
        if json.loads(line)["kind"] == "schedule" and json.loads(line)["output"]["num_scheduled_tokens"]
    )
    line = json.loads(lines[k])
    line["output"]["num_scheduled_tokens"][0][1] += 1
    capture.write_text("\n".join([*lines[:k], json.dumps(line), *lines[k + 1 :]]) + "\n")
    done = run(replay, tmp_path)
    assert done.returncode == 1 and f"diverges at step {line['step']}" in done.stdout
    capture.write_text("\n".join([*lines[:3], "garbage", *lines[3:]]) + "\n")
    done = run(replay + " --force", tmp_path)
    assert done.returncode == 2
    assert done.stderr.startswith("schedspec: error: capture.jsonl:4: line: is not valid JSON")
