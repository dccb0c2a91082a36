"""The Z3 encoding of one scheduler step: `step.step` over a `state.Pre` of N slots, giving a `state.Post`.

`step.py` runs the running pass (`running.py`), the waiting pass (`waiting.py`) and the update (`update.py`)
on a `state.StepState`; `order.py` holds the victim key and heap order. The features add their parts behind
concrete flags (`spec_decode.py`, `prefix_caching.py`, `async_scheduling.py`), and `symbolic.py` builds the
symbolic pre-state, its well-formedness and the catalogue's views of a step.
"""
