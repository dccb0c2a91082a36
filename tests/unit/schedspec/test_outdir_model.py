"""Output folders against a model: whatever commands run into one folder, in whatever order, with or without
`--force`, finished or interrupted, each command's files are its own.

Property-style: Hypothesis draws a sequence of runs into one folder that
also holds a user's files. Each run is a command, the names it writes,
`--force` or not, and whether it finishes or is interrupted. A model says
who owns each name; after every run the folder must hold exactly the
model's files, with their writers' contents, and no staging folder.
`prove --force` or `hunt --force` into a certificate's folder once deleted
the certificate: here any command's `--force` is tried against any other's.
"""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import HealthCheck, given, settings, strategies as st

from schedspec.outdir import MANIFEST, STAGING, OutDir
from schedspec.spec.errors import SpecError

COMMANDS = ("certify", "hunt", "prove")
NAMES = ("certificate.json", "hunt.json", "proof-1.json", "counterexample-a.json", "notes.md")
USER = {"notes.md": b"the user's own notes", "data.csv": b"1,2,3"}

runs = st.lists(
    st.tuples(
        st.sampled_from(COMMANDS),
        st.sets(st.sampled_from(NAMES), min_size=1, max_size=3),
        st.booleans(),  # --force
        st.booleans(),  # interrupted before it is recorded
    ),
    min_size=1,
    max_size=8,
)


@settings(
    max_examples=300, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(runs=runs)
def test_each_command_s_files_are_its_own(tmp_path_factory, runs):
    out = tmp_path_factory.mktemp("out")
    for name, data in USER.items():
        (out / name).write_bytes(data)
    owner: dict[str, str] = dict.fromkeys(USER, "user")
    content = dict(USER)
    for k, (command, names, force, interrupted) in enumerate(runs):
        mine = {n for n, o in owner.items() if o == command}
        clash = {n for n in names if n in owner and owner[n] != command}
        refused = not force and bool(mine or clash)
        od = OutDir(str(out), force, command=command)
        try:
            od.prepare(sorted(names))
        except SpecError as e:
            assert refused, e
            words = str(e)
            assert (f"earlier {command} run" in words) if mine else ("pass --force" in words)
        else:
            assert not refused
            for n in sorted(names):
                Path(od.file(n)).write_bytes(f"{command} run {k}: {n}".encode())
            if interrupted:
                od.abandon()  # with an earlier run of this command, that run stays exactly as it was
            else:
                od.record([od.file(n) for n in names])
                for n in mine - names:
                    del owner[n], content[n]
            if not interrupted or not mine:  # recorded, or kept: an interrupted first run's findings stay
                for n in names:
                    owner[n], content[n] = command, f"{command} run {k}: {n}".encode()
        check(out, owner, content, runs[: k + 1])


def check(out: Path, owner: dict[str, str], content: dict[str, bytes], runs: list) -> None:
    files = {p.name: p.read_bytes() for p in out.iterdir() if p.name != MANIFEST}
    assert not [n for n in files if n.startswith(STAGING)]
    assert files == content, (runs, sorted(files), sorted(content))
    manifest = json.loads((out / MANIFEST).read_text())["commands"] if (out / MANIFEST).exists() else {}
    assert {n: c for c, ns in manifest.items() for n in ns} == {n: o for n, o in owner.items() if o != "user"}
