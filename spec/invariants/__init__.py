"""The invariants of vLLM 0.33.0's scheduler, each stated once and checked three ways.

`catalogue.INVARIANTS` holds the step invariants as predicates over a
`views.StepView`; `monitor.check_trace` runs them on any engine's trace;
the CrossHair contracts and the Z3 proofs evaluate the very same predicates.
`decisions.DECISIONS` holds the decision invariants (each decision is the
one the rules make at its turn), which only the monitors run: `MONITORED`
is both.
"""

from .catalogue import BY_NAME, INVARIANTS, Invariant
from .decisions import DECISIONS, MONITORED, MONITORED_BY_NAME
from .monitor import Violation, check_trace, first_violation

__all__ = [
    "BY_NAME",
    "DECISIONS",
    "INVARIANTS",
    "MONITORED",
    "MONITORED_BY_NAME",
    "Invariant",
    "Violation",
    "check_trace",
    "first_violation",
]
