"""Engines by name: `reference`, `vllm`, `torch`, or `module:callable` for anyone's.

A third-party engine is any callable that takes a `SchedulerConfig` and
returns an object with the `spec.engine.Engine` methods; `module:callable`
imports it. Factories are what the harness holds, because each workload
needs a fresh engine with the workload's config.

`vllm==V` is the real vLLM release V (one of `spec.versions.RELEASES`, each
in its own venv); `vllm` is `vllm==0.33.0`, the default release. `vllm@PATH`
is vLLM run from a user's source tree (`certify --vllm-source PATH`), and
`vllm==V@PATH` the same tree judged as release V (`--vllm-version V`). The
release and the source travel inside the engine's name, a plain string, so
the planned tasks, spawned workers, counterexample files and `replay` all
carry them without any other plumbing; the campaign reads the release back
from the name to run each workload at it (`vllm_release_of`).
"""

from __future__ import annotations

import importlib
from functools import cache

from ...spec.engine import EngineFactory
from ...spec.errors import SpecError
from ...spec.versions import DEFAULT_RELEASE, RELEASES

START_TIMEOUT_S = 300.0  # an engine's start and its factory: a vLLM driver under load 8 took over 60 s
STEP_TIMEOUT_S = 30.0  # one engine call

BUILTIN_ENGINES = ("reference", "vllm", "torch")
VLLM_SOURCE_PREFIX = "vllm@"
VLLM_RELEASE_PREFIX = "vllm=="


def vllm_source_engine(source: str, release: str = DEFAULT_RELEASE) -> str:
    """The engine name for vLLM from a source tree; the path is checked and made absolute."""
    from .vllm_source import resolve_vllm_source

    check_release(release, "--vllm-version")
    prefix = VLLM_SOURCE_PREFIX if release == DEFAULT_RELEASE else f"{VLLM_RELEASE_PREFIX}{release}@"
    return prefix + str(resolve_vllm_source(source))


def check_release(release: str, option: str, given: str | None = None) -> str:
    if release not in RELEASES:
        raise SpecError(option, given or release, f"must name a vLLM release schedspec models: {', '.join(RELEASES)}")
    return release


def parse_vllm(spec: str, option: str = "--engine") -> tuple[str, str | None] | None:
    """(release, source tree or None) of a vLLM engine name; None for any other engine. A bad release raises."""
    if spec == "vllm":
        return DEFAULT_RELEASE, None
    if spec.startswith(VLLM_SOURCE_PREFIX):
        return DEFAULT_RELEASE, spec[len(VLLM_SOURCE_PREFIX) :]
    if not spec.startswith(VLLM_RELEASE_PREFIX):
        return None
    release, at, source = spec[len(VLLM_RELEASE_PREFIX) :].partition("@")
    return check_release(release, option, spec), (source if at else None)


def certify_engine(engine: str, source: str | None, version: str | None) -> str:
    """The engine name `--engine`, `--vllm-source` and `--vllm-version` make together (`registry.parse_vllm`).

    `--vllm-version` says which release a source tree is judged as; without it, the tree's own version
    file names it (`vllm_source.source_release`). A plain release is `--engine vllm==V`.
    """
    parsed = parse_vllm(engine, "--engine")
    if source is None:
        if version is not None:
            raise SpecError(
                "--vllm-version", version, f"needs --vllm-source; for a release use --engine vllm=={version}"
            )
        return engine
    if parsed is None or parsed[1] is not None:
        raise SpecError("--vllm-source", source, f"needs --engine vllm, not --engine {engine}")
    if version is not None and engine != "vllm" and parsed[0] != version:
        raise SpecError("--vllm-version", version, f"contradicts --engine {engine}")
    if version is None:
        version = parsed[0] if engine != "vllm" else _source_release(source)
    return vllm_source_engine(source, version)


def _source_release(source: str) -> str:
    from .vllm_source import resolve_vllm_source, source_release

    return source_release(resolve_vllm_source(source))


def vllm_source_of(spec: str) -> str | None:
    parsed = parse_vllm(spec)
    return parsed[1] if parsed else None


def vllm_release_of(spec: str) -> str | None:
    """The release a vLLM engine name runs (`vllm`: the default); None for an engine that is not vLLM."""
    parsed = parse_vllm(spec)
    return parsed[0] if parsed else None


def is_builtin(spec: str) -> bool:
    return spec in BUILTIN_ENGINES or parse_vllm(spec) is not None


