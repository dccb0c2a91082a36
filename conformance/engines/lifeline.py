"""Our child processes die with their parent: no worker, engine host or vLLM driver outlives a killed run.

A campaign's processes form a tree: `certify`, its pool workers
(`harness/workers.py`), each worker's isolated engine host (`host.py`, beside
this module) and vLLM driver (`vllm_env/driver.py`). When `certify` is interrupted it kills
its workers, but a worker killed with SIGKILL cannot pass that on, and a
host stuck inside a hanging engine never reads the EOF that would end it.
Linux's `PR_SET_PDEATHSIG` has the kernel send SIGKILL to a process as
soon as its parent is gone, whatever the parent died of. Elsewhere (macOS)
this is a no-op, and the EOF on the protocol pipes is the only lifeline.

`vllm_env/driver.py` runs in vLLM's venv, where this package cannot be
imported, so it carries a twin, `die_with_parent`, of the same few lines.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def die_with_parent(parent: int | None = None) -> bool:
    """Ask the kernel for SIGKILL when the parent exits; False where it cannot (not Linux, no libc).

    `parent` (or SCHEDSPEC_PARENT_PID, which the parent sets as it starts the child) is the pid the
    parent had: one that died before this ran has left the child re-parented already, and
    `os.getppid()` alone would take the new parent for it.
    """
    if not sys.platform.startswith("linux"):
        return False
    parent = parent or int(os.environ.pop("SCHEDSPEC_PARENT_PID", "0")) or os.getppid()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            return False
    except (OSError, AttributeError):
        return False
    if os.getppid() != parent:  # the parent died before the request was in place: nothing will send the signal
        os.kill(os.getpid(), signal.SIGKILL)
    return True


def worker_init(parent: int | None = None) -> None:
    """A pool worker: dies with `certify`, and leaves ^C to it.

    A ^C at a terminal reaches the whole process group. The parent decides
    what an interrupt means (kill the workers, restore the output folder,
    exit 130); a worker that raised KeyboardInterrupt too would only print a
    traceback per worker and race it.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    die_with_parent(parent)
