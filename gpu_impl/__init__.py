"""The torch engine: vLLM 0.33.0's V1 scheduler as batched tensor programs, exact down to block ids.

B independent scheduler instances share one padded state (`state.py`), and
one step advances all of them with tensor programs over every request of
every instance; nothing loops over requests or instances in Python. It
runs on CUDA, and on the CPU where no GPU is present (`device.py`).

How one step maps onto vLLM (semantics doc §3-§5, §9):

* `step.py`       schedule(): the preamble, the two passes, C's advance;
* `running.py`    the RUNNING pass: grants by prefix sums after the clamps,
                  block needs by cumulative sums, rounds per allocation failure;
* `preemption.py` FCFS tail victims and PRIORITY victims by a search over the
                  cumulative blocks they free, with refunds and requeueing;
* `waiting.py`    the WAITING pass as a longest admissible prefix;
* `freequeue.py`  the free-block queue as a ring: exact ids for pops and frees;
* `update.py`     update_from_output with the stop checks, and aborts;
* `fake_model.py` the fake model runner's rule, for the batched runner.

Around it, Python glue that makes no decisions: `load.py` (requests into
slots), `materialize.py` (tensors to `SchedulerOutput` / `StateSummary`),
`engine.py` (`TorchEngine`, one instance behind the Engine protocol) and
`batch.py` (`run_batch`, B workloads as B instances of one batch).

It imports only `schedspec.spec` and torch, never the reference: an engine
that borrowed the oracle's code would certify nothing.
"""
