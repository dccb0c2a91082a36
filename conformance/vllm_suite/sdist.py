"""A vLLM release's own tests, from its source distribution on the package index, cached beside its venv.

The wheel holds the `vllm` package only; the sdist holds `tests/` too.
`pip download --no-binary` would try to build the sdist (and fail without
CUDA), so the file is taken from the index's simple page (PEP 503), the same
index pip is configured with, checked against the page's sha256, and only
`tests/` is kept: about 36 MB of 47. The cache is written whole or not at
all (a temporary folder, renamed into place), so an interrupted fetch never
leaves half a test tree that looks complete.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import urllib.parse
import urllib.request
from pathlib import Path

from ...spec.errors import InfrastructureError
from ..engines.vllm_venvs import vllm_venv_path

DEFAULT_INDEX = "https://pypi.org/simple"
STAMP = ".complete"


def tests_root(release: str) -> Path:
    """Where the release's test tree is cached: beside its venv, `<venv>-tests/vllm-<release>/`."""
    venv = vllm_venv_path(release)
    return venv.with_name(venv.name + "-tests") / f"vllm-{release}"


def index_url() -> str:
    """The index pip is configured with (`PIP_INDEX_URL`, else `pip config`), else PyPI."""
    if os.environ.get("PIP_INDEX_URL"):
        return os.environ["PIP_INDEX_URL"].rstrip("/")
    try:
        done = subprocess.run(
            [sys.executable, "-m", "pip", "config", "get", "global.index-url"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        if done.returncode == 0 and done.stdout.strip():
            return done.stdout.strip().rstrip("/")
    except (OSError, subprocess.TimeoutExpired):
        pass
    return DEFAULT_INDEX


def sdist_link(page: str, release: str) -> tuple[str, str | None]:
    """(url, sha256 or None) of `vllm-<release>.tar.gz` on a PEP 503 simple page."""
    for href in re.findall(r'href="([^"]+)"', page):
        name = href.split("#")[0].rsplit("/", 1)[-1]
        if name == f"vllm-{release}.tar.gz":
            digest = re.search(r"#sha256=([0-9a-f]{64})", href)
            return href.split("#")[0], digest.group(1) if digest else None
    raise InfrastructureError("vllm-tests: the index", None, f"lists no vllm-{release}.tar.gz")


def fetch_tests(release: str, timeout_s: float = 600.0) -> Path:
    """The release's `tests/` tree (under the returned folder), fetched and cached on first use."""
    root = tests_root(release)
    if (root / STAMP).is_file():
        return root
    index = index_url()
    try:
        with urllib.request.urlopen(f"{index}/vllm/", timeout=timeout_s) as r:
            url, sha = sdist_link(r.read().decode("utf-8", "replace"), release)
        if url.startswith("/") or not re.match(r"^[a-z]+://", url):
            url = urllib.parse.urljoin(f"{index}/vllm/", url)
        root.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=root.parent, prefix=".fetch-") as tmp:
            archive = Path(tmp) / "sdist.tar.gz"
            with urllib.request.urlopen(url, timeout=timeout_s) as r, open(archive, "wb") as f:
                shutil.copyfileobj(r, f)
            if sha is not None and hashlib.sha256(archive.read_bytes()).hexdigest() != sha:
                raise InfrastructureError("vllm-tests: the sdist", url, "does not match the index's sha256")
            top = f"vllm-{release}/tests/"
            staged = Path(tmp) / f"vllm-{release}"
            with tarfile.open(archive) as tar:
                members = [m for m in tar.getmembers() if m.name.startswith(top) and (m.isfile() or m.isdir())]
                tar.extractall(tmp, members=members, filter="data")
            (staged / STAMP).write_text(url + "\n")
            if root.exists():
                shutil.rmtree(root)
            staged.rename(root)
    except OSError as e:
        raise InfrastructureError("vllm-tests: fetching the sdist", index, f"{type(e).__name__}: {e}") from None
    return root
