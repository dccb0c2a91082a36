"""Which device the torch engine runs on.

`SCHEDSPEC_TORCH_DEVICE` (e.g. `cpu`, `cuda`, `cuda:1`) wins; otherwise CUDA
when torch sees a GPU, else the CPU. The engine's results do not depend on
the device: every tensor is an integer tensor (arrival times aside, which
are only compared), so CPU and CUDA runs must agree bit for bit.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import torch

ENV = "SCHEDSPEC_TORCH_DEVICE"


def pick_device(device: str | torch.device | None = None) -> torch.device:
    if device is not None:
        return torch.device(device)
    env = os.environ.get(ENV)
    if env:
        return torch.device(env)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


THREADS_ENV = "SCHEDSPEC_TORCH_THREADS"


@contextmanager
def cpu_threads(device: torch.device) -> Iterator[None]:
    """Run the enclosed tensor programs on `$SCHEDSPEC_TORCH_THREADS` CPU threads (default 1).

    The step is many small ops; with OpenMP's fork-join around each, more
    threads cost more than they give, and on a shared machine spinning
    workers made a campaign 7x slower (measured on the 2-core dev box).
    The setting is restored on exit; CUDA runs are left alone.
    """
    if device.type != "cpu":
        yield
        return
    want, old = int(os.environ.get(THREADS_ENV, "1")), torch.get_num_threads()
    if want == old:
        yield
        return
    torch.set_num_threads(want)
    try:
        yield
    finally:
        torch.set_num_threads(old)
