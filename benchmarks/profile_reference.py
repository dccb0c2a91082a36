"""Where the reference's step goes: schedule() and update_from_output() at N running decodes, timed, then profiled.

The decode state is bench_torch.py's (every request decodes one token a step), reached by three warm-up steps.
It prints the unprofiled ms per step, then the top functions by their own time under cProfile, as Markdown rows
(function, calls, own share, cumulative share) for benchmarks/RESULTS.md.

    .venv/bin/python benchmarks/profile_reference.py 1000
"""

from __future__ import annotations

import cProfile
import pstats
import sys
import time

from bench_torch import _python_engine, decode_workload  # a sibling: this file runs as a script

from schedspec.spec.engine import fake_model

STEPS = 10


def main(n: int) -> None:
    w = decode_workload(n)
    e = _python_engine("reference", w.config, "cpu")
    for r in w.requests:
        e.add_request(r.request)
    for _ in range(3):
        o = e.schedule()
        e.update_from_output(o, fake_model(w, o, e.summary()))
    sched = upd = 0.0
    for _ in range(STEPS):
        t0 = time.perf_counter()
        o = e.schedule()
        t1 = time.perf_counter()
        mo = fake_model(w, o, e.summary())
        t2 = time.perf_counter()
        e.update_from_output(o, mo)
        sched, upd = sched + t1 - t0, upd + time.perf_counter() - t2
    print(f"unprofiled: schedule {sched / STEPS * 1000:.2f} ms, update {upd / STEPS * 1000:.2f} ms per step at N={n}")
    prof = cProfile.Profile()
    for _ in range(STEPS):
        prof.enable()
        o = e.schedule()
        prof.disable()
        mo = fake_model(w, o, e.summary())
        prof.enable()
        e.update_from_output(o, mo)
        prof.disable()
    stats = pstats.Stats(prof)
    total = stats.total_tt  # type: ignore[attr-defined]
    rows = sorted(stats.stats.items(), key=lambda kv: -kv[1][2])[:12]  # type: ignore[attr-defined]
    for (path, _, name), (_, calls, own, cumulative, _) in rows:
        print(
            f"| `{path.split('/main/')[-1]}:{name}` | {calls} | {100 * own / total:.0f}% | {100 * cumulative / total:.0f}% |"
        )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1000)
