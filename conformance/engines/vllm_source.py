"""A user's vLLM source tree (`certify --vllm-source PATH`): where its `vllm/` is, and which commit.

A vLLM contributor points schedspec at a checkout; the driver imports that
tree's pure-Python `vllm/` package on the pinned venv's dependencies. Two
things must be known before and after a run: that PATH really holds a vLLM
package (a wrong path is bad input, reported at once, not 300 failed
workloads), and what exactly was certified, so the certificate and each
counterexample record the tree's git commit and whether `vllm/` had
uncommitted changes.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from ...spec.errors import SpecError

SCHEDULER_FILE = Path("vllm") / "v1" / "core" / "sched" / "scheduler.py"


def resolve_vllm_source(path: str | Path) -> Path:
    """The folder that holds the user's `vllm/` package (a checkout's root, or the package itself)."""
    p = Path(path).expanduser().resolve()
    if (p / SCHEDULER_FILE).is_file() and (p / "vllm" / "__init__.py").is_file():
        return p
    if p.name == "vllm" and (p / "__init__.py").is_file() and (p.parent / SCHEDULER_FILE).is_file():
        return p.parent
    why = "does not exist" if not p.exists() else f"is not a vLLM source tree: no {SCHEDULER_FILE} in it"
    raise SpecError("--vllm-source", str(path), why)


def vllm_source_info(source: str | Path) -> dict[str, Any]:
    """Path, git commit and whether `vllm/` differs from it; commit None if it is not a git checkout."""

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(source), *args], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    # Only `vllm/` is imported from the tree; outputs written beside it (`--out cert`) must not make it dirty.
    status = git("status", "--porcelain", "--", "vllm") if commit else None
    return {"path": str(source), "commit": commit, "dirty": None if status is None else bool(status)}
