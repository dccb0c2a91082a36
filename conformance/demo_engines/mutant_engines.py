"""Every catalogue mutant as an engine of its own: `schedspec.conformance.demo_engines.mutant_engines:NAME`.

Planting a mutant rewrites the reference in the process it runs in
(`mutants.planting`), so a planted reference cannot sit beside the pristine
oracle in one process. As an engine it therefore runs in a process of its
own, as every `module:callable` engine does by default (`registry.py`,
`engines/isolated.py`): the factory plants the mutant in that process for
good the first time it is called, and refuses to run in a process that also
holds the oracle of a lock-step run. `schedspec hunt --engine
schedspec.conformance.demo_engines.mutant_engines:Z1-no-refund` hunts it like any engine
(`tests/quality/test_hunt_catches_mutants.py`).
"""

from __future__ import annotations

import sys
from contextlib import ExitStack

from ...mutants import BY_NAME, applied
from ...spec.config import SchedulerConfig
from ...spec.engine import Engine

_PLANTED: dict[str, ExitStack] = {}  # the mutant planted in this process, for good


def _in_own_process() -> bool:
    main = sys.modules.get("__main__")
    return getattr(getattr(main, "__spec__", None), "name", "") == "schedspec.conformance.engines.host"


class PlantedMutant:
    """The reference with one catalogue mutant planted: an engine factory for an isolated engine process."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.__doc__ = BY_NAME[name].description

    def __call__(self, config: SchedulerConfig) -> Engine:
        from ...reference_impl import ReferenceEngine

        if not _in_own_process():
            raise RuntimeError(
                f"the planted mutant {self.name} rewrites the reference of the process it runs in; run it "
                "isolated (the default for a module:callable engine), not --in-process"
            )
        if self.name not in _PLANTED:
            if _PLANTED:
                raise RuntimeError(f"{next(iter(_PLANTED))} is already planted in this process")
            stack = ExitStack()
            stack.enter_context(applied(BY_NAME[self.name]))
            _PLANTED[self.name] = stack
        engine = ReferenceEngine(config)
        engine.name = self.name
        return engine


def __getattr__(name: str) -> PlantedMutant:
    if name in BY_NAME:
        return PlantedMutant(name)
    raise AttributeError(f"no mutant {name!r} in the catalogue")
