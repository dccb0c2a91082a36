"""`schedspec merge`: the shards of one campaign merge into the unsharded certificate, and nothing else merges.

The equality is the promise CI relies on: a matrix of `--shard i/n` jobs
and a merge job give the certificate one machine would have written,
apart from its times (and `merged_from`, which says it is a merge).
"""

from __future__ import annotations

import json
import shutil
from functools import cache
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from schedspec.cli import main

P = "schedspec.conformance.demo_engines.planted:"
TIMES = {"elapsed_s", "steps_per_second", "time_shares", "created", "merged_from"}


def certify(out: Path, engine: str, workloads: int, *extra: str) -> int:
    argv = ["certify", "--engine", engine, "--workloads", str(workloads), "--out", str(out), "--no-plots", *extra]
    # Each shard shrinks up to --max-counterexamples of its own: above the campaign's count, as one run would.
    return main([*argv, "--step-timeout", "5", "--max-errors", "99", "--max-counterexamples", "99"])


def comparable(folder: Path) -> tuple[dict, list[tuple[str, tuple[str, ...]]]]:
    cert = json.loads((folder / "certificate.json").read_text())
    cert = {k: v for k, v in cert.items() if k not in TIMES}
    for cx in cert["counterexamples"]:
        assert Path(cx["file"]).parent == folder  # the merged certificate names its own copies
        cx["file"] = Path(cx["file"]).name
        assert (folder / cx["file"]).is_file()
    suite = ET.parse(folder / "junit.xml").getroot()
    cases = [(c.get("name"), tuple(f"{e.tag}:{e.get('message')}:{Path(e.text or '').name}" for e in c)) for c in suite]
    counts = {k: suite.get(k) for k in ("tests", "failures", "errors", "skipped")}
    return {**cert, "junit_counts": counts}, cases


@cache
def campaign(root: Path, engine: str, workloads: int, parts: int) -> tuple[Path, list[Path], int]:
    whole = root / "whole"
    rc = certify(whole, engine, workloads)
    shards = [root / f"shard-{i}" for i in range(parts)]
    for i, folder in enumerate(shards):
        certify(folder, engine, workloads, "--shard", f"{i}/{parts}")
    return whole, shards, rc


@pytest.mark.parametrize(
    "engine,workloads,parts",
    [
        (P + "extra_token_at_step_3", 12, 4),  # counterexamples in several shards
        ("schedspec.conformance.demo_engines.misbehaving:exits_at_step_2", 5, 4),  # errors: exit 3
        ("reference", 2, 4),  # two shards hold no workload
    ],
    ids=["diverging", "erroring", "empty-shards"],
)
def test_four_shards_merge_into_the_unsharded_certificate(tmp_path, engine, workloads, parts):
    whole, shards, rc = campaign(tmp_path, engine, workloads, parts)
    merged = tmp_path / "merged"
    assert main(["merge", *map(str, reversed(shards)), "--out", str(merged)]) == rc  # in any order
    assert comparable(merged) == comparable(whole)
    assert json.loads((merged / "certificate.json").read_text())["merged_from"] == [f"{i}/4" for i in (3, 2, 1, 0)]


# What a wrong merge looks like: a field of one shard's campaign changed, a shard twice, one missing.
MUTATIONS = {
    "engine": lambda c: c.update(engine="reference"),
    "against": lambda c: c.update(against="torch"),
    "engine_version": lambda c: c.update(engine_version="vllm 0.30.0"),
    "level": lambda c: c.update(level="tokens"),
    "allow_divergence": lambda c: c.update(allow_divergence=True),
    "seed": lambda c: c["campaign"].update(seed=7),
    "workloads": lambda c: c["campaign"].update(workloads=13),
    "families_requested": lambda c: c["campaign"].update(families_requested=["budget"]),
    "split": lambda c: c["campaign"].update(shard="1/3"),
    # cut or edited by hand: what the merge reads, missing (once a KeyError traceback)
    "coverage_map": lambda c: c.pop("coverage_map"),
    "seed missing": lambda c: c["campaign"].pop("seed"),
}


@settings(max_examples=40, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    how=st.sampled_from([*MUTATIONS, "twice", "missing"]),
    victim=st.integers(0, 3),
    order=st.permutations(range(4)),
)
def test_shards_of_different_campaigns_are_refused_in_one_line(tmp_path_factory, capsys, how, victim, order):
    root = tmp_path_factory.getbasetemp() / "merge-refusals"
    if not root.exists():
        root.mkdir()
        campaign(root, P + "extra_token_at_step_3", 12, 4)
    work = tmp_path_factory.mktemp("m")
    shards = []
    for i in range(4):
        shutil.copytree(root / f"shard-{i}", work / f"shard-{i}")
        shards.append(work / f"shard-{i}")
    if how in MUTATIONS:
        path = shards[victim] / "certificate.json"
        cert = json.loads(path.read_text())
        MUTATIONS[how](cert)
        path.write_text(json.dumps(cert))
    given_shards = [shards[i] for i in order]
    if how == "twice":
        given_shards[victim] = given_shards[(victim + 1) % 4]
    if how == "missing":
        del given_shards[victim]
    capsys.readouterr()
    assert main(["merge", *map(str, given_shards), "--out", str(work / "merged")]) == 2
    err = capsys.readouterr().err.strip()
    cut = how in ("coverage_map", "seed missing")  # named by the shard's file, as any unreadable input is
    assert len(err.splitlines()) == 1 and err.startswith("schedspec: error: " + ("" if cut else "merge: "))
    assert not (work / "merged" / "certificate.json").exists()
    if how in MUTATIONS and how != "split":
        assert how.split()[0] in err, err


def test_the_matrix_recipe_of_docs_ci_md_runs(tmp_path, monkeypatch):
    """docs/ci.md's matrix commands, with the reference standing in for the checkout and 8 workloads for 1200."""
    doc = (Path(__file__).resolve().parents[4] / "docs" / "ci.md").read_text()
    (certify_line,) = [
        ln.split("run: ", 1)[1] for ln in doc.splitlines() if "run: schedspec certify" in ln and "--shard" in ln
    ]
    (merge_line,) = [ln.split("run: ", 1)[1] for ln in doc.splitlines() if "run: schedspec merge" in ln]
    monkeypatch.chdir(tmp_path)
    for shard in range(4):
        argv = certify_line.replace("${{ matrix.shard }}", str(shard)).split()[1:]
        argv[argv.index("--engine") + 1 : argv.index("--vllm-source") + 2] = ["reference"]
        argv[argv.index("--workloads") + 1] = "8"
        assert main([*argv, "--no-plots"]) == 0
    assert main(merge_line.split()[1:]) == 0
    cert = json.loads((tmp_path / "cert" / "certificate.json").read_text())
    assert cert["passed"] and cert["workloads_run"] == 8 and cert["merged_from"] == ["0/4", "1/4", "2/4", "3/4"]
