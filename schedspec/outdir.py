"""Output folders and files: nothing a user wrote is lost, nothing stale is left, nothing fails late.

Every command that writes (certify, mutants, prove, contracts, simulate,
replay) goes through here, for four promises:

* **Checked before the work starts.** A folder that cannot be created or
  written, or an `--out` that names a file, is a one-line error before an
  hour of campaign runs, never a `PermissionError` traceback after it.
* **Nothing foreign is overwritten without `--force`.** A run records what
  it wrote in a manifest (`.schedspec-manifest.json`) in the folder. Any
  file the next run would write is a conflict unless `--force` is given:
  ours from an earlier run (replacing a certificate is a decision) or the
  user's own `certificate.md` (which no manifest lists).
* **Each command owns its files.** The manifest lists the files by the
  command that wrote them, so `prove --force` into a folder that holds a
  certificate clears only `prove`'s earlier files; a name another command
  wrote is a conflict like a user's file, named with that command.
* **`--force` clears the earlier run, but only once this one is done.** The
  files the earlier manifest lists are moved aside, into `.schedspec-previous/`
  in the folder, before the work starts, so a PASSED certificate never sits
  beside stale `counterexample-*` files of a failing run. `record()` deletes
  them; `abandon()` (^C, a crash) deletes what this run wrote and moves them
  back, so an interrupted `--force` run leaves the earlier run's files as they
  were. A set-aside folder found by the next run (this process was killed
  with SIGKILL) is moved back first: it is the last run that finished. Files
  the manifest does not list are the user's: they are replaced only when
  this run writes the same name, and otherwise left alone.
* **Atomic, with the umask's mode** (`spec.jsonio.write_bytes_atomic`).
"""

from __future__ import annotations

import fnmatch
import json
import os
import shutil
import tempfile
from collections.abc import Iterable

from .spec.errors import SpecError
from .spec.jsonio import write_bytes_atomic

MANIFEST = ".schedspec-manifest.json"
PREVIOUS = ".schedspec-previous"  # the earlier run's files while a --force run is under way


