"""A pool of vLLM drivers, reused across workloads: what `--engine vllm` hands the harness.

Design notes
------------
* Why a pool at all: the harness asks for a fresh engine per workload and
  closes it after, but a fresh `VllmEngine` pays ~5 s of vLLM imports in its
  driver (~12 s with a cold model-info cache). A pooled driver pays that once
  and then only `reset(config)`s, which builds a new scheduler in the same
  process.
* Why it is separate from `vllm.py`: the engine is one driver and its pipe;
  who owns a driver between workloads, and when one may be reused, is a
  different question with its own rules (a broken driver is dropped, a forked
  child never shares its parent's pipes, idle drivers are closed at exit).
* A lease is the engine the harness sees: it forwards the `Engine` protocol
  and turns `close()` into giving the driver back.
"""

from __future__ import annotations

import atexit
import os
from typing import Any

from ...spec.config import SchedulerConfig
from ...spec.errors import SpecError
from ...spec.versions import DEFAULT_RELEASE
from .vllm import ENGINE_NAME, VllmEngine, ensure_vllm_venv


class _Lease:
    """An engine handed out by `SharedDriverFactory`: `close()` gives the driver back instead of killing it."""

    name = ENGINE_NAME

    def __init__(self, engine: VllmEngine, pool: SharedDriverFactory) -> None:
        self._engine: VllmEngine | None = engine
        self._pool = pool

    def __getattr__(self, attr: str) -> Any:  # the Engine protocol, forwarded
        engine = self.__dict__.get("_engine")
        if engine is None:
            raise SpecError("vllm engine", attr, "was used after close()")
        return getattr(engine, attr)

    def close(self) -> None:
        engine, self._engine = self._engine, None
        if engine is not None:
            self._pool.give_back(engine)

    def __enter__(self) -> _Lease:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class SharedDriverFactory:
    """An `EngineFactory` that reuses driver processes across workloads.

    The harness asks for a fresh engine per workload and closes it after; a
    fresh driver would cost ~5 s of vLLM imports each time. Here `close()`
    returns the driver to an idle list and the next call `reset`s it, so a
    campaign pays the start-up once per concurrently used engine. A driver
    that broke (timeout, crash) is dropped, never reused. The venv is built on
    first use if missing (`ensure_vllm_venv`), not when the factory is made.
    """

    def __init__(self, **engine_kwargs: Any) -> None:
        self._kwargs = engine_kwargs
        self._idle: list[VllmEngine] = []
        self._pid = os.getpid()
        atexit.register(self.close_all)

    def __call__(self, config: SchedulerConfig) -> _Lease:
        if os.getpid() != self._pid:  # a forked child must not share its parent's pipes
            self._idle, self._pid = [], os.getpid()
        while self._idle:
            engine = self._idle.pop()
            try:
                engine.reset(config)
                return _Lease(engine, self)
            except SpecError:
                if engine.alive:  # vLLM refused the config; the driver itself is fine
                    self._idle.append(engine)
                    raise
        if "venv" not in self._kwargs:
            ensure_vllm_venv(release=self._kwargs.get("release", DEFAULT_RELEASE))
        return _Lease(VllmEngine(config, **self._kwargs), self)

    def give_back(self, engine: VllmEngine) -> None:
        if engine.alive and os.getpid() == self._pid:
            self._idle.append(engine)
        else:
            engine.close()

    def close_all(self) -> None:
        idle, self._idle = self._idle, []
        for engine in idle:
            engine.close()


def vllm_engine_factory(**engine_kwargs: Any) -> SharedDriverFactory:
    """The factory the harness registry holds for `--engine vllm`."""
    return SharedDriverFactory(**engine_kwargs)
