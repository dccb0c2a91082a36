"""`lifeline.die_with_parent`: a child of ours outlives no parent, and the vLLM driver's twin is the same code."""

import ast
import inspect
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from schedspec.conformance.engines import lifeline

DRIVER = Path(lifeline.__file__).parents[1] / "vllm_env" / "driver.py"


def test_the_drivers_twin_is_the_same_code():
    """The driver runs in vLLM's venv and cannot import schedspec, so it carries a copy; the copy must not drift."""
    tree = ast.parse(DRIVER.read_text())
    twin = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "die_with_parent")
    ours = ast.parse(textwrap.dedent(inspect.getsource(lifeline.die_with_parent))).body[0]
    assert ast.dump(twin) == ast.dump(ours)
    assert "die_with_parent()" in DRIVER.read_text().split("def die_with_parent")[1]  # and it is called


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
@pytest.mark.parametrize("protected", [True, False])
def test_a_grandchild_dies_with_its_killed_parent(protected):
    """parent -> child (sleeps) ; SIGKILL the parent ; the child is gone only when it asked for the lifeline."""
    child = "import time; from schedspec.conformance.engines.lifeline import die_with_parent; "
    child += ("die_with_parent(); " if protected else "") + "print('up', flush=True); time.sleep(60)"
    parent = (
        "import subprocess, sys, time; "
        f"p = subprocess.Popen([sys.executable, '-c', {child!r}], stdout=subprocess.PIPE, text=True); "
        "p.stdout.readline(); print(p.pid, flush=True); time.sleep(60)"
    )
    proc = subprocess.Popen([sys.executable, "-c", parent], stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        grandchild = int(proc.stdout.readline())  # type: ignore[union-attr]
        proc.kill()
        proc.wait()
        for _ in range(100 if protected else 10):  # the kernel's SIGKILL lands a moment after the parent is gone
            if not alive(grandchild):
                break
            time.sleep(0.05)
        assert alive(grandchild) is not protected
    finally:
        os.killpg(proc.pid, signal.SIGKILL)


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
