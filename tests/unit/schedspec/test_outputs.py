"""Nothing a user wrote is lost, nothing stale is left, and a bad `--out` fails before the work, not after.

These go through `certify`, the command that writes the most; `OutDir` is
what every writing command shares, so its rules are pinned once here.
"""

import json
import os
import stat
from pathlib import Path

import pytest

from schedspec.cli import main
from schedspec.outdir import MANIFEST, STAGING, SWAP, OutDir
from schedspec.spec.errors import SpecError
from schedspec.spec.jsonio import write_json_atomic

CHEAP = ["--engine", "reference", "--workloads", "2", "--family", "budget", "--no-plots"]
FAILING = [
    "--engine",
    "schedspec.conformance.demo_engines.planted:extra_token_at_step_3",
    "--workloads",
    "2",
    "--family",
    "budget",
    "--no-plots",
    "--shrink-budget",
    "5",
]


def test_refuses_to_replace_an_earlier_run_without_force(tmp_path):
    out = str(tmp_path / "c")
    assert main(["certify", *CHEAP, "--out", out]) == 0
    assert main(["certify", *CHEAP, "--out", out]) == 2
    assert main(["certify", *CHEAP, "--out", out, "--force"]) == 0


@pytest.mark.parametrize("name", ["certificate.md", "junit.xml", "counterexample-mine.json"])
def test_a_users_own_file_is_never_overwritten_without_force(tmp_path, capsys, name):
    out = tmp_path / "c"
    out.mkdir()
    (out / name).write_text("my notes")
    assert main(["certify", *CHEAP, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert name in err and "--force" in err and "\n" not in err.strip()
    assert (out / name).read_text() == "my notes"


def test_force_clears_the_stale_files_of_an_earlier_failing_run_and_keeps_foreign_ones(tmp_path):
    out = tmp_path / "c"
    assert main(["certify", *FAILING, "--out", str(out)]) == 1
    assert list(out.glob("counterexample-*.json"))
    (out / "notes.txt").write_text("mine")
    assert main(["certify", *CHEAP, "--out", str(out), "--force"]) == 0
    assert not list(out.glob("counterexample-*"))  # a PASSED certificate with no stale counterexample beside it
    assert (out / "notes.txt").read_text() == "mine"
    assert json.loads((out / MANIFEST).read_text())["commands"] == {
        "certify": ["certificate.json", "certificate.md", "junit.xml"]
    }


def test_out_naming_a_file_is_a_one_line_error(tmp_path, capsys):
    f = tmp_path / "file"
    f.write_text("x")
    assert main(["certify", *CHEAP, "--out", str(f)]) == 2
    assert "is a file, not a folder" in capsys.readouterr().err


def test_an_out_that_cannot_be_created_fails_before_the_campaign(tmp_path, capsys):
    f = tmp_path / "file"
    f.write_text("x")
    assert main(["certify", "--engine", "reference", "--workloads", "900", "--out", str(f / "sub")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("schedspec: error: --out") and "cannot be created" in err and "\n" not in err


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes to a read-only folder anyway")
def test_an_unwritable_out_fails_before_the_campaign(tmp_path, capsys):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    assert main(["certify", *CHEAP, "--out", str(ro)]) == 2
    assert "is not writable" in capsys.readouterr().err


def test_an_unwritable_folder_is_refused_by_the_probe(tmp_path, monkeypatch):
    """The same check as above, for root too: the probe file cannot be created."""
    import tempfile

    def deny(*a, **k):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(tempfile, "mkstemp", deny)
    with pytest.raises(SpecError, match="is not writable: Permission denied"):
        OutDir(str(tmp_path / "x"), False).prepare(["a.json"])


def test_outputs_take_the_umask_mode(tmp_path):
    old = os.umask(0o027)
    try:
        from schedspec.spec import jsonio

        jsonio.process_umask.cache_clear()
        write_json_atomic(tmp_path / "a.json", {"x": 1})
        assert stat.S_IMODE((tmp_path / "a.json").stat().st_mode) == 0o640
    finally:
        os.umask(old)
        jsonio.process_umask.cache_clear()
    write_json_atomic(tmp_path / "b.json", {"x": 1})
    assert stat.S_IMODE((tmp_path / "b.json").stat().st_mode) == 0o666 & ~old


def test_a_manifest_never_makes_force_delete_outside_the_folder(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    out = tmp_path / "c"
    out.mkdir()
    (out / MANIFEST).write_text(json.dumps({"command": "certify", "files": ["../victim.txt", str(victim)]}))
    OutDir(str(out), True).prepare(["certificate.json"])
    assert victim.read_text() == "keep"


def finished_run(out, names=("certificate.json", "counterexample-a.json")):
    od = OutDir(str(out), False, command="certify")
    od.prepare(["certificate.json"], ["counterexample-*.json"])
    for n in names:
        Path(od.file(n)).write_text(f"earlier {n}")
    od.record([od.file(n) for n in names])
    return folder(out)


def folder(out):
    """Every file and folder in `out`, a folder as None."""
    return {p.name: p.read_bytes() if p.is_file() else None for p in out.iterdir()}


def test_an_abandoned_force_run_leaves_the_earlier_run_as_it_was(tmp_path):
    """^C during `--force`: the new run's files never reached the folder; the earlier run's are as they were."""
    out = tmp_path / "c"
    before = finished_run(out)
    od = OutDir(str(out), True, command="certify")
    od.prepare(["certificate.json"], ["counterexample-*.json"])
    Path(od.file("counterexample-a.json")).write_text("new, same name")
    Path(od.file("counterexample-b.json")).write_text("new")
    assert {n: v for n, v in folder(out).items() if not n.startswith(STAGING)} == before  # untouched while it runs
    od.abandon()
    assert folder(out) == before


def test_a_finished_force_run_replaces_its_command_s_earlier_files(tmp_path):
    out = tmp_path / "c"
    finished_run(out)
    od = OutDir(str(out), True, command="certify")
    od.prepare(["certificate.json"], ["counterexample-*.json"])
    Path(od.file("certificate.json")).write_text("new")
    od.record([od.file("certificate.json")])
    assert sorted(p.name for p in out.iterdir()) == [MANIFEST, "certificate.json"]
    assert json.loads((out / MANIFEST).read_text()) == {"commands": {"certify": ["certificate.json"]}}


def test_a_run_killed_outright_is_undone_by_the_next_one(tmp_path):
    """SIGKILL leaves a staging folder: the next run deletes it if the run never committed, finishes its swap if it
    did, and refuses to touch one a live run is writing."""
    out = tmp_path / "c"
    before = finished_run(out)
    OutDir(str(out), True, command="certify").prepare(["certificate.json"], ["counterexample-*.json"])  # then killed
    with pytest.raises(SpecError, match="earlier certify run"):
        OutDir(str(out), False, command="certify").prepare(["certificate.json"], ["counterexample-*.json"])
    assert folder(out) == before
    dead = out / f"{STAGING}999999999"  # committed (its journal written), killed before the swap
    dead.mkdir()
    (dead / "certificate.json").write_text("new")
    (dead / SWAP).write_text(
        json.dumps({"command": "certify", "move": ["certificate.json"], "remove": ["counterexample-a.json"]})
    )
    with pytest.raises(SpecError, match="earlier certify run"):
        OutDir(str(out), False, command="certify").prepare(["certificate.json"], ["counterexample-*.json"])
    assert sorted(folder(out)) == [MANIFEST, "certificate.json"] and (out / "certificate.json").read_text() == "new"
    (out / f"{STAGING}{os.getppid()}").mkdir()  # a live process's run
    with pytest.raises(SpecError, match="being written by another schedspec run"):
        OutDir(str(out), True, command="certify").prepare(["certificate.json"])


def test_force_from_one_command_never_clears_another_s_files(tmp_path, capsys):
    """`prove --force` or `hunt --force` into a certificate's folder once deleted the certificate, and without
    --force the refusal named the wrong command. Each command owns its files."""
    out = tmp_path / "shared"
    assert main(["certify", *CHEAP, "--out", str(out)]) == 0
    cert = {n: (out / n).read_bytes() for n in ("certificate.json", "certificate.md", "junit.xml")}
    assert main(["hunt", "--engine", "reference", "--examples", "3", "--out", str(out), "--force"]) == 0
    assert {n: (out / n).read_bytes() for n in cert} == cert  # certify's files, untouched
    assert set(json.loads((out / MANIFEST).read_text())["commands"]) == {"certify", "hunt"}
    assert main(["hunt", "--engine", "reference", "--examples", "3", "--out", str(out)]) == 2
    assert "an earlier hunt run" in capsys.readouterr().err  # its own earlier files: named as hunt's
    assert main(["certify", *CHEAP, "--out", str(out), "--force"]) == 0
    assert (out / "hunt.json").exists() and {n: (out / n).exists() for n in cert} == dict.fromkeys(cert, True)
