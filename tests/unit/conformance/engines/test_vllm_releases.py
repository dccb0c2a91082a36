"""Every vLLM release as an engine (`--engine vllm==V`): names, bad input, `at_release`, and `schedspec venvs`.

All fast and offline: nothing here builds or starts a real vLLM venv. Venvs
are faked in tmp_path (a `pyvenv.cfg` and the setup script's stamp), with the
repository root pointed there, so a test can never list or remove a real one.
The end-to-end check that builds the 0.31.0 venv is in tests/slow.
"""

from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path

import pytest

from schedspec.cli import main
from schedspec.conformance.campaign.task import Task, task_workload
from schedspec.conformance.engines import registry, vllm_venvs
from schedspec.conformance.engines.engine_spec import parse_engine
from schedspec.conformance.engines.registry import certify_engine
from schedspec.conformance.engines.vllm_source import source_release
from schedspec.conformance.workloads.families import FAMILIES, at_release, generate
from schedspec.spec.errors import SpecError
from schedspec.spec.versions import DEFAULT_RELEASE, RELEASES
from schedspec.spec.workload import Workload

# ---- engine names ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, parsed",
    [
        ("vllm", (DEFAULT_RELEASE, None)),
        ("vllm==0.31.0", ("0.31.0", None)),
        ("vllm==0.28.0", ("0.28.0", None)),
        ("vllm@/src/tree", (DEFAULT_RELEASE, "/src/tree")),
        ("vllm==0.30.0@/src/tree", ("0.30.0", "/src/tree")),
        ("reference", None),
        ("my_module:engine", None),
    ],
)
def test_vllm_engine_names_parse(name: str, parsed: tuple[str, str | None] | None) -> None:
    spec = parse_engine(name)
    assert ((spec.release, spec.source) if spec.is_vllm else None) == parsed
    assert spec.builtin == (parsed is not None or name == "reference")
    assert str(spec) == name and parse_engine(spec.name) == spec  # the canonical name reads back the same


def test_an_engine_name_that_is_none_of_them_is_refused_naming_the_option() -> None:
    with pytest.raises(SpecError) as e:
        parse_engine("vlm", "--against")
    assert str(e.value).startswith("--against: ") and "module:callable" in str(e.value)


@pytest.mark.parametrize("name", ["vllm==9.9.9", "vllm==0.31", "vllm==", "vllm==0.27.0@/x"])
def test_an_unknown_release_is_refused_naming_the_option(name: str) -> None:
    with pytest.raises(SpecError) as e:
        parse_engine(name, "--against")
    assert str(e.value).startswith("--against:") and name in str(e.value)


