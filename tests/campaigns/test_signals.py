"""SIGINT, SIGTERM or SIGKILL at any point of a run: the earlier outputs stay exactly as they were.

Property-style: Hypothesis draws the signal, the moment (from the instant
the run opened its staging folder to a few seconds in) and the command
(`certify` over an earlier certificate with `--force`, `simulate --out`
over an earlier trace with `--force`). Once, SIGTERM during
`certify --force` left counterexamples with no manifest, so the next run
passed with stale ones beside it; during `simulate --out` it left a hidden
79 MB steps file; ^C during `certify --force` deleted the old certificate
before the new one existed.

After SIGINT (exit 130) or SIGTERM (exit 143) the folder is byte for byte
as before, with no staging folder and no temporary file. SIGKILL cannot be
caught: it may leave one staging folder (never anything else), which the
next run clears as it starts. A run that finished before the signal landed
has replaced the earlier one whole, which is the other allowed outcome.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from test_interrupt import session_processes

from schedspec.cli import main
from schedspec.outdir import STAGING

# SIGINT as a terminal gives it, whatever this process inherited (test_interrupt.py says why).
LAUNCH = (
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
    "os.execv(sys.executable, [sys.executable, '-m', 'schedspec.cli', *sys.argv[1:]])"
)
EXIT = {signal.SIGINT: 130, signal.SIGTERM: 143, signal.SIGKILL: -signal.SIGKILL}
# About 10 s of simulate on 2 cores, writing its steps to a hidden temporary file all along.
LONG = {
    "version": 1,
    "name": "long",
    "config": {"max_num_batched_tokens": 512, "max_num_seqs": 64, "num_gpu_blocks": 4000, "block_size": 16},
    "requests": [
        {"request_id": f"r{i}", "arrival_step": i // 50, "prompt_token_ids": list(range(1, 33)), "max_tokens": 48}
        for i in range(800)
    ],
}
CERTIFY = ["certify", "--engine", "reference", "--family", "kv-pressure", "--no-plots"]


def snapshot(folder: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(folder)): p.read_bytes() if p.is_file() else None for p in sorted(folder.rglob("*"))}


def run_and_signal(argv: list[str], started: Callable[[], bool], sig: signal.Signals, delay: float) -> tuple[int, str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", LAUNCH, *argv], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        for _ in range(600):  # the run has begun writing
            if proc.poll() is not None or started():
                break
            time.sleep(0.02)
        time.sleep(delay)
        if proc.poll() is None:
            proc.send_signal(sig)
        _, err = proc.communicate(timeout=30)
        for _ in range(100):  # a worker's SIGKILL from the kernel lands a moment after its parent is gone
            left = session_processes(proc.pid)
            if not left:
                break
            time.sleep(0.05)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        for line in session_processes(proc.pid):
            os.kill(int(line.split()[0]), signal.SIGKILL)
    # No worker outlives the run, SIGKILL included: one spawned as its parent died once did, for good.
    assert not left, f"left running after {sig.name} at +{delay} s:\n" + "\n".join(left)
    return proc.returncode, err


@pytest.mark.slow_ok("12 runs as processes of their own, each signalled: only a process shows what a signal does")
@settings(max_examples=12, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    sig=st.sampled_from([signal.SIGINT, signal.SIGTERM, signal.SIGKILL]),
    delay=st.sampled_from([0.0, 0.05, 0.3, 1.0, 2.5]),
    command=st.sampled_from(["certify", "certify -j2", "simulate"]),
)
def test_a_signal_at_any_point_leaves_the_earlier_outputs_as_they_were(tmp_path_factory, sig, delay, command):
    root = tmp_path_factory.mktemp("sig")
    if command.startswith("certify"):
        out = root / "cert"
        assert main([*CERTIFY, "--workloads", "3", "--out", str(out)]) == 0
        argv = [
            *CERTIFY,
            "--workloads",
            "400",
            "--out",
            str(out),
            "--force",
            "--jobs",
            "2" if "-j2" in command else "1",
        ]
        started = lambda: any(out.glob(f"{STAGING}*"))  # noqa: E731
    else:
        out = root / "traces"
        assert main(["simulate", "seed-preemption", "--out", str(out / "trace.json")]) == 0
        workload = root / "long.json"
        workload.write_text(json.dumps(LONG))
        argv = ["simulate", str(workload), "--out", str(out / "trace.json"), "--force"]
        started = lambda: any(out.glob(".trace.json.steps.*"))  # noqa: E731
    before = snapshot(out)
    rc, err = run_and_signal(argv, started, sig, delay)
    after = snapshot(out)
    if rc == 0:  # the run ended before the signal: it replaced the earlier outputs whole, nothing stray beside
        assert not [n for n in after if n.startswith((STAGING, ".trace.json."))]
        return
    assert rc == EXIT[sig], f"exit {rc} after {sig.name} at +{delay} s: {err[-1500:]}"
    stray = {n for n in after if n not in before}
    if sig == signal.SIGKILL:  # at most the staging folder (and what it holds), or simulate's temporary files
        assert all(n.startswith((STAGING, ".trace.json.")) for n in stray), stray
        assert {n: v for n, v in after.items() if n in before} == before
        if command.startswith("certify"):
            assert main([*CERTIFY, "--workloads", "2", "--out", str(out), "--force"]) == 0
        else:
            assert main(["simulate", "seed-preemption", "--out", str(out / "trace.json"), "--force"]) == 0
        assert not [n for n in snapshot(out) if n.startswith((STAGING, ".trace.json."))]  # the next run cleared them
        return
    assert after == before, f"{sig.name} at +{delay} s changed the outputs: {sorted(stray)}"
    assert ("terminated" if sig == signal.SIGTERM else "interrupted") in err
