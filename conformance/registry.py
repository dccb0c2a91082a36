"""Engines by name: `reference`, `vllm`, `torch`, or `module:callable` for anyone's.

A third-party engine is any callable that takes a `SchedulerConfig` and
returns an object with the `spec.engine.Engine` methods; `module:callable`
imports it. Factories are what the harness holds, because each workload
needs a fresh engine with the workload's config.
"""

from __future__ import annotations

import importlib
from functools import cache

from ..spec.engine import EngineFactory
from ..spec.errors import SpecError

BUILTIN_ENGINES = ("reference", "vllm", "torch")


def engine_factory(spec: str) -> EngineFactory:
    if spec == "reference":
        from ..reference_impl import ReferenceEngine

        return ReferenceEngine
    if spec == "vllm":
        return _shared_vllm_factory()
    if spec == "torch":
        try:
            from ..gpu_impl.engine import TorchEngine
        except ImportError:
            raise SpecError("--engine", spec, "the torch engine is not available in this version") from None
        return TorchEngine
    if ":" in spec:
        module_name, _, attr = spec.partition(":")
        try:
            module = importlib.import_module(module_name)
        except Exception as e:  # noqa: BLE001 - a user's module failing to import is their error, reported
            raise SpecError("--engine", spec, f"cannot import {module_name}: {type(e).__name__}: {e}") from None
        factory = getattr(module, attr, None)
        if not callable(factory):
            raise SpecError("--engine", spec, f"{module_name} has no callable {attr!r}")
        return factory
    raise SpecError("--engine", spec, f"must be one of {', '.join(BUILTIN_ENGINES)} or module:callable")


@cache
def _shared_vllm_factory() -> EngineFactory:
    """One pool of vLLM drivers per process: a driver costs ~5 s to start and is reused across workloads."""
    from .engines.vllm import vllm_engine_factory

    return vllm_engine_factory()


def engine_version(spec: str) -> str:
    if spec == "vllm":
        return "vllm 0.33.0"
    if spec in ("reference", "torch"):
        from importlib.metadata import version

        return f"schedspec {version('schedspec')}"
    module_name = spec.partition(":")[0]
    mod = importlib.import_module(module_name)
    return str(getattr(mod, "__version__", "unknown"))
