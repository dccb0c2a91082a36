"""Output folders and files: nothing a user wrote is lost, nothing stale is left, nothing fails late.

Every command that writes a folder (certify, merge, mutants, prove,
contracts, hunt, changelog, replay-live, vllm-tests) goes through here, for
these promises:

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
* **A run appears whole or not at all.** A run writes into a staging
  folder (`.schedspec-staging-PID` inside `--out`), never into `--out`
  itself, so while it runs, and after any interruption (^C, SIGTERM, a
  crash, SIGKILL, a power cut), `--out` holds the earlier run exactly as
  it was. Once the run is complete, `record()` writes a swap journal into
  the staging folder: that write is the commit. The swap then removes this
  command's earlier files, moves the new ones in and rewrites the manifest;
  a swap cut short is finished by the next run, which reads the journal,
  and a staging folder with no journal is a run that never completed: the
  next run deletes it. Paths that name the staging folder inside the text
  outputs (a certificate's counterexample files) are rewritten to their
  final place before the commit.
* **Partial findings are kept when nothing is lost by keeping them.** An
  interrupted run into a folder with no earlier run of its command moves
  in what it had already found (`counterexample-*.json`: they may be all
  an hour's campaign found), under a manifest, so the next `--force`
  clears them.
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
from .spec.jsonio import process_alive, write_bytes_atomic, write_json_atomic

MANIFEST = ".schedspec-manifest.json"
STAGING = ".schedspec-staging-"  # + the pid of the run writing into it
SWAP = ".schedspec-swap.json"  # in a staging folder: the run is complete, and this is what its swap does
PREVIOUS = ".schedspec-previous"  # an older schedspec's set-aside folder: moved back, as it did
TEXT_OUTPUTS = (".json", ".md", ".xml", ".txt", ".jsonl")  # what may name the staging folder, and is rewritten


class OutDir:
    """One command's output folder: `prepare()` before the work, write under `dir`, `record()` after it."""

    def __init__(self, path: str, force: bool, option: str = "--out", command: str = "schedspec") -> None:
        self.path, self.force, self.option, self.command = path, force, option, command
        self.created = False
        self.patterns: list[str] = []
        self.dir = os.path.join(path, f"{STAGING}{os.getpid()}")  # where this run writes, until record()

    def prepare(self, names: Iterable[str] = (), patterns: Iterable[str] = ()) -> None:
        """Create the folder, prove it writable, settle conflicts with what is there, and open the staging folder.

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
        settle_leftovers(self.path, self.option)
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
            owner = next((c for c, files in entries(self.path).items() if clash[0] in files), None)
            raise SpecError(
                self.option,
                self.path,
                f"already holds {clash[0]}, "
                + (f"written by an earlier {owner} run" if owner else "which schedspec did not write")
                + "; pass --force to overwrite it",
            )
        os.makedirs(self.dir)
        _unfinished.append(self)

    def file(self, name: str) -> str:
        """Where this run writes `name`: in the staging folder, until `record()` moves it into the folder."""
        return os.path.join(self.dir, name)

    def final(self, path: str) -> str:
        """The place a path under the staging folder will have once the run is recorded (for what is printed)."""
        return self.path + path[len(self.dir) :] if path.startswith(self.dir) else path

    def record(self, written: Iterable[str] = ()) -> None:
        """Commit this run: everything in the staging folder replaces this command's earlier files in the folder.

        `written` is kept for the callers' sake (what they wrote); what moves is
        all the staging folder holds, so nothing a run wrote is left behind.
        """
        del written
        self._commit(sorted(os.listdir(self.dir)))

    def abandon(self) -> None:
        """An interrupted run: the folder as it was, or, if it held no earlier run, what was found so far."""
        if self in _unfinished:
            _unfinished.remove(self)
        if os.path.isdir(self.dir):
            if os.path.exists(os.path.join(self.dir, SWAP)):
                swap(self.path, self.dir)  # committed, then interrupted mid-swap: finish it
            else:
                found = [n for n in os.listdir(self.dir) if any(fnmatch.fnmatch(n, p) for p in self.patterns)]
                if found and not self._previous():
                    self._commit(sorted(found))
                else:
                    shutil.rmtree(self.dir, ignore_errors=True)
        if self.created and os.path.isdir(self.path) and not os.listdir(self.path):
            os.rmdir(self.path)

    def _commit(self, names: list[str]) -> None:
        for name in names:
            rewrite_paths(os.path.join(self.dir, name), self.dir, self.path)
        stale = [n for n in self._previous() if n not in names]
        write_json_atomic(os.path.join(self.dir, SWAP), {"command": self.command, "move": names, "remove": stale})
        swap(self.path, self.dir)
        if self in _unfinished:
            _unfinished.remove(self)

    def _previous(self) -> list[str]:
        return entries(self.path).get(self.command, [])


def swap(folder: str, staging: str) -> None:
    """Carry out a committed run's journal; safe to repeat, so a swap cut short is finished by the next run."""
    with open(os.path.join(staging, SWAP), encoding="utf-8") as f:
        journal = json.load(f)
    command, move, remove = journal["command"], journal["move"], journal["remove"]
    for name in [*remove, *move]:
        if not _plain(name):
            continue
        target = os.path.join(folder, name)
        source = os.path.join(staging, name)
        if name in move and not os.path.lexists(source):
            continue  # moved before the cut
        if os.path.isdir(target) and not os.path.islink(target):
            shutil.rmtree(target)
        elif os.path.lexists(target):
            os.remove(target)
        if name in move:
            os.replace(source, target)
    # A name this run wrote is this command's now (it overwrote it under --force): no other may remove it later.
    others = {c: [n for n in f if n not in move] for c, f in entries(folder).items() if c != command}
    write_bytes_atomic(
        os.path.join(folder, MANIFEST), (json.dumps({"commands": {**others, command: move}}, indent=1) + "\n").encode()
    )
    shutil.rmtree(staging, ignore_errors=True)


