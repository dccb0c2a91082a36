"""^C ends `certify` and `changelog` at any point of a campaign: exit 130, no process left, the earlier run intact.

Each case runs the real CLI against vLLM with `--jobs 2`, so the process
tree is the whole one a user has: the command, two pool workers, and a vLLM
driver under each (and, for `changelog`, one per release). SIGINT arrives
at a seeded random moment after the command opened its staging folder,
either to the whole process group (a terminal's ^C) or to the command
alone (`kill -INT`, a CI runner's cancel). SIGTERM and SIGKILL, at drawn
moments, are `test_signals.py`'s.

Why the check once hung in full-suite runs and passed alone (it lived in
`tests/slow` for that): the child inherited the test process's SIGINT
disposition. A process started in the background of a non-interactive
shell (how CI and agents launch the suite) has SIGINT ignored, and Python
keeps an inherited SIG_IGN, so the ^C never arrived. The stopgap, resetting
it in `preexec_fn`, runs Python code between fork and exec, which can
deadlock when the parent has threads (the shared vLLM driver's reader
thread), so the child never even started. Here the child starts in a
session of its own, through a two-line launcher that restores SIGINT and
then execs: no Python code runs between fork and exec. On the tool's side,
`workers.py` now kills its pool on an interrupt instead of waiting for the
workloads in flight, and `lifeline.py` makes every worker, engine host and
driver die with its parent.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from schedspec.cli import main
from schedspec.conformance.engines.vllm import vllm_venv_ready
from schedspec.outdir import STAGING, OutDir

# SIGINT as a terminal gives it, whatever this process inherited; exec, so the pid stays the session's leader.
LAUNCH = (
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
    "os.execv(sys.executable, [sys.executable, '-m', 'schedspec.cli', *sys.argv[1:]])"
)
EXIT_WITHIN_S = 10  # the promise to a user who pressed ^C

needs_both_venvs = pytest.mark.skipif(
    not (vllm_venv_ready() and vllm_venv_ready(release="0.28.0")),
    reason="no vLLM venvs: run conformance/vllm_env/setup_vllm_ref.sh and setup_vllm_ref.sh 0.28.0",
)


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def session_processes(sid: int) -> list[str]:
    """`ps` lines of every process still alive in the session the command led.

    A zombie (state Z) has exited; it only waits for its new parent to reap
    it, which a container's init may never do.
    """
    ps = subprocess.run(["ps", "-e", "-o", "pid=,sid=,stat=,args="], capture_output=True, text=True, check=True)
    return [line for line in ps.stdout.splitlines() if int(line.split()[1]) == sid and "Z" not in line.split()[2]]


def earlier_certify(out: Path) -> None:
    assert main(["certify", "--engine", "reference", "--workloads", "2", "--family", "budget", "--out", str(out)]) == 0


def earlier_changelog(out: Path) -> None:
    """A finished changelog run's folder, written through the same `OutDir` the command uses."""
    od = OutDir(str(out), False, "--out", "changelog")
    od.prepare(["changelog.md", "changelog.json"])
    Path(od.file("changelog.md")).write_text("# What the scheduler changed\n")
    Path(od.file("changelog.json")).write_text('{"clusters": []}\n')
    od.record([od.file("changelog.md"), od.file("changelog.json")])


CASES = {
    "certify": (earlier_certify, ["certify", "--engine", "vllm", "--workloads", "40", "--seed", "3"]),
    "changelog": (earlier_changelog, ["changelog", "0.28.0", "0.33.0", "--workloads", "40", "--no-hunks"]),
}


@needs_both_venvs
@pytest.mark.parametrize("to_group", [True, False], ids=["to-group", "to-command"])
@pytest.mark.parametrize("command", sorted(CASES))
def test_sigint_ends_the_run_at_once_and_leaves_nothing_behind(tmp_path, command, to_group):
    earlier, argv = CASES[command]
    out = tmp_path / "out"
    earlier(out)
    before = snapshot(out)
    delay = random.Random(f"{command}-{to_group}").uniform(0.0, 6.0)  # seeded: a failure reruns at the same moment
    proc = subprocess.Popen(
        [sys.executable, "-c", LAUNCH, *argv, "--jobs", "2", "--out", str(out), "--force"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        for _ in range(600):  # its staging folder made: the campaign is under way
            if any(out.glob(f"{STAGING}*")) or proc.poll() is not None:
                break
            time.sleep(0.1)
        assert proc.poll() is None, f"{command} ended before it was interrupted: {proc.stderr.read()}"  # type: ignore[union-attr]
        time.sleep(delay)
        if to_group:
            os.killpg(proc.pid, signal.SIGINT)
        else:
            proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=EXIT_WITHIN_S)
        for _ in range(50):  # SIGKILLs from the kernel land a moment after their parent is gone
            left = session_processes(proc.pid)
            if not left:
                break
            time.sleep(0.1)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        for line in session_processes(proc.pid):
            os.kill(int(line.split()[0]), signal.SIGKILL)
    assert proc.returncode == 130, f"exit {proc.returncode} after SIGINT at +{delay:.1f} s: {err[-2000:]}"
    assert "interrupted" in err
    assert not left, f"left running after SIGINT at +{delay:.1f} s:\n" + "\n".join(left)
    assert snapshot(out) == before, "the earlier run's files changed"


def test_an_interrupted_run_with_no_earlier_one_leaves_no_empty_folder(tmp_path):
    """^C during a hanging factory: exit 130, and no empty --out left behind to trip the next run."""
    out = tmp_path / "c"
    argv = ["certify", "--engine", "schedspec.conformance.demo_engines.misbehaving:hanging_factory", "--workloads", "1"]
    proc = subprocess.Popen(
        [sys.executable, "-c", LAUNCH, *argv, "--out", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        for _ in range(600):
            if out.exists() or proc.poll() is not None:
                break
            time.sleep(0.1)
        time.sleep(1.0)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=EXIT_WITHIN_S)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130 and "interrupted" in err
    assert not out.exists()
