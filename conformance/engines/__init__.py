"""Engines behind the `spec.engine.Engine` protocol, and how a spec string names one.

`registry.py` turns `reference`, `torch`, `vllm==V`, `vllm-source:PATH` or
`module:callable` into a factory; `isolated.py` and `host.py` run an engine
in a process of its own; `vllm.py`, `vllm_pool.py`, `vllm_source.py` and
`vllm_venvs.py` drive a real vLLM release (or a source tree) through the
driver in its venv; `snapshot.py` turns any engine's answers into spec types
or a typed refusal; `lifeline.py` makes every child process die with its
parent. Imports no room: the harness and everything above it build on this.
"""
