"""Built-in workloads: the founding notes' scenarios, ready to run by name.

Each is a function so that its construction reads as the scenario it
encodes; `BUILTIN` maps the public names to them. Prompt token ids are
derived from the request id so that different requests have different
prompts, as in the vLLM CPU guide's driver; they only matter once prefix
caching is on.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Callable

from ...spec.config import Policy, SchedulerConfig
from ...spec.errors import SpecError
from ...spec.request import Request
from ...spec.workload import Workload, WorkloadRequest
from .release_examples import VERSION_WORKLOADS


def prompt_for(request_id: str, length: int) -> tuple[int, ...]:
    return (3 + zlib.crc32(request_id.encode()) % 1000,) * length


def _req(
    request_id: str,
    prompt_len: int,
    max_tokens: int,
    arrival_step: int = 0,
    priority: int = 0,
    arrival_time: float = 0.0,
) -> WorkloadRequest:
    request = Request(
        request_id,
        prompt_for(request_id, prompt_len),
        max_tokens=max_tokens,
        ignore_eos=True,
        priority=priority,
        arrival_time=arrival_time,
    )
    return WorkloadRequest(request, arrival_step)


def seed_long_prompt() -> Workload:
    """A long prompt beside many decodes: 200 decodes and one 20000-token prompt share an 8192-token budget.

    (The project's founding worked example, "seed 000", tabulates it: `tests/unit/reference_impl/test_seed_tables.py`.)
    The decodes are prefilled in step 0. From step 1 they take 1 token each,
    so the long prompt gets 8192 - 200 = 7992, 7992, then the last 4016.
    """
    config = SchedulerConfig(
        max_num_batched_tokens=8192, max_num_seqs=1024, max_model_len=32768, block_size=16, num_gpu_blocks=100_000
    )
    decodes = [_req(f"d{i}", 32, max_tokens=16, arrival_time=i) for i in range(200)]
    long = _req("long", 20_000, max_tokens=8, arrival_step=1, arrival_time=200)
    assert seed_long_prompt.__doc__ is not None  # docstrings are kept: no `python -OO`
    return Workload(
        config, tuple(decodes + [long]), name="seed-long-prompt", description=seed_long_prompt.__doc__.split("\n")[0]
    )


def _pressure(policy: Policy, priorities: list[int]) -> Workload:
    # vllm-0.33-on-cpu.md, scenario 2: 19 usable blocks, four 60-token prompts of 4 blocks each.
    config = SchedulerConfig(
        max_num_batched_tokens=1024,
        max_num_seqs=16,
        max_model_len=2048,
        block_size=16,
        num_gpu_blocks=20,
        policy=policy,
    )
    requests = [_req(f"p{i}", 60, max_tokens=40, priority=priorities[i], arrival_time=i) for i in range(4)]
    return Workload(config, tuple(requests))


def seed_preemption() -> Workload:
    """A small KV pool: FCFS preempts the newest request (p3, then p2), which later recompute prompt + outputs."""
    w = _pressure("fcfs", [0, 0, 0, 0])
    return w.replace(name="seed-preemption", description=seed_preemption.__doc__)


def seed_priority() -> Workload:
    """The same pressure under PRIORITY: the victim is the least important request (p0), not the newest."""
    w = _pressure("priority", [2, 0, 1, 0])
    return w.replace(name="seed-priority", description=seed_priority.__doc__)


BUILTIN: dict[str, Callable[[], Workload]] = {
    "seed-long-prompt": seed_long_prompt,
    "seed-preemption": seed_preemption,
    "seed-priority": seed_priority,
    **VERSION_WORKLOADS,  # one per release variant (spec/versions.py), at the default release
}


def load_workload(name_or_path: str) -> Workload:
    """A built-in name, or a path to a workload JSON file, whatever the file is called.

    A built-in name wins over a file of that name in the current folder, so
    a name means the same workload wherever it is run; `./NAME` is the file.
    Something that is neither, but looks like a path, goes to the loader so
    that the error says "no such file".
    """
    if name_or_path in BUILTIN:
        return BUILTIN[name_or_path]()
    if os.path.exists(name_or_path) or name_or_path.endswith(".json") or "/" in name_or_path:
        return Workload.load(name_or_path)
    raise SpecError("WORKLOAD", name_or_path, f"is neither a file nor a built-in ({', '.join(BUILTIN)})")