@pytest.mark.parametrize(
    "argv, option",
    [
        (["certify", "--engine", "vllm==9.9.9"], "--engine"),
        (["certify", "--engine", "reference", "--against", "vllm==0.31"], "--against"),
        (["certify", "--engine", "vllm", "--vllm-version", "0.31.0"], "--vllm-version"),
        (["venvs", "--remove", "9.9.9"], "--remove"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(argv, option, tmp_path: Path, capsys) -> None:
    if argv[0] == "certify":
        argv = [*argv, "--workloads", "1", "--out", str(tmp_path / "out")]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"error: {option}:" in err, err


def test_engine_version_reports_the_release_the_venv_holds(fake_repo: Path) -> None:
    _fake_venv(fake_repo / ".venv-vllm-0.31.0", "0.31.0", dist_info="0.31.0")
    assert registry.engine_version(parse_engine("vllm==0.31.0")) == "vllm 0.31.0"
    assert (
        registry.engine_version(parse_engine("vllm==0.28.0")) == "vllm 0.28.0"
    )  # not built yet: the release asked for


# ---- --vllm-source with --vllm-version ----------------------------------------------------------------


def _tree(tmp_path: Path, version: str | None) -> Path:
    sched = tmp_path / "tree" / "vllm" / "v1" / "core" / "sched"
    sched.mkdir(parents=True)
    (sched / "scheduler.py").write_text("")
    (tmp_path / "tree" / "vllm" / "__init__.py").write_text("")
    if version is not None:
        (tmp_path / "tree" / "vllm" / "_version.py").write_text(f"version: str\n__version__ = version = '{version}'\n")
    return tmp_path / "tree"


@pytest.mark.parametrize(
    "declared, release", [(None, DEFAULT_RELEASE), ("0.31.0", "0.31.0"), ("0.32.1.dev7+gabc", "0.32.0")]
)
def test_a_source_tree_is_judged_as_the_release_it_declares(tmp_path: Path, declared, release) -> None:
    tree = _tree(tmp_path, declared)
    assert source_release(tree) == release
    assert certify_engine(parse_engine("vllm"), str(tree), None).release == release
    assert certify_engine(parse_engine("vllm"), str(tree), "0.29.0").name == f"vllm==0.29.0@{tree.resolve()}"


def test_a_source_tree_older_than_every_release_needs_vllm_version(tmp_path: Path) -> None:
    tree = _tree(tmp_path, "0.20.0")
    with pytest.raises(SpecError, match="--vllm-version"):
        certify_engine(parse_engine("vllm"), str(tree), None)
    with pytest.raises(SpecError, match="--vllm-version"):
        certify_engine(parse_engine("vllm==0.31.0"), str(tree), "0.30.0")  # contradicts the engine's release


# ---- at_release ----------------------------------------------------------------------------------------


def _with(w: Workload, **changes) -> Workload:
    return w.replace(config=dataclasses.replace(w.config, **changes))


def test_at_release_drops_the_knobs_older_releases_lack() -> None:
    w = _with(generate("budget", 0, 0), max_num_active_seqs=1, long_prefill_token_threshold_adaptive=True)
    old = at_release(w, "0.30.0")
    assert old.config.vllm_version == "0.30.0"
    assert old.config.max_num_active_seqs is None and not old.config.long_prefill_token_threshold_adaptive
    assert "max_num_active_seqs=1 -> None" in old.description
    new = at_release(w, "0.31.0")
    assert new.config.max_num_active_seqs == 1 and new.config.long_prefill_token_threshold_adaptive
    assert new.description == w.description


def test_at_release_drafts_with_ngram_gpu_under_async_before_0_33() -> None:
    """Before 0.33.0 vLLM takes async spec decode only with a drafter on the device: the workload keeps async
    and spec decode, and its drafter becomes `ngram_gpu`, which the scheduler treats as `ngram`."""
    w = _with(generate("budget", 0, 0), async_scheduling=True, num_speculative_tokens=2)
    old = at_release(w, "0.32.0").config
    assert old.async_scheduling and old.num_speculative_tokens == 2 and old.speculative_method == "ngram_gpu"
    assert "speculative_method='ngram' -> 'ngram_gpu'" in at_release(w, "0.28.0").description
    assert at_release(w, "0.33.0").config.speculative_method == "ngram"
    sync = _with(w, async_scheduling=False)
    assert at_release(sync, "0.28.0").config.speculative_method == "ngram"  # sync: nothing refused
    plain_async = _with(generate("budget", 0, 0), async_scheduling=True)
    assert at_release(plain_async, "0.28.0").config.async_scheduling  # no drafter: nothing refused


def test_at_release_is_the_identity_at_the_default_release() -> None:
    w = generate("threshold", 0, 3)
    assert at_release(w, DEFAULT_RELEASE) is w


@pytest.mark.parametrize("release", RELEASES)
def test_every_family_maps_to_a_config_each_release_accepts(release: str) -> None:
    for family in FAMILIES:
        for i in range(8):
            assert at_release(generate(family, 0, i), release).config.vllm_version == release


def test_at_release_refuses_an_unknown_release() -> None:
    with pytest.raises(SpecError, match="vllm_version"):
        at_release(generate("budget", 0, 0), "0.27.0")


def test_a_campaign_runs_each_workload_at_its_engines_release() -> None:
    def task(engine: str, against: str = "reference") -> Task:
        return Task("threshold", 1, 0, parse_engine(engine), parse_engine(against), "blocks", "out", False)

    assert task_workload(task("vllm==0.28.0")).config.vllm_version == "0.28.0"
    assert task_workload(task("reference", "vllm==0.30.0")).config.vllm_version == "0.30.0"
    assert task_workload(task("vllm==0.31.0", "vllm==0.28.0")).config.vllm_version == "0.31.0"
    assert task_workload(task("reference")) == generate("threshold", 0, 1)


# ---- schedspec venvs -----------------------------------------------------------------------------------


@pytest.fixture
def fake_repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The repository root seen by vllm_venvs, moved to tmp_path: real venvs are out of reach."""
    monkeypatch.setattr(vllm_venvs, "VLLM_ENV_DIR", tmp_path / "conformance" / "vllm_env")
    monkeypatch.delenv("VLLM_REF_VENV", raising=False)
    monkeypatch.delenv(vllm_venvs.HOME_ENV, raising=False)
    (tmp_path / "pyproject.toml").write_text("")  # a source checkout
    return tmp_path


def test_venvs_go_to_the_checkouts_root_or_the_users_cache_never_into_site_packages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    installed = tmp_path / "venv" / "lib" / "python3.11" / "site-packages" / "schedspec"
    monkeypatch.setattr(vllm_venvs, "VLLM_ENV_DIR", installed / "conformance" / "vllm_env")
    for name in ("VLLM_REF_VENV", vllm_venvs.HOME_ENV):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert vllm_venvs.vllm_venv_path() == tmp_path / "cache" / "schedspec" / ".venv-vllm-ref"
    assert vllm_venvs.vllm_venv_path("0.28.0") == tmp_path / "cache" / "schedspec" / ".venv-vllm-0.28.0"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert vllm_venvs.vllm_venv_path() == tmp_path / "home" / ".cache" / "schedspec" / ".venv-vllm-ref"
    monkeypatch.setenv(vllm_venvs.HOME_ENV, str(tmp_path / "mine"))  # the override, for every release
    assert vllm_venvs.vllm_venv_path("0.30.0") == tmp_path / "mine" / ".venv-vllm-0.30.0"
    monkeypatch.setenv("VLLM_REF_VENV", str(tmp_path / "ref"))  # and VLLM_REF_VENV, for 0.33.0 alone
    assert vllm_venvs.vllm_venv_path() == tmp_path / "ref"
    assert vllm_venvs.vllm_venv_path("0.30.0") == tmp_path / "mine" / ".venv-vllm-0.30.0"


def test_in_this_checkout_the_venvs_sit_at_its_root(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("VLLM_REF_VENV", vllm_venvs.HOME_ENV):
        monkeypatch.delenv(name, raising=False)
    root = Path(__file__).resolve().parents[4]
    assert vllm_venvs.vllm_venv_path() == root / ".venv-vllm-ref"


def _fake_venv(path: Path, stamp: str | None, dist_info: str | None = None) -> Path:
    path.mkdir(parents=True)
    (path / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (path / "payload.bin").write_bytes(b"x" * 100_000)
    if stamp is not None:
        (path / vllm_venvs.stamp_name(stamp)).write_text("2026-01-01T00:00:00Z\n")
    if dist_info is not None:
        (path / "lib" / "python3.11" / "site-packages" / f"vllm-{dist_info}.dist-info").mkdir(parents=True)
    return path


def test_venvs_list_shows_each_stamped_venv_with_its_size(fake_repo: Path, capsys) -> None:
    _fake_venv(fake_repo / ".venv-vllm-ref", "0.33.0")
    _fake_venv(fake_repo / ".venv-vllm-0.28.0", "0.28.0")
    _fake_venv(fake_repo / ".venv-vllm-0.29.0", None)  # half-built: no stamp, not listed
    built = vllm_venvs.built_venvs()
    assert [(v.release, v.path.name) for v in built] == [("0.28.0", ".venv-vllm-0.28.0"), ("0.33.0", ".venv-vllm-ref")]
    assert all(v.size_bytes >= 100_000 for v in built)
    assert main(["venvs", "--list"]) == 0
    out = capsys.readouterr().out
    assert "0.28.0" in out and ".venv-vllm-ref" in out and "not built: 0.29.0" in out


def test_venvs_remove_deletes_only_our_stamped_venv(fake_repo: Path) -> None:
    keep = _fake_venv(fake_repo / ".venv-vllm-ref", "0.33.0")
    gone = _fake_venv(fake_repo / ".venv-vllm-0.31.0", "0.31.0")
    assert main(["venvs", "--remove", "0.31.0"]) == 0
    assert not gone.exists() and keep.exists()


@pytest.mark.parametrize("stamp", [None, "0.28.0"])  # no stamp, or another release's stamp
def test_venvs_remove_refuses_a_folder_that_is_not_ours(fake_repo: Path, stamp, capsys) -> None:
    foreign = _fake_venv(fake_repo / ".venv-vllm-0.30.0", stamp)
    assert main(["venvs", "--remove", "0.30.0"]) == 2
    assert foreign.exists() and "--remove" in capsys.readouterr().err


def test_venvs_remove_all(fake_repo: Path) -> None:
    venvs = [_fake_venv(fake_repo / ".venv-vllm-ref", "0.33.0"), _fake_venv(fake_repo / ".venv-vllm-0.28.0", "0.28.0")]
    mine = fake_repo / "notes"
    mine.mkdir()
    assert [v.release for v in vllm_venvs.remove_venvs("all")] == ["0.28.0", "0.33.0"]
    assert not any(v.exists() for v in venvs) and mine.exists()


# ---- the setup script --------------------------------------------------------------------------------


def test_setup_script_refuses_a_malformed_version_before_building(tmp_path: Path) -> None:
    done = subprocess.run(
        ["bash", str(vllm_venvs.SETUP_SCRIPT), "0.31"],
        env={"PATH": "/usr/bin:/bin", "VLLM_REF_VENV": str(tmp_path / "v")},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and "0.31" in done.stderr and not (tmp_path / "v").exists()


def _setup(venv: Path, version: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(vllm_venvs.SETUP_SCRIPT), version],
        env={"PATH": "/usr/bin:/bin", "VLLM_REF_VENV": str(venv)},
        capture_output=True,
        text=True,
    )


def _fake_python(venv: Path) -> Path:
    """A `bin/python` that only records how it was called."""
    calls = venv / "calls.txt"
    (venv / "bin").mkdir()
    (venv / "bin" / "python").write_text(f'#!/bin/sh\necho "$@" >> {calls}\n')
    (venv / "bin" / "python").chmod(0o755)
    return calls


def test_setup_script_is_a_no_op_on_a_venv_stamped_for_its_release(tmp_path: Path) -> None:
    venv = _fake_venv(tmp_path / "v", "0.29.0")
    (venv / "lib" / "python3.11" / "site-packages" / "coverage-7.6.1.dist-info").mkdir(parents=True)
    calls = _fake_python(venv)
    done = _setup(venv, "0.29.0")
    assert done.returncode == 0 and "0.29.0 reference venv ready" in done.stdout, done.stderr
    assert not calls.exists()  # nothing installed, nothing rebuilt


def test_setup_script_adds_coverage_to_a_venv_stamped_before_it_joined(tmp_path: Path) -> None:
    # Venvs built before the driver measured line coverage get coverage.py, and only that: no rebuild.
    venv = _fake_venv(tmp_path / "v", "0.29.0")
    calls = _fake_python(venv)
    done = _setup(venv, "0.29.0")
    assert done.returncode == 0 and "added coverage==7.6.1" in done.stdout, done.stderr
    assert calls.read_text().split() == ["-m", "pip", "install", "-q", "--no-cache-dir", "--no-deps", "coverage==7.6.1"]
    assert (venv / "payload.bin").exists()
