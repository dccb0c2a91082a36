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
* **`--force` clears the earlier run.** The files the earlier manifest lists
  are removed first, so a PASSED certificate never sits beside stale
  `counterexample-*` files of a failing run. Files the manifest does not
  list are the user's: they are replaced only when this run writes the same
  name, and otherwise left alone.
* **Atomic, with the umask's mode** (`spec.jsonio.write_bytes_atomic`).
"""

from __future__ import annotations

import fnmatch
import json
import os
import tempfile
from collections.abc import Iterable

from .spec.errors import SpecError
from .spec.jsonio import write_bytes_atomic

MANIFEST = ".schedspec-manifest.json"


class OutDir:
    """One command's output folder: `prepare()` before the work, `record()` after it."""

    def __init__(self, path: str, force: bool, option: str = "--out", command: str = "schedspec") -> None:
        self.path, self.force, self.option, self.command = path, force, option, command
        self.created = False
        self.patterns: list[str] = []

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
        previous = self._previous()
        present = set(os.listdir(self.path))
        clash = sorted(n for n in present if n in names or any(fnmatch.fnmatch(n, p) for p in patterns))
        if previous and not self.force:
            raise SpecError(
                self.option,
                self.path,
                f"holds the outputs of an earlier {self.command} run "
                f"({len(previous)} files); pass --force to replace them",
            )
        if clash and not self.force:
            raise SpecError(
                self.option,
                self.path,
                f"already holds {clash[0]}, which schedspec did not write; pass --force to overwrite it",
            )
        for name in previous:  # --force: the earlier run's files go, so none of them outlives it stale
            try:
                os.remove(os.path.join(self.path, name))
            except FileNotFoundError:
                pass
            except OSError as e:
                raise SpecError(
                    self.option, os.path.join(self.path, name), f"cannot be removed: {e.strerror}"
                ) from None
        if previous:
            os.remove(os.path.join(self.path, MANIFEST))

    def file(self, name: str) -> str:
        return os.path.join(self.path, name)

    def record(self, written: Iterable[str]) -> None:
        """Remember what this run wrote, so the next run can tell it from the user's files."""
        rel = sorted({os.path.relpath(p, self.path) for p in written})
        body = {"command": self.command, "files": rel}
        write_bytes_atomic(self.file(MANIFEST), (json.dumps(body, indent=1) + "\n").encode())

    def abandon(self) -> None:
        """An interrupted run (^C): leave no empty folder, and let `--force` clear what it did write."""
        if not os.path.isdir(self.path):
            return
        ours = [n for n in os.listdir(self.path) if any(fnmatch.fnmatch(n, p) for p in self.patterns)]
        if ours:
            self.record(self.file(n) for n in ours)
        elif self.created and not os.listdir(self.path):
            os.rmdir(self.path)

    def _previous(self) -> list[str]:
        path = self.file(MANIFEST)
        if not os.path.exists(path):
            return []
        try:
            with open(path, encoding="utf-8") as f:
                files = json.load(f)["files"]
        except (OSError, ValueError, KeyError, TypeError):
            return [MANIFEST]  # unreadable: ours, but it names nothing we can safely remove
        # Only plain names inside the folder: a manifest must never make --force delete elsewhere.
        return [n for n in files if isinstance(n, str) and n == os.path.basename(n) and n not in ("", ".", "..")]


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
