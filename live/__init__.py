"""Invariant monitors and trace capture inside a running vLLM, through its scheduler class setting.

`--scheduler-cls schedspec.live.MonitoredScheduler` (or `MonitoredAsyncScheduler`
with async scheduling) runs vLLM's own scheduler, unchanged, with the spec's
monitors judging each step and the run captured as JSON lines for
`schedspec replay-live` (the format: docs/live.md, "What is captured").
Settings: $SCHEDSPEC_LIVE or $SCHEDSPEC_LIVE_CONFIG (`settings.py`).

The scheduler classes import vLLM, so they are resolved lazily (PEP 562): the
pure parts of this package (settings, capture, scope, hashing, the JSON of
vLLM's objects) import without vLLM, and vLLM's `resolve_obj_by_qualname`
finds the classes by `getattr` on this module all the same.
"""

from __future__ import annotations

from typing import Any

__all__ = ["MonitoredAsyncScheduler", "MonitoredScheduler", "MonitoredSchedulerMixin"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from . import scheduler

        return getattr(scheduler, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