def settle_leftovers(folder: str, option: str) -> None:
    """Finish or discard what interrupted runs left: committed swaps are finished, uncommitted stagings go."""
    _restore_previous(folder)
    for name in sorted(os.listdir(folder)):
        if not name.startswith(STAGING):
            continue
        staging = os.path.join(folder, name)
        pid = name[len(STAGING) :]
        if pid.isdigit() and int(pid) != os.getpid() and process_alive(int(pid)):
            raise SpecError(option, folder, f"is being written by another schedspec run (pid {pid}); wait for it")
        if os.path.exists(os.path.join(staging, SWAP)):
            swap(folder, staging)
        else:
            shutil.rmtree(staging, ignore_errors=True)


def rewrite_paths(path: str, staging: str, final: str) -> None:
    """A text output that names files under the staging folder names them where they will be."""
    if not path.endswith(TEXT_OUTPUTS) or not os.path.isfile(path):
        return
    with open(path, encoding="utf-8", errors="surrogateescape") as f:
        text = f.read()
    forms = {staging: final, json.dumps(staging)[1:-1]: json.dumps(final)[1:-1]}
    forms[os.path.abspath(staging)] = os.path.abspath(final)
    new = text
    for old, to in forms.items():
        new = new.replace(old, to)
    if new != text:
        with open(path, "w", encoding="utf-8", errors="surrogateescape") as f:
            f.write(new)


def entries(folder: str) -> dict[str, list[str]]:
    """command -> the files its last run here wrote, from the manifest (also the one-command form of before)."""
    path = os.path.join(folder, MANIFEST)
    if not os.path.exists(path):
        return {}
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        raw = data["commands"] if "commands" in data else {data["command"]: data["files"]}
        # Only plain names inside the folder: a manifest must never make --force delete elsewhere.
        return {str(c): [n for n in files if _plain(n)] for c, files in raw.items() if isinstance(files, list)}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}  # unreadable: it names nothing we can safely remove


def _plain(name: object) -> bool:
    return (
        isinstance(name, str)
        and name == os.path.basename(name)
        and name not in ("", ".", "..", MANIFEST)
        and not name.startswith(STAGING)
    )


def _restore_previous(folder: str) -> None:
    """An older schedspec set an earlier run's files aside in `.schedspec-previous/`; put them back as it did."""
    aside = os.path.join(folder, PREVIOUS)
    if not os.path.isdir(aside):
        return
    if os.path.exists(os.path.join(folder, MANIFEST)):
        shutil.rmtree(aside, ignore_errors=True)
        return
    for name in os.listdir(aside):
        os.replace(os.path.join(aside, name), os.path.join(folder, name))
    os.rmdir(aside)


_unfinished: list[OutDir] = []  # prepared, not yet recorded: what `abandon_unfinished` settles


def abandon_unfinished() -> None:
    """Called by `cli.main` as any command ends: a folder prepared and never recorded was an interrupted run.

    One place for every writing command, so none can forget to leave the
    earlier run as it was on ^C, SIGTERM, an error, or an exit code of its own.
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
