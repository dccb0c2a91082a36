"""No drift: the encoding, run on ints, against the reference's own step on the states the reference reaches.

`core.py` compares the core step through the abstraction (block counts, queue positions, the free count);
`features.py` adds spec decode and prefix caching, reading the free inputs off each step; `async_scheduling.py`
the engine loop's schedule-then-absorb step with one step in flight.
"""
