"""schedspec as a user installs it: `python -m build` makes an sdist and, from it, a wheel, cleanly, and the wheel
installed (not editable) into a fresh venv works from a folder outside the checkout.

The fresh venv gets the wheel alone; its dependencies (torch, hypothesis, z3, ...) come from this project's venv
through a path file, since nothing can be downloaded here. A path file adds a folder to `sys.path` without
running the folder's own path files, so the project's editable install stays inert and `import schedspec`
finds the wheel's copy: the test checks that it does. Installed so, the vLLM venvs must go to the user's cache,
not into `site-packages`.
"""

from __future__ import annotations

import json
import os
import re
import site
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def _run(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, (
        f"{' '.join(map(str, argv))}: exit {done.returncode}\n{done.stdout[-1500:]}\n{done.stderr[-1500:]}"
    )
    return done


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    tmp = tmp_path_factory.mktemp("wheel")
    dist = tmp / "dist"
    built = _run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(ROOT)], tmp)
    assert "WARNING" not in built.stdout + built.stderr, "the build warned"
    (wheel,) = dist.glob("schedspec-*.whl")
    assert len(list(dist.glob("schedspec-*.tar.gz"))) == 1
    venv = tmp / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp)
    python = venv / "bin" / "python"
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", str(wheel)], tmp)
    (purelib,) = (venv / "lib").glob("python3*/site-packages")
    (purelib / "dependencies.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp / "cache"), "HOME": str(tmp / "home")}
    for name in ("VLLM_REF_VENV", "SCHEDSPEC_VENVS_DIR", "PYTHONPATH"):
        env.pop(name, None)
    return venv, env


def test_the_wheel_is_what_runs(installed, tmp_path: Path) -> None:
    venv, env = installed
    probe = (
        "import json, schedspec; from schedspec.conformance.engines.vllm_venvs import vllm_venv_path, SETUP_SCRIPT; "
        "print(json.dumps([schedspec.__file__, str(vllm_venv_path()), SETUP_SCRIPT.is_file()]))"
    )
    where, venv_path, has_setup = json.loads(_run([str(venv / "bin" / "python"), "-c", probe], tmp_path, env).stdout)
    assert Path(where).is_relative_to(venv) and not Path(where).is_relative_to(ROOT)
    assert venv_path == str(Path(env["XDG_CACHE_HOME"]) / "schedspec" / ".venv-vllm-ref")
    assert has_setup  # the vLLM venv's recipe ships inside the package


def test_the_installed_command_runs_outside_the_checkout(installed, tmp_path: Path) -> None:
    venv, env = installed
    schedspec = str(venv / "bin" / "schedspec")
    assert _run([schedspec, "--version"], tmp_path, env).stdout.strip() == "schedspec 0.1.0"
    _run([schedspec, "simulate", "seed-preemption", "--out", "trace.json"], tmp_path, env)
    checked = _run([schedspec, "check", "trace.json"], tmp_path, env).stdout  # exit 0: every invariant holds
    assert re.search(r"\d+ invariants", checked)
    certify = [schedspec, "certify", "--engine", "torch", "--workloads", "6", "--out", "cert", "--no-plots"]
    _run(certify, tmp_path, env)
    assert json.loads((tmp_path / "cert" / "certificate.json").read_text())["verdict"] == "passed"
