"""The venvs that hold the real vLLM releases: where each goes, whether it is built, building, listing, removing.

Design notes
------------
* One venv per release, because each release is its own `vllm` package on the
  same CPU torch 2.13.0 and the same pinned dependencies
  (`conformance/vllm_env/setup_vllm_ref.sh VERSION` builds it). 0.33.0, the
  default, lives in $VLLM_REF_VENV, else `<home>/.venv-vllm-ref`; any other
  release in `<home>/.venv-vllm-<V>`. $VLLM_REF_VENV names one folder, so it
  serves 0.33.0 only.
* `<home>` (`venvs_home`) is $SCHEDSPEC_VENVS_DIR if set. Otherwise, in a source
  checkout (or an editable install of one), the checkout's root, where CI has
  always built them; installed from a wheel, the user's cache folder,
  `$XDG_CACHE_HOME/schedspec` (default `~/.cache/schedspec`): 1.5 GB has no
  place inside `site-packages`, which an upgrade or uninstall wipes.
* A venv is ours only if it holds the stamp the setup script writes last,
  `.vllm-ref-<V>`, which names its release. Listing and removing go by the
  stamp: `remove` deletes nothing that is not a stamped venv of a known
  release (a user's folder that happens to sit at the path is left alone).
* Each venv is about 1.5 GB; `schedspec venvs --list` says how much each
  takes, `--remove V` (or `all`) gives the space back.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ...spec.errors import SpecError
from ...spec.versions import DEFAULT_RELEASE, RELEASES

VLLM_ENV_DIR = Path(__file__).resolve().parents[1] / "vllm_env"
SETUP_SCRIPT = VLLM_ENV_DIR / "setup_vllm_ref.sh"
STAMP_PREFIX = ".vllm-ref-"  # + the release: written by the setup script once the venv works
STAMP_NAME = STAMP_PREFIX + DEFAULT_RELEASE


def stamp_name(release: str = DEFAULT_RELEASE) -> str:
    return STAMP_PREFIX + release


HOME_ENV = "SCHEDSPEC_VENVS_DIR"


def venvs_home() -> Path:
    """The folder the vLLM venvs go in: $SCHEDSPEC_VENVS_DIR, a source checkout's root, or the user's cache."""
    if env := os.environ.get(HOME_ENV):
        return Path(env)
    checkout = VLLM_ENV_DIR.parents[1]  # the repository root in a checkout; `.../site-packages/schedspec` installed
    if (checkout / "pyproject.toml").is_file():
        return checkout
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "schedspec"


def vllm_venv_path(release: str = DEFAULT_RELEASE) -> Path:
    """Where the setup script builds `release`'s venv (see the design notes)."""
    if release != DEFAULT_RELEASE:
        return venvs_home() / f".venv-vllm-{release}"
    env = os.environ.get("VLLM_REF_VENV")
    return Path(env) if env else venvs_home() / ".venv-vllm-ref"


def vllm_venv_ready(venv: Path | None = None, release: str = DEFAULT_RELEASE) -> bool:
    return ((venv or vllm_venv_path(release)) / stamp_name(release)).is_file()


def ensure_vllm_venv(venv: Path | None = None, timeout_s: float = 1800.0, release: str = DEFAULT_RELEASE) -> Path:
    """Build `release`'s venv unless its stamp says it is ready (about 60-90 s, 1.5 GB); return its path."""
    venv = venv or vllm_venv_path(release)
    if vllm_venv_ready(venv, release):
        return venv
    command = f"{SETUP_SCRIPT}" if release == DEFAULT_RELEASE else f"{SETUP_SCRIPT} {release}"
    hint = f"run `bash {command}` by hand (VLLM_REF_VENV={venv}) and read its output"
    try:
        done = subprocess.run(
            ["bash", str(SETUP_SCRIPT), release],
            env={**os.environ, "VLLM_REF_VENV": str(venv)},
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
    except subprocess.TimeoutExpired:
        raise SpecError("vllm venv", str(venv), f"was not built within {timeout_s:g} s; {hint}") from None
    if done.returncode != 0 or not vllm_venv_ready(venv, release):
        last = last_line(done.stderr) or last_line(done.stdout)
        raise SpecError("vllm venv", str(venv), f"could not be built (exit {done.returncode}: {last}); {hint}")
    return venv


def last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1] if lines else ""


@dataclass(frozen=True)
class BuiltVenv:
    release: str
    path: Path
    size_bytes: int


def stamped_release(venv: Path) -> str | None:
    """The release whose stamp `venv` holds; None if it holds none (or is no venv at all)."""
    if not (venv / "pyvenv.cfg").is_file():
        return None
    found = [r for r in RELEASES if (venv / stamp_name(r)).is_file()]
    return found[0] if len(found) == 1 else None


def disk_size(path: Path) -> int:
    """Bytes on disk under `path`, links not followed (what removing it gives back)."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
            except OSError:
                pass
    return total


def built_venvs(paths: dict[str, Path] | None = None) -> list[BuiltVenv]:
    """Every release whose venv is built at its usual path, oldest release first."""
    paths = paths if paths is not None else {r: vllm_venv_path(r) for r in RELEASES}
    return [BuiltVenv(r, p, disk_size(p)) for r, p in paths.items() if p.is_dir() and stamped_release(p) == r]


def remove_venvs(which: str, paths: dict[str, Path] | None = None) -> list[BuiltVenv]:
    """Remove the venv of release `which` (or of every release: `all`); return what was removed.

    Only a folder holding our stamp for that very release is removed; anything else is a `SpecError`
    naming `--remove`, and nothing is touched.
    """
    paths = paths if paths is not None else {r: vllm_venv_path(r) for r in RELEASES}
    if which != "all" and which not in RELEASES:
        raise SpecError("--remove", which, f"must be one of {', '.join(RELEASES)} or all")
    targets = built_venvs(paths) if which == "all" else built_venvs({which: paths[which]})
    if which != "all" and not targets:
        p = paths[which]
        why = "is not built" if not p.exists() else f"holds no {stamp_name(which)} stamp: not ours, left alone"
        raise SpecError("--remove", which, f"the venv {p} {why}")
    for v in targets:
        shutil.rmtree(v.path)
    return targets


def installed_version(release: str) -> str:
    """The vLLM version `release`'s venv actually holds (its dist-info), or `release` if it is not built yet."""
    venv = vllm_venv_path(release)
    found = sorted(venv.glob("lib/python*/site-packages/vllm-*.dist-info"))
    return found[0].name[len("vllm-") : -len(".dist-info")] if found and vllm_venv_ready(venv, release) else release
