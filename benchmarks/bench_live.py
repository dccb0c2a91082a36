"""Overhead of `schedspec.live`: a step of vLLM's own scheduler, monitored and captured, against the plain one.

Every variant runs in one process, on the same workload, inside the vLLM venv: N requests with short prompts
and a long `max_tokens`, stepped until all N decode, then `--steps` steps (schedule() + update_from_output(),
the fake model sampling one token each) timed. Variants: vLLM's `Scheduler`; `MonitoredScheduler` with
capture only, monitors only (mode=log), and both, judging every step or one in 10 or 100. Ratios against the
plain scheduler are what to read. A variant's time is its mean step in each round (a sampled monitor's cost
falls on one step in N, so `--steps` should be a multiple of N and the mean, not the median, is its cost), and
the median of those over `--rounds` rounds, each round running every variant once in turn: a busy spell then hits every variant
alike, rather than the one that happened to run in it, and each round starts one variant later. After the
prefill steps the heap is frozen (`gc.freeze()`), as vLLM's engine core freezes it once started; the fake
model's output is built outside the timed part.

    .venv/bin/python benchmarks/bench_live.py --running 100 1000 [--steps 100] [--rounds 3]

Run from the project venv, it re-runs itself with the vLLM venv's interpreter, with a folder holding a
`schedspec` package of symlinks (`spec/`, `live/`) on PYTHONPATH, as tests/campaigns/test_live_monitored.py does.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VARIANTS = {
    "plain": (None, ""),
    "wrapper, all off": ("schedspec.live.MonitoredScheduler", "mode=off"),
    "capture only": ("schedspec.live.MonitoredScheduler", "mode=off,capture={cap}"),
    "monitors only": ("schedspec.live.MonitoredScheduler", "mode=log"),
    "both": ("schedspec.live.MonitoredScheduler", "mode=log,capture={cap}"),
    "monitors, sample=100": ("schedspec.live.MonitoredScheduler", "mode=log,sample=100"),
    "both, sample=10": ("schedspec.live.MonitoredScheduler", "mode=log,sample=10,capture={cap}"),
    "both, sample=100": ("schedspec.live.MonitoredScheduler", "mode=log,sample=100,capture={cap}"),
}


def outside() -> int:
    venv = Path(os.environ.get("VLLM_REF_VENV", ROOT / ".venv-vllm-ref"))
    with tempfile.TemporaryDirectory() as tmp:
        pkg = Path(tmp) / "schedspec"
        pkg.mkdir()
        (pkg / "__init__.py").symlink_to(ROOT / "schedspec" / "__init__.py")
        (pkg / "spec").symlink_to(ROOT / "spec")
        (pkg / "live").symlink_to(ROOT / "live")
        env = {**os.environ, "PYTHONPATH": tmp, "SCHEDSPEC_BENCH_INSIDE": "1"}
        return subprocess.run([str(venv / "bin" / "python"), __file__, *sys.argv[1:]], env=env).returncode


def inside(running: list[int], steps: int, rounds: int) -> None:
    for k, v in {
        "HF_HUB_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "VLLM_LOGGING_LEVEL": "ERROR",
        "VLLM_USE_V2_MODEL_RUNNER": "1",
        "VLLM_CACHE_ROOT": os.path.join(sys.prefix, "vllm-cache"),
    }.items():
        os.environ.setdefault(k, v)
    sys.path.append(str(ROOT / "conformance" / "vllm_env"))
    from vllm.sampling_params import SamplingParams
    from vllm.utils.hashing import sha256
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
    from vllm.v1.outputs import ModelRunnerOutput
    from vllm.v1.request import Request

    from cpu_scheduler import build_scheduler, stub_model_dir

    init_none_hash(sha256)
    model_dir, model_configs = stub_model_dir(), {}
    tmp = tempfile.mkdtemp()
    print(f"{'running':>8} {'variant':<20} {'ms/step':>9} {'ratio':>7}", flush=True)
    for n in running:
        config = {
            "max_num_batched_tokens": max(16384, n),
            "max_num_seqs": n,
            "max_model_len": 32768,
            "block_size": 16,
            "num_gpu_blocks": n * 40 + 1,
            "long_prefill_token_threshold": 0,
            "enable_chunked_prefill": True,
            "policy": "fcfs",
            "watermark": 0.0,
            "scheduler_reserve_full_isl": True,
            "max_num_scheduled_tokens": None,
        }
        medians: dict[str, list[float]] = {name: [] for name in VARIANTS}
        names = list(VARIANTS)
        for r, k in itertools.product(range(rounds), range(len(names))):
            name = names[(r + k) % len(names)]  # each round starts one variant later: no variant always runs first
            cls, live = VARIANTS[name]
            cap = os.path.join(tmp, f"cap-{n}-{len(medians[name])}-{name.replace(' ', '_').replace(',', '')}.jsonl")
            os.environ.pop("SCHEDSPEC_VLLM_SCHEDULER_CLS", None)
            if cls:
                os.environ["SCHEDSPEC_VLLM_SCHEDULER_CLS"] = cls
            os.environ["SCHEDSPEC_LIVE"] = live.format(cap=cap)
            s, refused = build_scheduler(config, model_dir, model_configs)
            assert not refused, refused
            for i in range(n):
                p = SamplingParams(max_tokens=100_000, ignore_eos=True)
                p.update_from_generation_config({}, eos_token_id=2)
                s.add_request(
                    Request(
                        request_id=f"b{i}",
                        prompt_token_ids=[3 + i % 1000] * 16,
                        sampling_params=p,
                        pooling_params=None,
                        arrival_time=float(i),
                        block_hasher=get_request_block_hasher(16, sha256),
                    )
                )
            times = []
            for step in range(steps + 3):
                if step == 3:  # the first steps prefill; then, as vLLM's engine core does once started
                    gc.collect()  # (vllm/v1/engine/core.py: freeze_gc_heap), the long-lived heap is frozen
                    gc.freeze()
                t0 = time.perf_counter()
                so = s.schedule()
                t1 = time.perf_counter()
                rids = list(so.num_scheduled_tokens)
                out = ModelRunnerOutput(
                    req_ids=rids,
                    req_id_to_index={r: j for j, r in enumerate(rids)},
                    sampled_token_ids=[[7] for _ in rids],
                )
                t2 = time.perf_counter()
                s.update_from_output(so, out)
                if step >= 3:
                    times.append(t1 - t0 + time.perf_counter() - t2)
            s.shutdown()
            gc.unfreeze()
            del s, so, out
            gc.collect()
            medians[name].append(statistics.fmean(times) * 1000)
        base = statistics.median(medians["plain"])
        for name, ms_each in medians.items():
            ms = statistics.median(ms_each)
            print(f"{n:>8} {name:<20} {ms:>9.2f} {ms / base:>7.2f}", flush=True)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--running", type=int, nargs="+", default=[100, 1000])
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    if os.environ.get("SCHEDSPEC_BENCH_INSIDE"):
        inside(args.running, args.steps, args.rounds)
    else:
        sys.exit(outside())
