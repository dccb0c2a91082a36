"""Issue #20's table in one run: the reference against vLLM, the torch Engine API against its tensor step,
`schedspec contracts`' wall time, and the state machine's examples per second before and after.

Why one script: the machine is shared and its speed drifts by half within minutes, so a ratio is only worth
reading when both of its sides were measured in the same run, close together. So every engine runs in a
process of its own, and they take turns (`--rounds`) of one untimed and three timed steps, in a rotating
order; each engine's figure is its median step. An earlier version alternated whole measurements of a few
steps each, and two runs of it 40 minutes apart put the reference at 10k at 92 ms and at 63 ms.

"Before" is a git revision (`--before`, default the commit before #20's reference changes). Its tree is
checked out into a temporary worktree and run by the same interpreter through a shim folder that maps the
`schedspec.*` packages onto it, so the before/after pairs differ only in the code.

    .venv/bin/python benchmarks/bench_speed.py [--before REV] [--results benchmarks/RESULTS.md]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import torch
from bench_torch import PROMPT_LEN, decode_workload, python_stepper, tensor_stepper  # siblings: this runs as a script

from schedspec.gpu_impl.device import cpu_threads

from vllm_timer import PipeStepper, vllm_python, vllm_stepper

ROOT = Path(__file__).resolve().parents[1]
BEFORE = "71395a6"  # main before #20's reference changes (2026-12-02)
STEPS_PER_TURN = 3
# The engines stepped in this project's venv (`--worker`): kind -> (engine, columnar) for `python_stepper`.
WORKERS: dict[str, tuple] = {
    "reference": ("reference", False),
    "tensor": ("torch", False),  # `tensor_stepper`, not an Engine
    "columnar": ("torch", True),
    "objects": ("torch", False),
}
PACKAGES = ("spec", "reference_impl", "gpu_impl", "conformance", "proofs", "mutants", "live")


def per_step(n: int, rounds: int) -> dict[str, float]:
    """Median seconds per step of each engine at N running decodes, the engines taking turns.

    Every engine runs in a process of its own (`vllm_timer.PipeStepper`), brought to the steady decode state.
    Then each round gives every engine a turn, in an order that rotates from round to round, so each side of a
    ratio meets the same moments of the machine. A turn is one untimed step, then `STEPS_PER_TURN` timed
    ones, since the first step after another engine's turn runs on caches that engine filled.

    Why processes: inside one process the reference would share a heap and a cache with three torch engines,
    while vLLM, in its venv's process, had its own. (Measured, it made no difference: 2.1x to 2.4x either way,
    `benchmarks/RESULTS.md`; the processes make the two sides alike, not faster.)
    """
    steppers = {kind: PipeStepper([sys.executable, __file__, "--worker", kind, str(n)]) for kind in WORKERS}
    if vllm_python() is not None:
        steppers["vllm"] = vllm_stepper(decode_workload(n), PROMPT_LEN)
    try:
        got: dict[str, list[float]] = {k: [] for k in steppers}
        names = list(steppers)
        for i in range(rounds):
            for name in names[i % len(names) :] + names[: i % len(names)]:
                steppers[name].step()  # untimed
                got[name] += [steppers[name].step() for _ in range(STEPS_PER_TURN)]
    finally:
        for s in steppers.values():
            s.close()
    return {k: statistics.median(v) for k, v in got.items()}


def worker(kind: str, n: int) -> None:
    """`--worker KIND N`: one engine of `WORKERS` in the decode state at N, stepped once per line read."""
    proto = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    os.dup2(2, 1)  # stdout is the protocol's alone
    w = decode_workload(n)
    with cpu_threads(torch.device("cpu")):
        engine, columnar = WORKERS[kind]
        step = tensor_stepper([w], "cpu") if kind == "tensor" else python_stepper(engine, w, columnar)
        gc.collect()
        proto.write(json.dumps({"ready": kind}) + "\n")
        for _ in sys.stdin:
            proto.write(json.dumps({"seconds": step(), "decoding": True}) + "\n")


def contracts_wall(timeout: float, jobs: int) -> tuple[float, str]:
    """Wall seconds of `schedspec contracts --timeout T --jobs J`, and its verdicts counted (from its results)."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [str(ROOT / ".venv/bin/schedspec"), "contracts", "--timeout", str(timeout), "--jobs", str(jobs)]
        t0 = time.perf_counter()
        done = subprocess.run([*cmd, "--out", tmp, "--force"], capture_output=True, text=True, cwd=ROOT)
        seconds = time.perf_counter() - t0
        results = Path(tmp) / "results.json"
        if not results.exists():
            return seconds, f"exit {done.returncode}, no results"
        verdicts = Counter(r["verdict"] for r in json.loads(results.read_text())["results"])
    return seconds, ", ".join(f"{n} {v}" for v, n in sorted(verdicts.items()))


def _shim(tree: Path, into: Path) -> Path:
    """A folder whose `schedspec` package is `tree`'s, laid out as `pyproject.toml`'s package-dir maps it."""
    pkg = into / "schedspec"
    pkg.mkdir(parents=True)
    for f in (tree / "schedspec").iterdir():
        (pkg / f.name).symlink_to(f)
    for name in PACKAGES:
        if (tree / name).exists():
            (pkg / name).symlink_to(tree / name)
    return into


