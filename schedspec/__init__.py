"""A formally checked specification of the vLLM 0.33.0 V1 scheduler.

This package is the top layer, above `spec`, `reference_impl`, `gpu_impl`,
`mutants`, `conformance`, `proofs` and `live` (installed as
`schedspec.<folder>`; `docs/architecture.md` has the layer table). It holds:

- `cli/`: the command line, one module per command;
- `render/`: step tables, timelines and kill tables;
- `kill_matrix.py`: the mutant x checker kill matrix, which runs the
  checkers of both `conformance` and `proofs`;
- `outdir.py`: output folders, staged and swapped in whole once a run is complete;
- `pytest_plugin.py`: the `schedspec_certify` fixture.

Nothing outside `cli/` imports `cli/`.
"""
