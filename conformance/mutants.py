"""Mutants of the reference: planted bugs that every checker must catch.

A mutant is a one-place change written as a pair of source snippets: the
text to find in one function of the reference, and what to put instead. It
is applied at run time, never by editing files: the function's source is
read, the snippet replaced (it must occur exactly once, so a refactor that
moves the line makes the mutant fail loudly instead of silently testing
nothing), recompiled in its module, and swapped in wherever the original
function object is referenced. The Z3 encoding calls the same `rules`
functions, so a mutant of a rule reaches it too: a bug is written once.

Each mutant names the bug-zoo entry it plants (or the classic mutation
operator) and the invariants expected to trip. A mutant that cannot change
behaviour in the modelled scope is kept, with the argument, in `EQUIVALENT`.
"""

from __future__ import annotations

import importlib
import inspect
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass


@dataclass(frozen=True)
class Mutant:
    name: str
    origin: str  # a bug-zoo id (Z1..Z14) or "classic"
    description: str
    target: str  # "module:qualname", module relative to schedspec
    find: str
    replace: str
    expect: tuple[str, ...]  # invariants (or checks) expected to trip
    # The workload families that exercise it; () for the core scope's nine (`hunt.CORE_FAMILIES`).
    families: tuple[str, ...] = ()
    # A floor under the state machine's search budget, for a bug that only a deep search reaches:
    # a run under `--budget` below it would report a survivor that is really a search too short.
    min_search_s: float = 0.0


MUTANTS: tuple[Mutant, ...] = (
    Mutant("Z1-no-refund", "Z1", "leave an already-scheduled PRIORITY victim in the step's output",
           "reference_impl.scheduler:Scheduler.schedule",
           "if preempted_req in scheduled_running_reqs:", "if False:",
           ("scheduled-subset-running", "budget-conservation")),
    Mutant("Z4-min-tokens-first", "Z4", "min_tokens returns 'not stopped' before the length caps are checked",
           "reference_impl.rules:stop_kind",
           "ite(or_(num_tokens >= max_model_len, num_output_tokens >= max_tokens), LENGTH_CAPPED, NOT_STOPPED)",
           "ite(num_output_tokens < min_tokens, NOT_STOPPED,\n"
           "                   ite(or_(num_tokens >= max_model_len, num_output_tokens >= max_tokens), LENGTH_CAPPED, NOT_STOPPED))",
           ("token-bounds",)),
    Mutant("Z10-admit-after-preemption", "Z10", "run the waiting pass even in a step that preempted",
           "reference_impl.rules:waiting_pass_allowed",
           "return num_preempted == 0", "return True",
           ("no-admission-after-preemption",)),
    Mutant("Z12-leak-on-preempt", "Z12", "preemption returns all but one of the victim's blocks",
           "reference_impl.scheduler:Scheduler._preempt_request",
           "self.kv_cache_manager.free(request)",
           "self.kv_cache_manager.block_pool.free_blocks(reversed(request.block_ids[1:]))\n    request.block_ids = []",
           ("block-conservation",)),
    Mutant("Z13-length-before-stop", "Z13", "check the length caps before EOS and stop tokens",
           "reference_impl.rules:stop_kind",
           "return ite(or_(is_eos, is_stop_token), STOPPED,\n"
           "               ite(or_(num_tokens >= max_model_len, num_output_tokens >= max_tokens), LENGTH_CAPPED, NOT_STOPPED))",
           "return ite(or_(num_tokens >= max_model_len, num_output_tokens >= max_tokens), LENGTH_CAPPED,\n"
           "               ite(or_(is_eos, is_stop_token), STOPPED, NOT_STOPPED))",
           ("stop-token-finishes",)),
    Mutant("Z14-double-free", "Z14", "free a request's tail block twice",
           "reference_impl.kv_cache_manager:KVCacheManager.free",
           "self.block_pool.free_blocks(reversed(request.block_ids))",
           "self.block_pool.free_blocks(list(reversed(request.block_ids)) + request.block_ids[-1:])",
           ("block-conservation",)),
    Mutant("stop-at-L-off-by-one", "classic", "check_stop lets a request reach max_model_len tokens without finishing",
           "reference_impl.rules:stop_kind",
           "num_tokens >= max_model_len", "num_tokens > max_model_len",
           ("token-bounds",)),
    Mutant("threshold-off-by-one", "classic", "the long-prefill threshold lets one token too many through",
           "reference_impl.rules:clamp_to_threshold",
           "threshold, num_new_tokens)", "threshold + 1, num_new_tokens)",
           ("chunk-bounds",)),
    Mutant("budget-off-by-one", "classic", "the running pass may overdraw the token budget by one",
           "reference_impl.rules:running_num_new_tokens",
           "n = min_(n, token_budget)", "n = min_(n, token_budget + 1)",
           ("budget-conservation",)),
    Mutant("blocks-off-by-one", "classic", "allocation asks for one block too many",
           "reference_impl.rules:num_blocks_to_allocate",
           "- num_held_blocks, 0)", "- num_held_blocks + 1, 0)",
           ("blocks-match-tokens", "block-conservation")),
    Mutant("wrong-victim", "classic", "FCFS preempts the oldest running request instead of the newest",
           "reference_impl.rules:fcfs_victim_index",
           "return num_running - 1", "return 0",
           ("fcfs-victim-is-latest",)),
    Mutant("append-not-prepend", "classic", "a preempted request joins the back of the waiting queue",
           "reference_impl.scheduler:Scheduler._preempt_request",
           "self.waiting.prepend_request(request)", "self.waiting.add_request(request)",
           ("no-starvation-after-prepend",)),
    Mutant("missing-free", "classic", "preemption keeps the victim's blocks",
           "reference_impl.scheduler:Scheduler._preempt_request",
           "self.kv_cache_manager.free(request)", "pass",
           ("waiting-holds-nothing", "block-conservation")),
    Mutant("priority-self-preempt-breaks", "classic", "`continue` swapped for `break` after a PRIORITY self-preemption",
           "reference_impl.scheduler:Scheduler.schedule",
           "continue  # it removed itself", "break  # it removed itself",
           ("diff",)),
)

