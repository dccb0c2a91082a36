"""Running a release's scheduler tests twice, plain and monitored, and replaying what was captured.

The plain run is the baseline: a test is judged against how it fares
without the monitors, in the same venv, on the same machine, so an
environmental failure (a model with no stub config) is never blamed on
them. Both runs load `live/vllm_tests.py`, which records each test's outcome
(mode `plain` swaps nothing), so the two are matched by pytest's node id.
A run is `--jobs` processes, each given every J-th test file.

A test run that cannot start, dies or hangs past its deadline is an
`InfrastructureError`: the suite was not run, which is never a pass.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...spec.errors import InfrastructureError, SpecError
from ..live_replay.capture import read_capture
from ..live_replay.replay import replay_live

RUN_TIMEOUT_S = 3600.0
SCHEDULER_BUILDERS = ("create_scheduler(", "Scheduler(", "AsyncScheduler(")


def scheduler_test_files(root: Path) -> list[str]:
    """Every test file under `tests/v1/core/` that builds a `Scheduler` or `AsyncScheduler`, relative to `root`."""
    core = root / "tests" / "v1" / "core"
    found = [
        p
        for p in sorted(core.rglob("test_*.py"))
        if any(b in p.read_text(encoding="utf-8", errors="replace") for b in SCHEDULER_BUILDERS)
    ]
    return [str(p.relative_to(root)) for p in found]


def run_tests(
    python: Path,
    root: Path,
    files: list[str],
    env: dict[str, str],
    out: Path,
    mode: str,
    k: str | None,
    jobs: int,
    timeout_s: float = RUN_TIMEOUT_S,
) -> list[dict[str, Any]]:
    """One run of `files` in `mode` (plain, log or raise): the plugin's line per test, all processes merged."""
    procs = []
    for j in range(jobs):
        mine = files[j::jobs]
        if not mine:
            continue
        part = out / f"{mode}-{j}"
        part.mkdir(parents=True, exist_ok=True)
        ini = part / "pytest.ini"  # an ini of its own: never one found above the cache (this project's, say)
        ini.write_text("[pytest]\n")
        argv = [str(python), "-m", "pytest", "-q", "-c", str(ini), "--rootdir", str(root), "--noconftest"]
        argv += ["-p", "no:cacheprovider", "-W", "ignore"]
        argv += ["-p", "schedspec.live.vllm_tests", "--schedspec-out", str(part), "--schedspec-mode", mode]
        argv += ["-k", k] if k else []
        log = open(part / "pytest.log", "w", encoding="utf-8")  # noqa: SIM115 - closed below
        procs.append((subprocess.Popen([*argv, *mine], cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT), log))
    lines: list[dict[str, Any]] = []
    try:
        for p, log in procs:
            try:
                rc = p.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                raise InfrastructureError(f"vllm-tests: the {mode} run", timeout_s, "did not end", "timeout") from None
            log.close()
            if rc not in (0, 1, 5):  # passed, some failed, none collected: anything else is pytest itself failing
                tail = Path(log.name).read_text(encoding="utf-8", errors="replace").strip().splitlines()[-3:]
                raise InfrastructureError(f"vllm-tests: the {mode} run", rc, " / ".join(tail) or "exited")
    finally:
        for p, log in procs:
            if p.poll() is None:
                p.kill()
            log.close()
    for j in range(jobs):
        path = out / f"{mode}-{j}" / "tests.jsonl"
        if path.is_file():
            lines += [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]
    return lines


@dataclass
class SessionReplay:
    """One captured session replayed on the reference."""

    capture: str
    session: str
    verdict: str  # agrees, diverges, declared, refused
    steps: int = 0
    detail: str = ""
    notes: list[str] = field(default_factory=list)


def replay_captures(paths: list[str], level: str = "blocks") -> dict[str, list[SessionReplay]]:
    """Each capture file's sessions, replayed: `agrees` step for step, `diverges` (the first difference),
    `declared` (a session the live mode declared out of scope: replayed only up to the declaration, and an
    agreement there says nothing more), or `refused` (the capture cannot be replayed, with why)."""
    out: dict[str, list[SessionReplay]] = {}
    for path in paths:
        try:
            sessions = read_capture(path).sessions
        except SpecError as e:
            out[path] = [SessionReplay(path, "", "refused", detail=str(e))]
            continue
        out[path] = []
        for session in sessions:
            sid, scope = session.id, session.header.data.get("out_of_scope") or []
            if scope:  # outside the spec from its first step: declared, not replayed
                out[path].append(SessionReplay(path, sid, "declared", detail="; ".join(scope)))
                continue
            try:
                r = replay_live(path, sid, level)
            except SpecError as e:
                out[path].append(SessionReplay(path, sid, "refused", detail=str(e)))
                continue
            declared = [n for n in r.notes if "outside what the spec models" in n]
            if r.divergence is not None:  # before any declaration: the spec's business
                d = r.divergence
                verdict, detail = "diverges", f"step {d.step}: {d.field}: reference={d.a!r} live={d.b!r}"
            else:
                verdict, detail = ("declared" if declared else "agrees"), "; ".join(declared)
            out[path].append(SessionReplay(path, sid, verdict, r.steps_compared, detail, list(r.notes)))
    return out
