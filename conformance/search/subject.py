"""What a mutation hunt runs: the reference with a mutant planted in it, or an engine derived from the reference.

A catalogue mutant (`schedspec.mutants`) rewrites one function of the
reference while it runs (`planting.applied`), and the engine is the
reference itself. A user's mutant (`schedspec mutants --from MODULE`,
`mutants_module.py`) is an engine factory of its own, usually a subclass of
the reference's `Scheduler` that overrides one decision
(`reference_impl/scheduler.py`), and nothing is planted. The checkers that
take an engine (the monitors on its trace, the differ against the pristine
reference, the lock-step state machine) see both the same way.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

from ...mutants import Mutant, applied
from ...spec.engine import EngineFactory


@dataclass(frozen=True)
class Subject:
    name: str
    factory: EngineFactory
    families: tuple[str, ...] = ()  # the workload families that exercise it; () for the core scope's nine
    expect: tuple[str, ...] = ()  # the invariants expected to trip, when known
    mutant: Mutant | None = None  # planted in the reference while the subject runs

    def running(self) -> AbstractContextManager[None]:
        """The context the subject's engine runs in: its mutant planted, or nothing."""
        return applied(self.mutant) if self.mutant is not None else nullcontext()


def of_mutant(mutant: Mutant) -> Subject:
    from ...reference_impl import ReferenceEngine

    return Subject(mutant.name, ReferenceEngine, mutant.families, mutant.expect, mutant)


def subject(what: Mutant | Subject) -> Subject:
    return what if isinstance(what, Subject) else of_mutant(what)
