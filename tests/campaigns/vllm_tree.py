"""vLLM 0.33.0 source trees for tests of `certify --vllm-source`, made from the pinned venv.

A vLLM contributor points `--vllm-source` at their checkout. The tests need
one too, without the network: the venv's `vllm/` package *is* vLLM 0.33.0's
Python source (its compiled `.so` files were deleted when the venv was
built, and the scheduler never needs them). It is copied with its
`__pycache__` (mtimes kept, so the bytecode stays valid and the driver
starts as fast as usual) and committed, so the certificate has a commit.

Files are hard-linked where the filesystem allows (a copy costs seconds
otherwise), so a planted change must never write into a file in place: it
would write into the venv. `plant` unlinks the file and writes a new one.

Two planted changes:
* `APPEND_ON_PREEMPT` (the starvation bug): a preempted request is appended to the
  waiting queue instead of put back at its head. It breaks the invariant
  `no-starvation-after-prepend`.
* `FREE_HEAD_FIRST`: a request's blocks are freed head first instead of tail
  first. Other block ids get reused, so it departs at level `blocks`, but
  every invariant holds: what `--allow-divergence` must let through.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from schedspec.conformance.engines.vllm import vllm_venv_path

APPEND_ON_PREEMPT = (
    "vllm/v1/core/sched/scheduler.py",
    "        self.waiting.prepend_request(request)\n",
    "        self.waiting.add_request(request)  # planted: append, not prepend\n",
)
FREE_HEAD_FIRST = (
    "vllm/v1/core/single_type_kv_cache_manager.py",
    "        self.block_pool.free_blocks(reversed(self.pop_blocks_for_free(request_id)))\n",
    "        self.block_pool.free_blocks(self.pop_blocks_for_free(request_id))  # planted: head first\n",
)
GIT_ID = ("-c", "user.name=schedspec-test", "-c", "user.email=test@example.invalid")


def installed_vllm() -> Path:
    return next((vllm_venv_path() / "lib").glob("python3*/site-packages/vllm"))


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *GIT_ID, *args], check=True, capture_output=True, text=True
    ).stdout.strip()


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def make_vllm_checkout(dest: Path, origin: Path | None = None) -> Path:
    """A committed vLLM 0.33.0 source tree at `dest` (the root that holds `vllm/`).

    With `origin` (an earlier checkout), the whole tree, `.git` included, is
    linked from it: git and Python both replace files rather than rewrite them.
    """
    if origin is not None:
        shutil.copytree(origin, dest, copy_function=_link_or_copy)
        return dest
    dest.mkdir(parents=True, exist_ok=True)
    # Without `_version.py`, as in a git checkout (setuptools-scm writes it at install time).
    shutil.copytree(
        installed_vllm(),
        dest / "vllm",
        ignore=shutil.ignore_patterns("vllm-rs", "*.so", "_version.py"),
        copy_function=_link_or_copy,
    )
    (dest / ".gitignore").write_text("__pycache__/\n")
    git(dest, "init", "-q")
    git(dest, "add", "-A")
    git(dest, "commit", "-q", "-m", "vLLM 0.33.0")
    return dest


def plant(checkout: Path, change: tuple[str, str, str], commit: bool) -> None:
    """Make `change` (file, old line, new line); commit it, or leave the tree dirty."""
    rel, old, new = change
    path = checkout / rel
    text = path.read_text()
    assert text.count(old) == 1, f"{rel} no longer holds the line this test plants a change in"
    path.unlink()  # the file may be a hard link into the venv
    path.write_text(text.replace(old, new))
    if commit:
        git(checkout, "commit", "-q", "-am", f"planted change in {rel}")
