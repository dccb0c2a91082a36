"""Counterexample files: everything needed to replay a divergence, and nothing else.

A counterexample holds the (shrunk) workload, the two engines by name and
version, the comparison level, and the divergence as found: step, field,
both values and the state before the step. `schedspec replay` re-runs it;
because engines are deterministic (the harness checks that), the replay
shows the same divergence or proves it has been fixed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...spec.errors import SpecError
from ...spec.jsonio import read_json, write_json_atomic
from ...spec.workload import Workload, file_kind
from .compare import LEVELS
from .differ import Divergence

COUNTEREXAMPLE_VERSION = 1
_OTHER_COMMAND = {
    "workload": "run it with `schedspec simulate`",
    "trace": "check its invariants with `schedspec check`",
}


@dataclass(frozen=True)
class Counterexample:
    workload: Workload
    engine_a: str
    engine_b: str
    level: str
    divergence: dict[str, Any]  # Divergence.to_json() at the time it was found
    versions: dict[str, str]
    original: dict[str, Any]  # the workload's name and size before shrinking
    shrink_calls: int = 0

    @classmethod
    def of(
        cls,
        workload: Workload,
        divergence: Divergence,
        engine_a: str,
        engine_b: str,
        level: str,
        versions: dict[str, str],
        original: Workload,
        shrink_calls: int,
    ) -> Counterexample:
        from .shrink import size

        return cls(
            workload,
            engine_a,
            engine_b,
            level,
            divergence.to_json(),
            versions,
            {"name": original.name, "size": list(size(original))},
            shrink_calls,
        )

    def to_json(self) -> dict[str, Any]:
        from .shrink import size

        return {
            "version": COUNTEREXAMPLE_VERSION,
            "kind": "divergence",
            "engines": {"a": self.engine_a, "b": self.engine_b},
            "versions": self.versions,
            "level": self.level,
            "divergence": self.divergence,
            "original": self.original,
            "size": dict(
                zip(
                    ("requests", "aborts", "prompt_tokens", "max_tokens", "arrival_steps", "max_steps"),
                    size(self.workload),
                )
            ),
            "shrink_calls": self.shrink_calls,
            "workload": self.workload.to_json(),
        }

    def write(self, path: str) -> None:
        write_json_atomic(path, self.to_json())

    @classmethod
    def load(cls, path: str) -> Counterexample:
        data = read_json(path)
        where = f"{path}:counterexample"
        kind = file_kind(data)
        if kind != "counterexample":  # a file handed to the wrong command: say what it is, and where it goes
            found = "keys " + ", ".join(data) if isinstance(data, dict) else data
            if kind is None:
                raise SpecError(path, found, "is not a schedspec counterexample (no kind 'divergence')")
            raise SpecError(path, found, f"is a {kind}, not a counterexample; {_OTHER_COMMAND[kind]}")
        if data.get("version") != COUNTEREXAMPLE_VERSION:
            raise SpecError(
                f"{where}.version",
                data.get("version"),
                f"is not a counterexample format this schedspec reads (version {COUNTEREXAMPLE_VERSION})",
            )
        for key in ("engines", "level", "divergence", "workload"):
            if key not in data:
                raise SpecError(f"{where}.{key}", None, "is required")
        if data["level"] not in LEVELS:
            raise SpecError(f"{where}.level", data["level"], f"must be one of {', '.join(LEVELS)}")
        engines = data["engines"]
        if not isinstance(engines, dict) or not all(isinstance(engines.get(k), str) for k in "ab"):
            raise SpecError(f"{where}.engines", engines, "must name engines a and b")
        return cls(
            Workload.from_json(data["workload"], f"{where}.workload"),
            engines["a"],
            engines["b"],
            data["level"],
            data["divergence"],
            data.get("versions", {}),
            data.get("original", {}),
            data.get("shrink_calls", 0),
        )