def engine_factory(
    spec: str,
    option: str = "--engine",
    *,
    isolate: bool | None = None,
    start_timeout_s: float = START_TIMEOUT_S,
    step_timeout_s: float = STEP_TIMEOUT_S,
) -> EngineFactory:
    """The factory the harness drives `spec` through.

    A third-party engine (`module:callable`) runs in its own process unless
    `isolate=False` (`--in-process`), and even then its answers are copied
    into the spec's frozen types as they are returned (`snapshot.py`). Our
    own engines run in process, trusted; the real vLLM always runs behind
    its driver's pipe. `isolate=True` puts any engine but vLLM in a child.
    """
    if parse_vllm(spec, option) is not None:
        return in_process_factory(spec, option, start_timeout_s=start_timeout_s, step_timeout_s=step_timeout_s)
    factory = in_process_factory(spec, option)  # imports it here too: a bad name is a one-line error now
    if isolate is None:
        isolate = not is_builtin(spec)
    if isolate:
        from .isolated import IsolatedFactory

        return IsolatedFactory(spec, start_timeout_s, step_timeout_s)
    if not is_builtin(spec):
        from .snapshot import snapshotting

        return snapshotting(factory, spec)
    return factory


def in_process_factory(
    spec: str,
    option: str = "--engine",
    start_timeout_s: float = START_TIMEOUT_S,
    step_timeout_s: float = STEP_TIMEOUT_S,
) -> EngineFactory:
    """The engine's own factory, in this process, with nothing around it."""
    if spec == "reference":
        from ...reference_impl import ReferenceEngine

        return ReferenceEngine
    vllm = parse_vllm(spec, option)
    if vllm is not None:
        release, source = vllm
        if source is None:
            return _shared_vllm_factory(None, release, start_timeout_s, step_timeout_s)
        from .vllm_source import resolve_vllm_source

        return _shared_vllm_factory(str(resolve_vllm_source(source)), release, start_timeout_s, step_timeout_s)
    if spec == "torch":
        try:
            from ...gpu_impl.engine import TorchEngine
        except ImportError:
            raise SpecError(option, spec, "the torch engine is not available in this version") from None
        return TorchEngine
    if ":" in spec:
        module_name, _, attr = spec.partition(":")
        try:
            module = importlib.import_module(module_name)
        except Exception as e:  # noqa: BLE001 - a user's module failing to import is their error, reported
            raise SpecError(option, spec, f"cannot import {module_name}: {type(e).__name__}: {e}") from None
        factory = getattr(module, attr, None)
        if not callable(factory):
            raise SpecError(option, spec, f"{module_name} has no callable {attr!r}")
        return factory
    raise SpecError(option, spec, f"must be one of {', '.join(BUILTIN_ENGINES)}, vllm==VERSION or module:callable")


@cache
def _shared_vllm_factory(
    source: str | None, release: str, start_timeout_s: float, step_timeout_s: float
) -> EngineFactory:
    """One pool of vLLM drivers per process, release and source: a driver costs ~5 s to start and is reused.

    A source tree runs on the default release's venv (its dependencies); `release` then only names the
    semantics it is judged by, which the campaign puts in each workload's config.
    """
    from .vllm_pool import vllm_engine_factory

    timeouts = {"init_timeout_s": start_timeout_s, "step_timeout_s": step_timeout_s}
    if not source:
        return vllm_engine_factory(release=release, **timeouts)
    factory = vllm_engine_factory(source=source, **timeouts)
    # Start one driver now (it goes back to the pool for the first workload): a tree that cannot
    # even be imported is one clear error, not a failed start, and a shrink, per workload.
    from ...spec.config import SchedulerConfig

    try:
        factory(SchedulerConfig()).close()
    except SpecError as e:
        factory.close_all()
        raise SpecError("--vllm-source", source, f"cannot run vLLM from it: {e.why}") from None
    return factory


def engine_version(spec: str) -> str:
    vllm = parse_vllm(spec)
    if vllm is not None and vllm[1] is None:
        from .vllm_venvs import installed_version

        return f"vllm {installed_version(vllm[0])}"
    source = vllm_source_of(spec)
    if source is not None:
        from .vllm_source import vllm_source_info

        info = vllm_source_info(source)
        commit = (
            "not a git checkout"
            if info["commit"] is None
            else f"commit {info['commit'][:12]}" + (", dirty" if info["dirty"] else ", clean")
        )
        release = f"judged as vllm {vllm[0]}; " if vllm and vllm[0] != DEFAULT_RELEASE else ""
        return f"vllm source {info['path']} ({commit}); {release}dependencies from the vllm {DEFAULT_RELEASE} venv"
    if spec in ("reference", "torch"):
        from importlib.metadata import version

        return f"schedspec {version('schedspec')}"
    module_name = spec.partition(":")[0]
    try:
        mod = importlib.import_module(module_name)
    except Exception:  # noqa: BLE001 - a version is a label; the run reports the import failure itself
        return "unknown"
    return str(getattr(mod, "__version__", "unknown"))
