"""Mutants of your own: a module of engines derived from the reference (`schedspec mutants --from MODULE`).

The module lists its engines in a module-level dict:

    ENGINES = {"lifo-admission": LifoAdmission, "eager-free": eager_free_factory}

Each value is an engine factory, exactly what `--engine module:callable`
takes: a callable from a `SchedulerConfig` to an engine. The cheap way to
make one is to subclass the reference's `Scheduler`, override the one
decision you want to break (`grant`, `victim_index`, `admission_allowed`,
`check_stop`, `freed_block_to_front`; see `reference_impl/scheduler.py`),
and wrap it with `reference_impl.derived_engine` (`examples/my_mutants.py`).

Optional, per engine, as attributes of the factory:

* `families`: the workload families that exercise it (`conformance/workloads/families.py`;
  default the nine of the core scope), e.g. `("prefix-caching",)`;
* its docstring's first line: the description in the tables.

And optionally a module-level `EQUIVALENT = {"name": "why it cannot be told apart"}`,
for an engine argued to behave as the reference does, as the catalogue's
`mutants.EQUIVALENT` argues its own: such an engine escaping every checker
does not fail the run.

Every mistake in the module is one line naming the module and the entry
(`SpecError("--from", ...)`, exit 2), before any checker runs.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from ...spec.errors import SpecError
from ..workloads.families import FAMILIES
from .subject import Subject


@dataclass(frozen=True)
class UserMutants:
    module: str
    subjects: dict[str, Subject]
    descriptions: dict[str, str]
    equivalent: dict[str, str]


def load(module_name: str, option: str = "--from") -> UserMutants:
    try:
        module = importlib.import_module(module_name)
    except Exception as e:  # noqa: BLE001 - a user's module failing to import is their error, reported
        raise SpecError(option, module_name, f"cannot be imported: {type(e).__name__}: {e}") from None
    engines = getattr(module, "ENGINES", None)
    if not isinstance(engines, dict) or not engines:
        raise SpecError(option, module_name, "has no ENGINES dict of name -> engine factory (docs/engines.md)")
    subjects: dict[str, Subject] = {}
    descriptions: dict[str, str] = {}
    for name, factory in engines.items():
        where = f"{module_name}.ENGINES[{name!r}]"
        if not isinstance(name, str) or not name or any(c.isspace() for c in name):
            raise SpecError(option, f"{module_name}.ENGINES", f"has a bad name {name!r}: a word, no spaces")
        if not callable(factory):
            raise SpecError(option, where, "is not an engine factory (a callable taking a SchedulerConfig)")
        families = _families(getattr(factory, "families", ()), where, option)
        subjects[name] = Subject(name, factory, families)
        descriptions[name] = _first_line(getattr(factory, "__doc__", None)) or name
    equivalent = getattr(module, "EQUIVALENT", {})
    if not isinstance(equivalent, dict) or not all(isinstance(v, str) for v in equivalent.values()):
        raise SpecError(option, f"{module_name}.EQUIVALENT", "must be a dict of engine name -> the argument")
    for name in equivalent:
        if name not in subjects:
            raise SpecError(option, f"{module_name}.EQUIVALENT", f"names {name!r}, which ENGINES does not list")
    return UserMutants(module_name, subjects, descriptions, dict(equivalent))


def _families(value: Any, where: str, option: str) -> tuple[str, ...]:
    families = (value,) if isinstance(value, str) else tuple(value)
    for f in families:
        if f not in FAMILIES:
            raise SpecError(option, f"{where}.families", f"names {f!r}; families are {', '.join(FAMILIES)}")
    return families


def _first_line(doc: str | None) -> str:
    return doc.strip().splitlines()[0].strip() if doc and doc.strip() else ""