def state_machine(tree: Path, pythonpath: Path | None, examples: int) -> dict[str, tuple[int, float]]:
    """{bounds: (examples, seconds)} from `tree`'s own bench_state_machine.py."""
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    done = subprocess.run(
        [sys.executable, str(tree / "benchmarks/bench_state_machine.py"), "--examples", str(examples)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        cwd=tree / "benchmarks",
    )
    rows = re.findall(r"^\| (\w+) \| (\d+) \| ([\d.]+) \|", done.stdout, re.MULTILINE)
    return {name: (int(n), float(s)) for name, n, s in rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", default=BEFORE, help=f"the revision to compare with (default {BEFORE})")
    parser.add_argument("--running", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--rounds", type=int, default=15, help="rounds per N, a turn of every engine each (default 15)")
    parser.add_argument("--examples", type=int, default=200, help="state machine examples per row (default 200)")
    parser.add_argument("--results", help="append the table, with the command, to this Markdown file")
    args = parser.parse_args()
    load0 = os.getloadavg()[0]

    steps = {n: per_step(n, args.rounds) for n in args.running}
    for n, row in steps.items():
        print(f"N={n}: " + ", ".join(f"{k} {v * 1e3:.2f} ms" for k, v in row.items()), flush=True)
    wall, summary = contracts_wall(3, 2)
    print(f"contracts: {wall:.1f} s ({summary})", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "before"
        subprocess.run(
            ["git", "worktree", "add", "--detach", str(tree), args.before], cwd=ROOT, check=True, capture_output=True
        )
        try:
            before = state_machine(tree, _shim(tree, Path(tmp) / "shim"), args.examples)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, capture_output=True)
    after = state_machine(ROOT, None, args.examples)
    print(f"state machine before {before}, after {after}", flush=True)

    text = report(args, steps, wall, summary, before, after, load0)
    print(text)
    if args.results:
        with open(args.results, "a", encoding="utf-8") as f:
            f.write("\n" + text)


def report(args, steps, wall, summary, before, after, load0) -> str:
    cmd = ".venv/bin/python benchmarks/bench_speed.py " + " ".join(sys.argv[1:])
    ms = lambda s: f"{s * 1e3:,.2f}"  # noqa: E731
    lines = [
        f"## #20 in one run: reference vs vLLM, the torch Engine API, contracts, the state machine "
        f"({time.strftime('%Y-%m-%d')})",
        "",
        f"Command: `{cmd}`",
        "",
        f"Machine: {os.cpu_count()} CPU cores, Python {platform.python_version()}; load average {load0:.1f} at "
        f"the start, {os.getloadavg()[0]:.1f} at the end. Per-step times are medians over {args.rounds} "
        f"rounds, each giving every engine a turn (an untimed step, then {STEPS_PER_TURN} timed) in a rotating "
        "order, every engine in a process of its own (`schedule()` + `update_from_output()`, N running decodes, "
        "the model's answer built between them, untimed).",
        "",
        "| N | reference ms | vLLM 0.33.0 ms | vLLM / reference | torch tensor step ms | torch Engine API ms "
        "| Engine API / tensor step | Engine API, objects read, ms |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for n, r in steps.items():
        v = r.get("vllm")
        ratio = f"{v / r['reference']:.1f}x" if v else "-"
        lines.append(
            f"| {n:,} | {ms(r['reference'])} | {ms(v) if v else 'no venv'} | {ratio} | {ms(r['tensor'])} | "
            f"{ms(r['columnar'])} | {r['columnar'] / r['tensor']:.1f}x | {ms(r['objects'])} |"
        )
    lines += [
        "",
        "- torch tensor step: `gpu_impl.batch.advance` (schedule, the tensor fake model, update), no Python objects.",
        "- torch Engine API: `TorchEngine.schedule()` + `update_from_output()` driven by a tensor model: the fake "
        "model's tensor twin reads the output's columns and answers in `SampledTokens` (untimed, and checked "
        "against the spec's fake model), and no per-request object is built (`gpu_impl/columnar.py` builds them "
        "only when read).",
        "- Engine API, objects read: the same step reading every field of its output inside the timing and "
        "given the spec's `ModelRunnerOutput`, as the engine loop and the differ use it.",
        "",
        f"`schedspec contracts --timeout 3 --jobs 2`: {wall:.1f} s of wall time ({summary}).",
        "",
        f"State machine (`benchmarks/bench_state_machine.py --examples {args.examples}`), before = "
        f"`{args.before}`, after = this tree:",
        "",
        "| bounds | before examples/s | after examples/s | after / before |",
        "|---|---:|---:|---:|",
    ]
    for name in after:
        b, a = before.get(name), after[name]
        rb, ra = (b[0] / b[1] if b else None), a[0] / a[1]
        lines.append(f"| {name} | {f'{rb:.1f}' if rb else '-'} | {ra:.1f} | {f'{ra / rb:.2f}x' if rb else '-'} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:  # one engine of `per_step`, in a process of its own
        worker(sys.argv[2], int(sys.argv[3]))
    else:
        main()
