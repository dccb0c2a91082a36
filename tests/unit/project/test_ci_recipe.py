"""The CI recipe of docs/ci.md is the one that runs here, and its exit codes mean what the doc says.

The workflow lives once, in `examples/github-workflow.yml`; docs/ci.md must
quote it verbatim, and the certify command is parsed out of it, never
retyped, so the doc, the file and this test cannot drift apart. Here the
command runs against in-process engines (fast, no vLLM venv):

* 0: the engine matches the oracle (the reference stands in for the checkout);
* 1: an engine that diverges (a planted extra token);
* 2: bad input (a `--vllm-source` that is no vLLM tree; `--vllm-source` without `--engine vllm`).

The same command against a real vLLM tree, with and without a planted
change, is `tests/campaigns/test_vllm_source.py`.

The workflow file itself is checked too: against the GitHub Actions schema
(the one check-jsonschema ships), for a cache that a failing certify still
leaves saved, and each `run` block as bash runs it, with GitHub's output and
environment files; only the install step, which needs PyPI, is read instead.
"""

import json
import os
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from schedspec.cli import main

ROOT = Path(__file__).resolve().parents[3]
WORKFLOW = ROOT / "examples" / "github-workflow.yml"


def recipe_certify_argv() -> list[str]:
    """The argv of the workflow's `schedspec certify` step, without the leading `schedspec`."""
    commands = [
        m.group(1) for m in re.finditer(r"^\s*(?:- )?(?:run: )?(schedspec certify .*)$", WORKFLOW.read_text(), re.M)
    ]
    assert len(commands) == 1, commands
    return shlex.split(commands[0])[1:]


def swap(argv: list[str], option: str, value: str | None) -> list[str]:
    """argv with `option`'s value replaced (or the option dropped, with value None)."""
    i = argv.index(option)
    return argv[:i] + ([option, value] if value is not None else []) + argv[i + 2 :]


def test_docs_quote_the_workflow_verbatim():
    doc = (ROOT / "docs" / "ci.md").read_text()
    blocks = re.findall(r"```yaml\n(.*?)```", doc, re.S)
    assert WORKFLOW.read_text() in blocks


def test_recipe_command_is_the_five_line_job():
    argv = recipe_certify_argv()
    assert argv[:5] == ["certify", "--engine", "vllm", "--vllm-source", "."]
    assert argv[argv.index("--out") + 1] == "cert"


def test_a_git_install_ships_every_package():
    """The recipe installs schedspec with pip, not editable: a package left out of pyproject would be missing.
    Every folder holding Python files is one (`conformance/vllm_env`, which the vLLM venvs run, has no
    `__init__.py` and must ship all the same)."""
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    dirs = {v: k for k, v in tool["package-dir"].items()}
    found = {
        dirs[py.parent.relative_to(ROOT).parts[0]] + "".join("." + p for p in py.parent.relative_to(ROOT).parts[1:])
        for top in dirs
        for py in (ROOT / top).rglob("*.py")
        if "__pycache__" not in py.parts
    }
    assert found == set(tool["packages"])


