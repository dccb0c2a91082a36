"""The torch engine: vLLM's V1 scheduler (0.28.0 to 0.33.0) as batched tensor programs, exact down to block ids.

Each instance follows its config's `vllm_version` (`spec/versions.py`): the
state keeps one bool column per release variant, so one batch mixes releases.

B independent scheduler instances share one padded state (`state.py`), and
one step advances all of them with tensor programs over every request of
every instance; nothing loops over requests or instances in Python. It
runs on CUDA, and on the CPU where no GPU is present (`device.py`).

How one step maps onto vLLM (§3, §4, §5, §9):

* `step.py`       schedule(): the preamble, the two passes, C's advance;
* `running.py`    the RUNNING pass: grants by prefix sums after the clamps,
                  block needs by cumulative sums, rounds per allocation failure;
* `preemption.py` FCFS tail victims and PRIORITY victims by a search over the
                  cumulative blocks they free, with refunds and requeueing;
* `waiting.py`    the WAITING pass as a longest admissible prefix;
* `waiting_cached.py` the WAITING pass under prefix caching, one queue position
                  per round (hits depend on what the requests before took);
* `block_pool.py` BlockPool's allocation and freeing with exact ids, over a
                  ring of free block ids (no caching in the batch);
* `lru_free_queue.py` the LRU free queue (FreeKVCacheBlockQueue) under prefix
                  caching: an order key per block (front pushes, LRU tail
                  appends, touches from the middle), ref counts;
* `prefix_cache.py` block hashes as int64 tensor programs, the cache map,
                  hits and registration;
* `update.py`     update_from_output with the stop checks, draft rollback,
                  stale async output, and aborts;
* `fake_model.py` the fake model runner (with draft verification) and the
                  drafter, for the batched runner;
* `batch_queue.py` async scheduling's queue of steps in flight.

The three features (prefix caching, spec decode, async scheduling), in tensors: spec decode keeps `spec_token_ids` as a
padded `[B, R, k]` tensor and its length; async scheduling keeps the
placeholder, in-flight and stale counters per slot and the steps in
flight in `BatchQueue`; prefix caching keeps the block hashes `[B, R, W]`,
and per block its ref count, free-queue key, cached hash and insertion
order `[B, N]`.

Around it, Python glue that makes no decisions: `load.py` (requests into
slots), `materialize.py` (tensors to `SchedulerOutput` / `StateSummary`),
`engine.py` (`TorchEngine`, one instance behind the Engine protocol) and
`batch.py` (`run_batch`, B workloads as B instances of one batch).

It imports only `schedspec.spec` and torch, never the reference: an engine
that borrowed the oracle's code would certify nothing. The rules it shares
with the reference are tensor twins (`rules.py`, the `*_twin` functions of
`preemption.py`), checked against their rules by
`tests/unit/gpu_impl/test_rule_twins.py`. The heap order runs on the host, so it
calls `spec.rules.heap_key` itself (`load.py`).
"""
