"""The data model of the vLLM 0.33.0 V1 scheduler, its invariants, and the rules everyone shares.

Nothing here imports the rest of schedspec: the reference, the torch engine,
the harness and the proofs all stand on this package, never the reverse.
That is why the rules that the monitors or the torch engine need as well as
the reference and Z3 live here (`rules.py`, `state.RequestProperties`):
docs/architecture.md maps each rule to its users.
"""

from .config import SchedulerConfig
from .errors import SpecError
from .output import CachedRequestData, ModelRunnerOutput, NewRequestData, SchedulerOutput
from .request import Request, RequestStatus
from .state import RequestState, SchedulerState
from .trace import FinishedRequest, RequestSummary, StateSummary, StepRecord, Trace
from .workload import Abort, Workload, WorkloadRequest

__all__ = [
    "Abort",
    "CachedRequestData",
    "FinishedRequest",
    "ModelRunnerOutput",
    "NewRequestData",
    "Request",
    "RequestState",
    "RequestStatus",
    "RequestSummary",
    "SchedulerConfig",
    "SchedulerOutput",
    "SchedulerState",
    "SpecError",
    "StateSummary",
    "StepRecord",
    "Trace",
    "Workload",
    "WorkloadRequest",
]
