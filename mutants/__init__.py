"""The planted bugs every checker must catch, and the machinery that plants them.

Below `conformance` and `proofs`, which both plant mutants, and above the
reference they rewrite: a mutant names its target by `module:qualname`, and
`planting.applied` imports it only when the mutant is planted.
"""

from .catalogue import CORE_MUTANTS, EQUIVALENT
from .features import FEATURE_MUTANTS
from .planting import Mutant, MutantDrift, applied, canonical_source, mutated_source, resolve, rewrite

MUTANTS: tuple[Mutant, ...] = CORE_MUTANTS + FEATURE_MUTANTS
BY_NAME: dict[str, Mutant] = {m.name: m for m in MUTANTS}

__all__ = [
    "BY_NAME",
    "CORE_MUTANTS",
    "EQUIVALENT",
    "FEATURE_MUTANTS",
    "MUTANTS",
    "Mutant",
    "MutantDrift",
    "applied",
    "canonical_source",
    "mutated_source",
    "resolve",
    "rewrite",
]
