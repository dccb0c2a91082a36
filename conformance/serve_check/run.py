"""One serve-check run: a variant's server, its clients, its capture replayed; the result as the report holds it.

The verdict is the capture's and the server's, never the clients' timing:
monitor reports in the server's log (`mode=log` logs them; `mode=raise`
raises inside the engine, which the server then reports as dead), a session
whose replay diverges, or a server that died, each fails the variant. A
client refused or failed by the server is counted, and fails it too: a
healthy server answers every request it was sent.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...spec.errors import InfrastructureError
from ..live_replay.capture import read_capture
from ..live_replay.replay import replay_live
from .clients import drive, plans
from .engine_venv import live_pythonpath, require_venv, tiny_model
from .server import VARIANTS, Server, check_port_free, free_port


@dataclass
class VariantResult:
    variant: str
    requests: int
    outcomes: dict[str, int]
    tokens: int
    ready_s: float
    serve_s: float
    reports: list[str]
    replays: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None  # the server died or never started: an infrastructure error

    @property
    def steps_judged(self) -> int:
        return sum(r["steps"] for r in self.replays)

    @property
    def passed(self) -> bool:
        clean = not self.reports and self.replays and all(r["agrees"] for r in self.replays)
        served = not any(self.outcomes.get(k) for k in ("refused", "failed", "control failed"))
        return bool(clean and served and self.error is None)

    def to_json(self) -> dict[str, Any]:
        return {**self.__dict__, "steps_judged": self.steps_judged, "passed": self.passed}


def run_variant(
    release: str,
    variant: str,
    out_dir: Path,
    requests: int,
    concurrency: int,
    disconnect_rate: float,
    seed: int,
    mode: str,
    port: int | None,
    kv_blocks: int | None,
) -> VariantResult:
    venv = require_venv(release)
    model = tiny_model(venv)
    port = port or free_port()
    check_port_free(port)
    capture = out_dir / f"capture-{variant}.jsonl"
    server = Server(
        venv,
        model,
        port,
        VARIANTS[variant],
        f"mode={mode},capture={capture}",
        live_pythonpath(out_dir / "pythonpath"),
        out_dir / f"server-{variant}.log",
        kv_blocks,
    )
    result = VariantResult(variant, requests, {}, 0, 0.0, 0.0, [])
    try:
        result.ready_s = round(server.wait_ready(), 1)
        t0 = time.monotonic()
        todo = plans(requests, seed, disconnect_rate, VARIANTS[variant].priority)
        v = VARIANTS[variant]
        tally = drive(port, str(model), todo, concurrency, seed if v.controls else None, v.pooling)
        result.serve_s = round(time.monotonic() - t0, 1)
        result.outcomes, result.tokens = dict(tally.outcomes), tally.tokens
        if not server.alive:
            result.error = f"the server died while serving (exit {server.proc.returncode}): {server.last_line()}"
        elif (death := server.engine_death()) is not None:  # the API server stays up and fails every request
            result.error = f"vLLM's engine core died while serving: {death}"
    except InfrastructureError as e:
        result.error = f"{e.where}: {e.why}"
    finally:
        server.stop()
    result.reports = server.monitor_reports()
    if result.error is None and capture.exists():
        for s in read_capture(str(capture)).sessions:
            if not any(line.kind == "schedule" for line in s.lines):
                continue  # a scheduler that never scheduled (vLLM's start-up profiling): nothing to replay
            r = replay_live(str(capture), session=s.id)
            d = r.divergence
            result.replays.append(
                {
                    "session": s.id,
                    "steps": r.steps_compared,
                    "requests": len(r.workload.requests),
                    "mid_step_aborts": sum(1 for a in r.workload.aborts if a.mid_step),
                    "agrees": d is None,
                    "divergence": None if d is None else f"step {d.step}: {d.field}: reference={d.a!r} live={d.b!r}",
                    "notes": r.notes,
                }
            )
    return result
