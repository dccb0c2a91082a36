"""Engines by name: `reference`, `vllm`, `torch`, or `module:callable` for anyone's.

A third-party engine is any callable that takes a `SchedulerConfig` and
returns an object with the `spec.engine.Engine` methods; `module:callable`
imports it. Factories are what the harness holds, because each workload
needs a fresh engine with the workload's config.

An engine arrives here parsed (`engine_spec.EngineSpec`, from
`parse_engine` at the command line). `vllm==V` is the real vLLM release V
(one of `spec.versions.RELEASES`, each in its own venv); `vllm` is
`vllm==0.33.0`, the default release. `vllm@PATH` is vLLM run from a user's
source tree (`certify --vllm-source PATH`), and `vllm==V@PATH` the same tree
judged as release V (`--vllm-version V`). The release and the source travel
inside the spec's canonical name, a plain string, so counterexample files
and an isolated engine's host process carry them without any other
plumbing, and `parse_engine(name)` reads them back.
"""

from __future__ import annotations

import importlib
from functools import cache

from ...spec.engine import EngineFactory
from ...spec.errors import SpecError
from ...spec.versions import DEFAULT_RELEASE
from .engine_spec import VLLM_RELEASE_PREFIX, VLLM_SOURCE_PREFIX, EngineSpec, check_release

START_TIMEOUT_S = 300.0  # an engine's start and its factory: a vLLM driver under load 8 took over 60 s
STEP_TIMEOUT_S = 30.0  # one engine call


def vllm_source_engine(source: str, release: str = DEFAULT_RELEASE, option: str = "--vllm-source") -> EngineSpec:
    """vLLM from a source tree, judged as `release`; the path is checked and made absolute."""
    from .vllm_source import resolve_vllm_source

    check_release(release, "--vllm-version")
    prefix = VLLM_SOURCE_PREFIX if release == DEFAULT_RELEASE else f"{VLLM_RELEASE_PREFIX}{release}@"
    path = str(resolve_vllm_source(source))
    return EngineSpec(prefix + path, "vllm", release, path, option=option)


def certify_engine(engine: EngineSpec, source: str | None, version: str | None) -> EngineSpec:
    """The engine `--engine`, `--vllm-source` and `--vllm-version` make together.

    `--vllm-version` says which release a source tree is judged as; without it, the tree's own version
    file names it (`vllm_source.source_release`). A plain release is `--engine vllm==V`.
    """
    if source is None:
        if version is not None:
            raise SpecError(
                "--vllm-version", version, f"needs --vllm-source; for a release use --engine vllm=={version}"
            )
        return engine
    if not engine.is_vllm or engine.source is not None:
        raise SpecError("--vllm-source", source, f"needs --engine vllm, not --engine {engine}")
    if version is not None and engine.name != "vllm" and engine.release != version:
        raise SpecError("--vllm-version", version, f"contradicts --engine {engine}")
    if version is None:
        version = engine.release if engine.name != "vllm" else _source_release(source)
    return vllm_source_engine(source, version or DEFAULT_RELEASE)


def _source_release(source: str) -> str:
    from .vllm_source import resolve_vllm_source, source_release

    return source_release(resolve_vllm_source(source))


def engine_factory(
    spec: EngineSpec,
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
    if spec.is_vllm:
        return in_process_factory(spec, start_timeout_s=start_timeout_s, step_timeout_s=step_timeout_s)
    factory = in_process_factory(spec)  # imports it here too: a bad name is a one-line error now
    if isolate is None:
        isolate = not spec.builtin
    if isolate:
        from .isolated import IsolatedFactory

        return IsolatedFactory(spec, start_timeout_s, step_timeout_s)
    if not spec.builtin:
        from .snapshot import snapshotting

        return snapshotting(factory, spec.name)
    return factory


def in_process_factory(
    spec: EngineSpec,
    start_timeout_s: float = START_TIMEOUT_S,
    step_timeout_s: float = STEP_TIMEOUT_S,
) -> EngineFactory:
    """The engine's own factory, in this process, with nothing around it."""
    option = spec.option
    if spec.kind == "reference":
        from ...reference_impl import ReferenceEngine

        return ReferenceEngine
    if spec.is_vllm:
        release = spec.release or DEFAULT_RELEASE
        if spec.source is None:
            return _shared_vllm_factory(None, release, start_timeout_s, step_timeout_s)
        from .vllm_source import resolve_vllm_source

        return _shared_vllm_factory(str(resolve_vllm_source(spec.source)), release, start_timeout_s, step_timeout_s)
    if spec.kind == "torch":
        try:
            from ...gpu_impl.engine import TorchEngine
        except ImportError:
            raise SpecError(option, spec.name, "the torch engine is not available in this version") from None
        return TorchEngine
    module_name, attr = spec.module_and_callable
    try:
        module = importlib.import_module(module_name)
    except Exception as e:  # noqa: BLE001 - a user's module failing to import is their error, reported
        raise SpecError(option, spec.name, f"cannot import {module_name}: {type(e).__name__}: {e}") from None
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise SpecError(option, spec.name, f"{module_name} has no callable {attr!r}")
    return factory


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


def engine_version(spec: EngineSpec) -> str:
    if spec.is_vllm and spec.source is None:
        from .vllm_venvs import installed_version

        return f"vllm {installed_version(spec.release or DEFAULT_RELEASE)}"
    if spec.source is not None:
        from .vllm_source import vllm_source_info

        info = vllm_source_info(spec.source)
        commit = (
            "not a git checkout"
            if info["commit"] is None
            else f"commit {info['commit'][:12]}" + (", dirty" if info["dirty"] else ", clean")
        )
        release = f"judged as vllm {spec.release}; " if spec.release != DEFAULT_RELEASE else ""
        return f"vllm source {info['path']} ({commit}); {release}dependencies from the vllm {DEFAULT_RELEASE} venv"
    if spec.builtin:
        from importlib.metadata import version

        return f"schedspec {version('schedspec')}"
    module_name = spec.module_and_callable[0]
    try:
        mod = importlib.import_module(module_name)
    except Exception:  # noqa: BLE001 - a version is a label; the run reports the import failure itself
        return "unknown"
    return str(getattr(mod, "__version__", "unknown"))
