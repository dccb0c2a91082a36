"""vLLM's own scheduler tests as a conformance suite (`schedspec vllm-tests`, docs/vllm-tests.md).

`sdist.py` fetches a release's source distribution through pip's index and
keeps its `tests/`, cached beside the release's venv; `environment.py`
provides what those tests need offline (model configs, pytest, the
`schedspec` package the monitored classes load from); `run.py` runs the
tests twice in the release's venv, plain and with every scheduler
monitored and captured (`live/vllm_tests.py`), and replays each capture on
the reference; `report.py` writes the per-test table. May import `engines`
and `live_replay`.
"""