from .feature_mutants import FEATURE_MUTANTS  # noqa: E402 - they are Mutants too

MUTANTS += FEATURE_MUTANTS

EQUIVALENT: dict[str, str] = {
    "clamp-L-off-by-one": "The running-pass clamp n <= L - C - 1 never binds without drafts: a prefill chunk stops at "
                          "T <= L - 1 and a decode has C = T - 1 < L - 1, so L - C instead of L - C - 1 is unobservable "
                          "in the core scope (D4 shows it binding once drafts exist).",
    "Z3": "0.33.0 already caps every running chunk at L - C - 1 and rejects a prompt of L tokens upstream "
          "(workload validation does the same), so 'keep the -1 for prefill chunks' is the pinned code itself.",
    "Z5": "The skip that Z5 re-queues in reverse needs a schedule() while a preempted request's output is still in "
          "flight. vLLM's step_with_batch_queue never does that with a queue of 2 (async, PP = 1): the schedule that "
          "preempts fills the queue, so the same step absorbs the victim's output. So Z5-skipped-reversed survives "
          "every checker that drives the engine loop (monitors, diff) and is live only where a deeper pipeline "
          "(PP > 1, or vLLM's own T16, which schedules twice before updating) leaves two steps in flight: the "
          "state machine's async runs do.",
    "Z8": "vLLM 0.33.0's guard `if scheduled_spec_token_ids and generated_token_ids` is Z8's behaviour: an empty "
          "row for a request with drafts skips the refund. It is unobservable here: drafts are scheduled only on top "
          "of everything else a request is owed (never for a prefill chunk), so the model always samples for such a "
          "request, and a stale row leaves C and P alone either way. The fake model, like vLLM's runner without "
          "failed KV loads, never returns an empty row for it, so neither the guard nor its removal can be told apart.",
    "Z9": "'prepend is a heap push' is vLLM 0.33.0's own PRIORITY queue: the pinned semantics, documented as a "
          "deliberate difference from FCFS, not a mutant.",
}

BY_NAME = {m.name: m for m in MUTANTS}


def _resolve(target: str):
    module_name, _, qualname = target.partition(":")
    module = importlib.import_module(f"schedspec.{module_name}")
    owner, *rest = qualname.split(".")
    if rest:
        cls = getattr(module, owner)
        return module, cls, rest[0], cls.__dict__[rest[0]]
    return module, module, owner, getattr(module, owner)


@contextmanager
def applied(mutant: Mutant) -> Iterator[None]:
    """Swap the mutated function in everywhere the original is referenced; restore on exit."""
    module, owner, attr, original = _resolve(mutant.target)
    source = textwrap.dedent(inspect.getsource(original))
    if source.count(mutant.find) != 1:
        raise RuntimeError(f"mutant {mutant.name}: {mutant.find!r} occurs {source.count(mutant.find)} times "
                           f"in {mutant.target}; the reference changed, update the mutant")
    namespace: dict = {}
    exec(compile(source.replace(mutant.find, mutant.replace), f"<mutant {mutant.name}>", "exec"), vars(module), namespace)
    mutated = namespace[attr]
    patched = [(owner, attr)]
    setattr(owner, attr, mutated)
    for m in list(sys.modules.values()):  # `from .stop import check_stop` holds its own reference
        if getattr(m, "__name__", "").startswith("schedspec") and m is not owner and vars(m).get(attr) is original:
            setattr(m, attr, mutated)
            patched.append((m, attr))
    try:
        yield
    finally:
        for obj, name in patched:
            setattr(obj, name, original)
