"""`schedspec replay-live`: a live capture's workload rebuilt, replayed on the reference, compared step by step.

The capture (`live_capture.py`) says what the real scheduler was given and
what it decided. The workload is rebuilt from the first half so that the
spec's engine loop (`spec/engine.py`) gives the reference exactly the same
inputs:

* the config from the header; each request from its `add` line, arriving in
  the engine-loop step the line falls in; aborts likewise;
* the engine-loop steps from the order of the lines: a step is its arrivals
  and aborts, then at most one `schedule`, then at most one `update`
  (`_batch_queue_steps` may schedule without absorbing, or absorb without
  scheduling; the synchronous loop always does both);
* each request's planted outputs from the `sampled` tokens of the updates,
  placed at the output position `fake_model` samples at
  (`C - drafts - prompt`, C after the step's advance), so a request that is
  preempted and recomputed continues where it stopped;
* spec decode (synchronous): one `(num_drafts, num_accepted)` proposal each
  time the `Drafter` is consulted (the request sampled and runs on): the
  `drafts` line's count, and how many of them lead-match the tokens the model
  then sampled. The scheduler reads only whether a draft is accepted, so the
  captured drafts are compared in the Drafter's spelling: an accepted draft is
  its token, a rejected one the true token + 1 (a real drafter's wrong guess
  is any other id).

Then the reference runs through `spec.engine.steps`, and each of its steps is
compared with the captured one, at the chosen level, on what a capture holds:
the scheduler output, the finished requests and the sampled tokens (the
capture has no state summary, so the level's `state.*` fields are skipped).
The first difference is the divergence, as in the lock-step differ.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...reference_impl.engine import ReferenceEngine
from ...spec.engine import steps
from ...spec.errors import SpecError
from ...spec.trace import StateSummary, StepRecord
from ...spec.workload import Workload
from ..harness.compare import LEVELS, observables
from ..harness.differ import Divergence
from .capture import Capture, Session, read_capture
from .rebuild import rebuild


@dataclass
class LiveReplay:
    capture: Capture
    session: Session
    level: str
    workload: Workload
    captured: list[StepRecord]  # the capture's steps, as records (empty state summaries)
    sampled_known: set[int]  # the steps whose sampled tokens the capture holds
    reference: list[StepRecord] = field(default_factory=list)
    divergence: Divergence | None = None
    steps_compared: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def others(self) -> list[str]:
        """The sessions not replayed: a restarted server's later runs."""
        return [s.id for s in self.capture.sessions if s is not self.session]


def replay_live(path: str, session: str | None = None, level: str = "blocks") -> LiveReplay:
    """Read the capture at `path`, rebuild the session's workload, and replay it on the reference."""
    if level not in LEVELS:
        raise SpecError("--level", level, f"must be one of {', '.join(LEVELS)}")
    capture = read_capture(path)
    chosen = capture.session(session)
    workload, captured, known, notes = rebuild(chosen)
    result = LiveReplay(capture, chosen, level, workload, captured, known, notes=capture.notes + chosen.notes + notes)
    _compare(result)
    return result


def live_fields(r: StepRecord, level: str, sampled: bool) -> list[tuple[str, Any]]:
    """What a captured step can be compared on at `level`: the level's fields less `state.*`, the finished
    requests, and (where the capture has them) the sampled tokens."""
    fields = [(n, v) for n, v in observables(r, level) if not n.startswith("state.")]
    if level == "tokens":
        fields += [(n, v) for n, v in observables(r, "lifecycle") if n.startswith("finished")]
    if sampled:
        fields.append(("model_output", sorted((k, list(v)) for k, v in r.model_output.sampled_token_ids.items() if v)))
    return fields


def _compare(result: LiveReplay) -> None:
    """Run the reference on the rebuilt workload, step by step against the capture; stop at the first difference."""
    sampled_known = result.sampled_known
    run = steps(ReferenceEngine(result.workload.config), result.workload)
    before: StateSummary | None = None
    for rb in result.captured:
        try:
            ra = next(run, None)
        except Exception as e:  # noqa: BLE001 - the reference refusing the capture's inputs is a finding
            result.divergence = Divergence(
                rb.step, "engine a", f"reference raised {type(e).__name__}: {e}", None, before, (None, rb)
            )
            return
        if ra is None:
            result.divergence = Divergence(rb.step, "trace length", "ended", "continues", before, (None, rb))
            return
        result.reference.append(ra)
        fa, fb = (
            live_fields(ra, result.level, rb.step in sampled_known),
            live_fields(rb, result.level, rb.step in sampled_known),
        )
        diff = _first(fa, fb)
        if diff is not None and ra.scheduled and ra.output.num_scheduled_tokens and not rb.scheduled:
            # The caller absorbed an output without calling schedule() first, where the engine loop schedules
            # (its batch queue had room and a request was owed tokens): a way of driving, not a decision.
            result.notes.append(
                f"from step {rb.step} the session is outside what the spec models (an output absorbed with no "
                "schedule() before it, where the engine loop schedules first): the steps before it are replayed, "
                "the rest is not"
            )
            result.reference.pop()
            return
        result.steps_compared += 1
        if diff is not None:
            result.divergence = Divergence(rb.step, diff[0], diff[1], diff[2], before, (ra, rb))
            return
        before = ra.state


def _first(fa: list[tuple[str, Any]], fb: list[tuple[str, Any]]) -> tuple[str, Any, Any] | None:
    """As `compare.first_difference`, on two field lists."""
    for (name_a, va), (name_b, vb) in zip(fa, fb):
        if name_a != name_b:
            return (min(name_a, name_b), name_a, name_b)
        if va != vb:
            return (name_a, va, vb)
    if len(fa) != len(fb):
        extra = (fa if len(fa) > len(fb) else fb)[min(len(fa), len(fb))]
        return (extra[0], extra[1] if len(fa) > len(fb) else "<absent>", extra[1] if len(fb) > len(fa) else "<absent>")
    return None
