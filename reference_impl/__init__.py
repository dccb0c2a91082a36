"""The oracle: vLLM 0.33.0's V1 scheduler as a pure, deterministic, readable Python program."""

from .api import abort, add_request, freeze, initial_state, schedule, thaw, update_from_output
from .engine import ReferenceEngine, derived_engine, simulate
from .scheduler import Scheduler

__all__ = [
    "ReferenceEngine",
    "Scheduler",
    "abort",
    "add_request",
    "derived_engine",
    "freeze",
    "initial_state",
    "schedule",
    "simulate",
    "thaw",
    "update_from_output",
]
