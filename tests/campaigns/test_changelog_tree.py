"""`schedspec changelog A --engine-b vllm-source:PATH`: what a contributor's branch changes against its release.

The branch is a copy of vLLM 0.33.0's source (`vllm_tree.py`). With the
head-first free planted (committed), block ids differ from the release's, no
variant rule explains it, and the changelog must say so: one cluster, the
tree's commit recorded, the reference at 0.33.0 agreeing with the release
and not with the tree. An unchanged tree must come out with no difference at
all, so the difference above is the branch's and not the harness's.

Skipped without the vLLM venv. About a minute.
"""

import json

import pytest

from vllm_tree import FREE_HEAD_FIRST, git, make_vllm_checkout, plant

from schedspec.cli import main
from schedspec.conformance.engines.registry import engine_factory, vllm_source_engine
from schedspec.conformance.engines.vllm import vllm_venv_ready

pytestmark = pytest.mark.skipif(
    not vllm_venv_ready(), reason="no vLLM venv: run conformance/vllm_env/setup_vllm_ref.sh"
)


@pytest.fixture(scope="module")
def trees(tmp_path_factory):
    root = tmp_path_factory.mktemp("changelog-trees")
    clean = make_vllm_checkout(root / "clean")
    branch = make_vllm_checkout(root / "branch", origin=clean)
    plant(branch, FREE_HEAD_FIRST, commit=True)
    yield {"clean": clean, "branch": branch}
    for tree in (clean, branch):
        engine_factory(vllm_source_engine(str(tree))).close_all()


def changelog(tree, out, workloads: int, *options: str) -> tuple[int, dict, str]:
    argv = ["changelog", "0.33.0", "--engine-b", f"vllm-source:{tree}", "--family", "kv-pressure"]
    # One shrink is all a one-cluster changelog reads; each further one replays on the tree's measured drivers.
    rc = main([*argv, "--workloads", str(workloads), "--out", str(out), "--max-counterexamples", "1", *options])
    return rc, json.loads((out / "changelog.json").read_text()), (out / "changelog.md").read_text()


@pytest.mark.slow_ok("the changelog of a source tree, with its hunks measured: one run of the whole command")
def test_a_branch_s_change_is_reported_as_the_tree_s_own(trees, tmp_path):
    rc, report, md = changelog(trees["branch"], tmp_path / "cl", 1, "--seed", "4")  # kv-pressure-4-0 diverges
    assert rc == 1
    assert report["engine_b"] == vllm_source_engine(str(trees["branch"])).name and report["release_b"] == "0.33.0"
    assert report["tree_b"]["commit"] == git(trees["branch"], "rev-parse", "HEAD") and not report["tree_b"]["dirty"]
    assert report["candidates"] == []
    (c,) = report["clusters"]
    assert c["cause"] == "not modelled" and c["reference_agrees"] == {"a": True, "b": False}
    assert c["field"].startswith("output.scheduled_") and c["size"]["requests"] <= 2
    assert (tmp_path / "cl" / c["counterexample"]).is_file()
    assert "Changed by the tree" in md and "block_ids" in md
    # The tree's one changed hunk (the planted free order) is measured, and the campaign ran it.
    assert report["source_hunks"]["hunks"] >= 1 and report["source_hunks"]["reached"] >= 1


@pytest.mark.slow_ok("the control of the test above: an unchanged tree, on drivers of its own, changes nothing")
def test_an_unchanged_tree_changes_nothing(trees, tmp_path):
    rc, report, md = changelog(trees["clean"], tmp_path / "cl", 4, "--no-hunks")  # hunks: the test above
    assert rc == 0 and report["diverged"] == 0 and report["clusters"] == []
    assert "No difference found" in md


def test_b_and_engine_b_together_are_bad_input(trees, tmp_path, capsys):
    argv = ["changelog", "0.32.0", "0.33.0", "--engine-b", f"vllm-source:{trees['clean']}"]
    assert main([*argv, "--out", str(tmp_path / "x")]) == 2
    assert capsys.readouterr().err.startswith("schedspec: error: B: give either B or --engine-b, not both")
    assert not (tmp_path / "x").exists()
