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
"""

import json
import re
import shlex
import tomllib
from pathlib import Path

from schedspec.cli import main

ROOT = Path(__file__).resolve().parents[2]
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
    """The recipe installs schedspec with pip, not editable: a package left out of pyproject would be missing."""
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    dirs = {v: k for k, v in tool["package-dir"].items()}
    found = {
        dirs[init.parent.relative_to(ROOT).parts[0]] + "".join("." + p for p in init.parent.relative_to(ROOT).parts[1:])
        for top in dirs
        for init in (ROOT / top).rglob("__init__.py")
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
            swap(on_reference, "--engine", "schedspec.conformance.planted:extra_token_at_step_3"),
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
            "schedspec.conformance.planted:extra_token_at_step_3",
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
