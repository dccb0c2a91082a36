"""A live capture, replayed: what `schedspec.live` wrote inside vLLM, judged on the reference.

`capture.py` reads and checks a capture file (`spec/live_capture.schema.json`),
`rebuild.py` turns a session into a workload, `replay.py` replays it on the
reference step by step, `certificate.py` makes its certificate in
`certify`'s formats, and `capture_write.py` writes fixture captures for
tests. May import `engines`, `harness` and `campaign`.
"""