def test_recipe_exit_codes(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    argv = recipe_certify_argv()
    on_reference = swap(swap(argv, "--vllm-source", None), "--engine", "reference")
    assert main(on_reference) == 0
    cert = json.loads((tmp_path / "cert" / "certificate.json").read_text())
    assert cert["passed"] and cert["workloads_run"] == int(argv[argv.index("--workloads") + 1])

    diverging = swap(
        swap(
            swap(on_reference, "--engine", "schedspec.conformance.demo_engines.planted:extra_token_at_step_3"),
            "--out",
            "cert-diverging",
        ),
        "--workloads",
        "3",
    )
    assert main(diverging + ["--family", "budget"]) == 1
    assert (tmp_path / "cert-diverging" / "junit.xml").is_file()
    assert list((tmp_path / "cert-diverging").glob("counterexample-*.png"))

    capsys.readouterr()
    assert main(swap(argv, "--vllm-source", str(tmp_path / "no-such-checkout"))) == 2
    assert "--vllm-source" in capsys.readouterr().err
    assert main(swap(on_reference, "--out", "cert-bad") + ["--vllm-source", "."]) == 2
    assert "needs --engine vllm" in capsys.readouterr().err


def test_allow_divergence_lists_departures_and_still_fails_on_invariants(tmp_path):
    out = tmp_path / "cert"
    # The planted extra token both diverges and, in budget-0-2, overruns the token budget.
    rc = main(
        [
            "certify",
            "--engine",
            "schedspec.conformance.demo_engines.planted:extra_token_at_step_3",
            "--workloads",
            "3",
            "--family",
            "budget",
            "--allow-divergence",
            "--out",
            str(out),
        ]
    )
    cert = json.loads((out / "certificate.json").read_text())
    assert rc == 1 and cert["allow_divergence"] and len(cert["departures"]) == 3
    assert [v["workload"] for v in cert["invariant_violations"]] == ["budget-0-2"]
    junit = (out / "junit.xml").read_text()
    assert junit.count("<failure") == 1 and "departs at step 3" in junit
    md = (out / "certificate.md").read_text()
    assert "## Departures from the oracle (allowed)" in md and "| **3** ⟵ |" in md


def test_ci_runs_the_readme_test_command_verbatim():
    """`.ci/run` is the README's test command, so what CI gates on is what a user is told to run."""
    readme_blocks = re.findall(r"```\n(.*?)\n```", (ROOT / "README.md").read_text(), re.S)
    test_command = next(b for b in readme_blocks if "pytest" in b and b.startswith("scripts/ensure-venv"))
    ci = [
        ln for ln in (ROOT / ".ci" / "run").read_text().splitlines() if ln and not ln.startswith(("#", "set ", "cd "))
    ]
    assert ci == [test_command]


# ---- the workflow file itself: valid, cached even when certify fails, every run line exercised ---------------

CHECK_JSONSCHEMA = Path(sys.executable).with_name("check-jsonschema")


def _steps() -> list[dict]:
    return YAML(typ="safe").load(WORKFLOW.read_text())["jobs"]["certify"]["steps"]


def _step(name_start: str) -> dict:
    (step,) = [s for s in _steps() if s.get("name", "").startswith(name_start)]
    return step


def _validate(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(CHECK_JSONSCHEMA), "--builtin-schema", "vendor.github-workflows", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_workflow_is_valid_against_the_github_actions_schema(tmp_path):
    done = _validate(WORKFLOW)
    assert done.returncode == 0, done.stdout + done.stderr
    broken = tmp_path / "broken.yml"  # the schema catches a slip: a key GitHub does not know
    broken.write_text(WORKFLOW.read_text().replace("    runs-on:", "    runs_on:"))
    assert _validate(broken).returncode == 1


def test_the_vllm_venv_is_saved_before_certify_so_a_red_run_keeps_it():
    steps = _steps()
    uses = [s.get("uses", "").split("@")[0] for s in steps]
    assert "actions/cache" not in uses  # saves only at the end of a green job
    restore, save = uses.index("actions/cache/restore"), uses.index("actions/cache/save")
    build = steps.index(_step("Build the vLLM venv"))
    certify = steps.index(_step("Certify"))
    assert restore < build < save < certify
    assert steps[save]["if"] == f"steps.{steps[restore]['id']}.outputs.cache-hit != 'true'"
    assert steps[save]["with"]["key"] == f"${{{{ steps.{steps[restore]['id']}.outputs.cache-primary-key }}}}"
    assert steps[save]["with"]["path"] == steps[restore]["with"]["path"]


def _run_step(step: dict, tmp_path: Path, **env: str) -> dict[str, str]:
    """Run a step's `run` block as GitHub would (bash, its files for outputs and env); return what it set."""
    files = {name: tmp_path / name.lower() for name in ("GITHUB_OUTPUT", "GITHUB_ENV", "GITHUB_STEP_SUMMARY")}
    for f in files.values():
        f.touch()
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"  # `python` is the project's
    done = subprocess.run(
        ["bash", "-e", "-c", step["run"]],
        cwd=tmp_path,
        env={**os.environ, "PATH": path, "HOME": str(tmp_path), **{k: str(v) for k, v in files.items()}, **env},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    return {name: f.read_text() for name, f in files.items()}


def test_the_locate_step_finds_the_recipe_and_keys_the_cache_on_it(tmp_path):
    got = _run_step(_step("Locate"), tmp_path)
    out = dict(line.split("=", 1) for line in got["GITHUB_OUTPUT"].splitlines())
    assert (Path(out["dir"]) / "setup_vllm_ref.sh").is_file()
    assert re.fullmatch(r"[0-9a-f]{16}", out["key"])
    assert got["GITHUB_ENV"].strip() == f"VLLM_REF_VENV={tmp_path}/.cache/schedspec/venv-vllm-ref"


def test_the_build_step_is_a_no_op_on_a_restored_venv(tmp_path):
    from schedspec.conformance.engines.vllm_venvs import vllm_venv_path, vllm_venv_ready

    venv = vllm_venv_path()
    if not vllm_venv_ready(venv):
        pytest.skip("the vLLM venv is not built here (conformance/vllm_env/setup_vllm_ref.sh builds it)")
    located = dict(line.split("=", 1) for line in _run_step(_step("Locate"), tmp_path)["GITHUB_OUTPUT"].splitlines())
    step = _step("Build the vLLM venv")
    run = step["run"].replace("${{ steps.env.outputs.dir }}", located["dir"])
    _run_step({"run": run}, tmp_path, VLLM_REF_VENV=str(venv))  # a restored cache: the stamp is there


@pytest.mark.parametrize("certified", [True, False])
def test_the_summary_step_shows_the_certificate_and_never_fails(tmp_path, certified):
    if certified:
        (tmp_path / "cert").mkdir()
        (tmp_path / "cert" / "certificate.md").write_text("# schedspec certificate: PASSED\n")
    got = _run_step(_step("Show the certificate"), tmp_path)
    assert got["GITHUB_STEP_SUMMARY"] == ("# schedspec certificate: PASSED\n" if certified else "")


def test_the_install_step_puts_cpu_torch_first():
    """Not run here (it needs PyPI and PyTorch's index): a bare `torch` would pull a CUDA build."""
    lines = _step("Install schedspec")["run"].splitlines()
    assert lines == [
        "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu",
        'pip install "$SCHEDSPEC"',
    ]


# ---- the nightly tier's workflow: valid, scheduled, and running exactly the slow tier that tests/README.md documents

NIGHTLY = ROOT / "examples" / "github-workflow-nightly.yml"


def nightly_command() -> str:
    (step,) = [s for s in YAML(typ="safe").load(NIGHTLY.read_text())["jobs"]["slow-tier"]["steps"] if "run" in s]
    return step["run"].strip()


def test_the_nightly_workflow_is_valid_and_scheduled():
    done = _validate(NIGHTLY)
    assert done.returncode == 0, done.stdout + done.stderr
    on = YAML(typ="safe").load(NIGHTLY.read_text())["on"]
    assert on["schedule"][0]["cron"] and "workflow_dispatch" in on


def test_the_nightly_command_is_the_documented_one_and_runs_the_slow_tier():
    """The slow tier is every test marked slow: all of tests/slow, and the cases the quality tests moved there."""
    command = nightly_command()
    readme_blocks = re.findall(r"```\n(.*?)\n```", (ROOT / "tests" / "README.md").read_text(), re.S)
    assert command in readme_blocks
    *setup, pytest_part = command.split(" && ")
    ci = (ROOT / ".ci" / "run").read_text()
    assert all(s in ci for s in setup)  # the same venvs as CI builds
    argv = shlex.split(pytest_part)
    assert argv[:3] == [".venv/bin/python", "-m", "pytest"] and argv[argv.index("-m", 3) + 1] == "slow"
    options = argv[3:]
    assert "-k" not in options and not [a for a in options if a.startswith("tests")]  # nothing narrows it
    collect = [a for a in options if not a.startswith("--junitxml") and a != "-q"]
    n = collect.index("-n")
    collect[n : n + 2] = []
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", *collect], cwd=ROOT, capture_output=True, text=True
    )
    files = {ln.split("::")[0] for ln in done.stdout.splitlines() if "::" in ln}
    assert done.returncode == 0, done.stdout[-2000:]
    slow_files = {str(p.relative_to(ROOT)) for p in (ROOT / "tests" / "slow").glob("test_*.py")}
    assert slow_files <= files, sorted(slow_files - files)


def test_the_repository_tracks_no_venv():
    """A venv (or a link to one) in git would land in every clone, where `.ci/run` must build its own."""
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert not [p for p in tracked.splitlines() if p.split("/")[0].startswith(".venv")]
