"""`certify --vllm-source`: a vLLM contributor's own checkout, held against the pinned semantics.

The checkouts are copies of vLLM 0.33.0's source from the pinned venv
(`vllm_tree.py`), each at its own path, because a driver keeps the `vllm`
it imported and drivers are pooled per source path. They show:

* the CI recipe (parsed from examples/github-workflow.yml, run verbatim in
  the checkout) passes on unchanged vLLM, and the certificate records the
  source's commit and a clean tree;
* the planted starvation bug (a preempted request appended to the waiting
  queue, left uncommitted) fails with a shrunk counterexample, the first
  diverging step, the broken invariant named, a dirty tree recorded, a
  step table and a PNG; and `replay` shows the same;
* with `--allow-divergence` the same change still fails, on the invariant
  alone, while a change that departs but keeps every invariant passes;
* a tree whose scheduler does not even import is one line and exit 2,
  not a failed start and a shrink per workload.

Skipped without the vLLM venv (CI builds it first). About 1-2 minutes.
"""

import json
import re
import shlex
from pathlib import Path

import pytest

from vllm_tree import APPEND_ON_PREEMPT, FREE_HEAD_FIRST, git, make_vllm_checkout, plant

from schedspec.cli import main
from schedspec.conformance.engines.registry import engine_factory, vllm_source_engine
from schedspec.conformance.engines.vllm import vllm_venv_ready

pytestmark = pytest.mark.skipif(
    not vllm_venv_ready(), reason="no vLLM venv: run conformance/vllm_env/setup_vllm_ref.sh"
)

WORKFLOW = Path(__file__).resolve().parents[2] / "examples" / "github-workflow.yml"
# kv-pressure-0-2 preempts behind a waiting request; so does kv-pressure-0-4, since its prompts fit its pool
SMALL = ["--family", "kv-pressure", "--workloads", "4"]


def recipe_certify_argv() -> list[str]:
    (command,) = re.findall(r"^\s*(?:- )?(?:run: )?(schedspec certify .*)$", WORKFLOW.read_text(), re.M)
    return shlex.split(command)[1:]


@pytest.fixture(scope="module")
def trees(tmp_path_factory):
    root = tmp_path_factory.mktemp("vllm-trees")
    clean = make_vllm_checkout(root / "clean")
    planted = make_vllm_checkout(root / "planted", origin=clean)
    plant(planted, APPEND_ON_PREEMPT, commit=False)  # a contributor's uncommitted change: a dirty tree
    benign = make_vllm_checkout(root / "benign", origin=clean)
    plant(benign, FREE_HEAD_FIRST, commit=True)
    broken = make_vllm_checkout(root / "broken", origin=clean)
    plant(
        broken,
        (APPEND_ON_PREEMPT[0], APPEND_ON_PREEMPT[1], "        self.waiting.prepend_request(request\n"),
        commit=False,
    )
    yield {"clean": clean, "planted": planted, "benign": benign, "broken": broken}
    for tree in (clean, planted, benign):  # one idle driver per tree would outlive the module
        engine_factory(vllm_source_engine(str(tree))).close_all()


def certify(tree: Path, out: Path, *extra: str) -> tuple[int, dict]:
    rc = main(["certify", "--engine", "vllm", "--vllm-source", str(tree), *SMALL, *extra, "--out", str(out)])
    return rc, json.loads((out / "certificate.json").read_text())


@pytest.mark.slow_ok("the CI recipe's own command, 300 workloads, on a vLLM source tree")
def test_the_ci_recipe_passes_on_unchanged_vllm(trees, monkeypatch):
    monkeypatch.chdir(trees["clean"])
    assert main(recipe_certify_argv()) == 0
    cert = json.loads((trees["clean"] / "cert" / "certificate.json").read_text())
    head = git(trees["clean"], "rev-parse", "HEAD")
    assert cert["passed"] and cert["workloads_run"] == 300
    assert cert["vllm_source"] == {"path": str(trees["clean"]), "commit": head, "dirty": False}
    assert head[:12] in cert["engine_version"]


@pytest.mark.slow_ok("a planted change in a vLLM tree, caught, shrunk on the tree's driver and replayed")
def test_a_planted_change_is_caught_with_a_shrunk_counterexample(trees, tmp_path, capsys):
    rc, cert = certify(trees["planted"], tmp_path / "cert")
    assert rc == 1 and not cert["passed"] and cert["vllm_source"]["dirty"] is True
    (cx,) = cert["counterexamples"]
    assert cx["workload"] == "kv-pressure-0-2" and cx["field"] == "state.waiting"
    assert cx["shrunk_size"]["requests"] < 5 and cx["shrunk"]["rows"][-1]["diverges"]
    assert [v["violation"].split(": ")[1] for v in cert["invariant_violations"]] == ["no-starvation-after-prepend"]
    data = json.loads(Path(cx["file"]).read_text())  # everything a replay needs
    assert data["engines"]["b"] == vllm_source_engine(str(trees["planted"])).name and "dirty" in data["versions"]["b"]
    assert data["workload"]["config"]["num_gpu_blocks"] > 0 and data["workload"]["requests"]
    assert Path(cx["timeline"]).stat().st_size > 10_000
    md = (tmp_path / "cert" / "certificate.md").read_text()
    assert "| **" in md and "⟵" in md and "no-starvation-after-prepend" in md
    capsys.readouterr()
    assert main(["replay", cx["file"]]) == 1
    shown = capsys.readouterr().out
    assert "diverges at step" in shown and "engine b breaks invariant no-starvation-after-prepend" in shown


@pytest.mark.slow_ok("--allow-divergence on a real vLLM tree: a benign change passes, a broken invariant fails")
def test_allow_divergence_fails_only_on_invariants(trees, tmp_path):
    rc, cert = certify(trees["planted"], tmp_path / "planted", "--allow-divergence")
    assert rc == 1 and cert["departures"] and cert["invariant_violations"]
    rc, cert = certify(trees["benign"], tmp_path / "benign", "--allow-divergence")
    assert rc == 0 and cert["passed"] and not cert["invariant_violations"]
    assert {d["field"].split("[")[0] for d in cert["departures"]} <= {
        "output.scheduled_new_reqs",
        "output.scheduled_cached_reqs",
    }


def test_a_tree_that_does_not_import_is_bad_input(trees, tmp_path, capsys):
    assert (
        main(["certify", "--engine", "vllm", "--vllm-source", str(trees["broken"]), "--out", str(tmp_path / "c")]) == 2
    )
    err = capsys.readouterr().err
    assert err.startswith("schedspec: error: --vllm-source: cannot run vLLM from it") and "SyntaxError" in err