class OutDir:
    """One command's output folder: `prepare()` before the work, `record()` after it."""

    def __init__(self, path: str, force: bool, option: str = "--out", command: str = "schedspec") -> None:
        self.path, self.force, self.option, self.command = path, force, option, command
        self.created = False
        self.patterns: list[str] = []
        self.present: set[str] = set()  # what the folder held once the earlier run's files were set aside

    def prepare(self, names: Iterable[str] = (), patterns: Iterable[str] = ()) -> None:
        """Create the folder, prove it writable, and settle conflicts with what is already there.

        `names` are the files this run will write; `patterns` (globs) the ones
        whose names are only known later (`counterexample-*.json`).
        """
        names, patterns = list(names), list(patterns)
        self.patterns = names + patterns
        if os.path.exists(self.path) and not os.path.isdir(self.path):
            raise SpecError(self.option, self.path, "is a file, not a folder; name a folder for the outputs")
        self.created = not os.path.exists(self.path)
        try:
            os.makedirs(self.path, exist_ok=True)
        except OSError as e:
            raise SpecError(self.option, self.path, f"cannot be created: {e.strerror}") from None
        probe_writable(self.path, self.option)
        self._restore_previous()
        previous = self._previous()
        present = set(os.listdir(self.path))
        clash = sorted(
            n for n in present if n not in previous and (n in names or any(fnmatch.fnmatch(n, p) for p in patterns))
        )
        if previous and not self.force:
            raise SpecError(
                self.option,
                self.path,
                f"holds the outputs of an earlier {self.command} run "
                f"({len(previous)} files); pass --force to replace them",
            )
        if clash and not self.force:
            owner = next((c for c, files in self._entries().items() if clash[0] in files), None)
            raise SpecError(
                self.option,
                self.path,
                f"already holds {clash[0]}, "
                + (f"written by an earlier {owner} run" if owner else "which schedspec did not write")
                + "; pass --force to overwrite it",
            )
        if previous:  # --force: set aside now, deleted by record(), moved back by abandon()
            aside = os.path.join(self.path, PREVIOUS)
            os.makedirs(aside, exist_ok=True)
            for name in [*previous, MANIFEST]:
                try:
                    os.replace(os.path.join(self.path, name), os.path.join(aside, name))
                except FileNotFoundError:
                    pass
                except OSError as e:
                    raise SpecError(
                        self.option, os.path.join(self.path, name), f"cannot be moved aside: {e.strerror}"
                    ) from None
        self.present = set(os.listdir(self.path))
        _unfinished.append(self)

    def file(self, name: str) -> str:
        return os.path.join(self.path, name)

    def record(self, written: Iterable[str]) -> None:
        """Remember what this run wrote, so the next run can tell it from the user's files."""
        rel = sorted({os.path.relpath(p, self.path) for p in written})
        aside = os.path.join(self.path, PREVIOUS, MANIFEST)  # while a --force run is under way, the manifest is there
        others = {c: f for c, f in self._entries(aside if os.path.exists(aside) else None).items() if c != self.command}
        body = {"commands": {**others, self.command: rel}}
        write_bytes_atomic(self.file(MANIFEST), (json.dumps(body, indent=1) + "\n").encode())
        shutil.rmtree(os.path.join(self.path, PREVIOUS), ignore_errors=True)
        if self in _unfinished:
            _unfinished.remove(self)

    def abandon(self) -> None:
        """An interrupted run (^C): the folder as it was before, or, if it held no earlier run, what was written.

        With an earlier run set aside, this run's files go and the earlier
        ones come back. Without one, a partial run's counterexamples are kept
        (they may be all an hour's campaign found) under a manifest, so the
        next `--force` clears them; a folder left empty that this run made goes.
        """
        if self in _unfinished:
            _unfinished.remove(self)
        if not os.path.isdir(self.path):
            return
        ours = [
            n
            for n in os.listdir(self.path)
            if n not in self.present and any(fnmatch.fnmatch(n, p) for p in self.patterns)
        ]
        if os.path.isdir(os.path.join(self.path, PREVIOUS)):
            for n in ours:
                os.remove(self.file(n))
            self._restore_previous()
        elif ours:
            self.record(self.file(n) for n in ours)
        elif self.created and not os.listdir(self.path):
            os.rmdir(self.path)

    def _restore_previous(self) -> None:
        aside = os.path.join(self.path, PREVIOUS)
        if not os.path.isdir(aside):
            return
        if os.path.exists(self.file(MANIFEST)):  # the run that set them aside recorded itself, then was killed
            shutil.rmtree(aside, ignore_errors=True)
            return
        for name in os.listdir(aside):
            os.replace(os.path.join(aside, name), self.file(name))
        os.rmdir(aside)

    def _entries(self, path: str | None = None) -> dict[str, list[str]]:
        """command -> the files its last run here wrote, from the manifest (also the one-command form of before)."""
        path = path or self.file(MANIFEST)
        if not os.path.exists(path):
            return {}
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
            raw = data["commands"] if "commands" in data else {data["command"]: data["files"]}
            # Only plain names inside the folder: a manifest must never make --force delete elsewhere.
            return {
                str(c): [
                    n for n in files if isinstance(n, str) and n == os.path.basename(n) and n not in ("", ".", "..")
                ]
                for c, files in raw.items()
                if isinstance(files, list)
            }
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return {self.command: [MANIFEST]}  # unreadable: ours, but it names nothing we can safely remove

    def _previous(self) -> list[str]:
        return self._entries().get(self.command, [])


_unfinished: list[OutDir] = []  # prepared, not yet recorded: what `abandon_unfinished` puts back


def abandon_unfinished() -> None:
    """Called by `cli.main` as any command ends: a folder prepared and never recorded was an interrupted run.

    One place for every writing command, so none can forget to put the
    earlier run's files back on ^C, an error, or an exit code of its own.
    """
    while _unfinished:
        _unfinished[-1].abandon()


def probe_writable(folder: str, option: str) -> None:
    try:
        fd, probe = tempfile.mkstemp(prefix=".schedspec-probe-", dir=folder)
        os.close(fd)
        os.remove(probe)
    except OSError as e:
        raise SpecError(option, folder, f"is not writable: {e.strerror}") from None


def check_output_file(path: str | None, force: bool, option: str) -> None:
    """One output file (`--out TRACE.json`, `--plot X.png`): refuse to replace it, and fail now if it cannot be written."""
    if not path:
        return
    if os.path.isdir(path):
        raise SpecError(option, path, "is a folder; name a file")
    if os.path.exists(path) and not force:
        raise SpecError(option, path, "exists; pass --force to overwrite it")
    parent = os.path.dirname(os.path.abspath(path))
    while not os.path.exists(parent):  # missing folders are created on writing: the nearest one that exists decides
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise SpecError(option, path, f"cannot be written: {parent} is a file, not a folder")
    probe_writable(parent, option)
