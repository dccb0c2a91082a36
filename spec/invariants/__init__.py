"""The invariants of vLLM 0.33.0's scheduler, each stated once and checked three ways.

`catalogue.INVARIANTS` holds the step invariants as predicates over a
`views.StepView`; `monitor.check_trace` runs them on any engine's trace;
the CrossHair contracts and the Z3 proofs evaluate the very same predicates.
`decisions.DECISIONS` holds the decision invariants (each decision is the
one the rules make at its turn), which the monitors run by walking the step:
`MONITORED` is both. Six of the eight are stated again on a view's rows
(`decision_rows.DECISION_ROWS`, the walk's twins), which Z3 proves:
`PROVABLE` is what `schedspec prove` takes by name.
"""

from .catalogue import BY_NAME, INVARIANTS, Invariant
from .decision_rows import DECISION_ROWS, DECISION_ROWS_BY_NAME
from .decisions import DECISIONS, MONITORED, MONITORED_BY_NAME
from .monitor import Violation, check_trace, first_violation

PROVABLE = {**BY_NAME, **DECISION_ROWS_BY_NAME}

__all__ = [
    "BY_NAME",
    "DECISIONS",
    "DECISION_ROWS",
    "DECISION_ROWS_BY_NAME",
    "PROVABLE",
    "INVARIANTS",
    "MONITORED",
    "MONITORED_BY_NAME",
    "Invariant",
    "Violation",
    "check_trace",
    "first_violation",
]
