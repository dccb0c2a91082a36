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

import re
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


_VERSION_FILES = (
    Path("vllm") / "_version.py",  # written by setuptools-scm when the tree is built or installed
    Path("vllm") / "version.py",
    Path("PKG-INFO"),  # an unpacked sdist
)
_VERSION_RE = re.compile(
    r"""^\s*(?:__version__|version)\s*(?::\s*str\s*)?=\s*(?:\w+\s*=\s*)*['"]([^'"]+)['"]|^Version:\s*(\S+)""",
    re.MULTILINE,
)


def source_version(source: Path) -> str | None:
    """The version string a source tree declares (vllm/_version.py, vllm/version.py, PKG-INFO), if any."""
    for rel in (*_VERSION_FILES, *sorted(p.relative_to(source) for p in source.glob("*.egg-info/PKG-INFO"))):
        try:
            text = (source / rel).read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        m = _VERSION_RE.search(text)
        if m:
            return m.group(1) or m.group(2)
    return None


def source_release(source: Path) -> str:
    """The modelled release a source tree is judged as when `--vllm-version` is not given.

    The newest release in `spec.versions.RELEASES` not newer than the tree's declared version: a
    `0.32.1.dev4+g...` tree is 0.32.0 plus changes made since. A tree that declares no version is taken
    as the default release; one older than every modelled release is refused.
    """
    from ...spec.versions import DEFAULT_RELEASE, RELEASES, release_key

    declared = source_version(source)
    base = re.match(r"(\d+)\.(\d+)\.(\d+)", declared or "")
    if base is None:
        return DEFAULT_RELEASE
    key = tuple(int(x) for x in base.groups())
    older = [r for r in RELEASES if release_key(r) <= key]
    if not older:
        why = f"declares vLLM {declared}, older than every modelled release; pass --vllm-version"
        raise SpecError("--vllm-source", str(source), why)
    return max(older, key=release_key)
