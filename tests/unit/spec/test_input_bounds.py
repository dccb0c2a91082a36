"""Every number in a workload is finite and fits 64 bits: property-style, over every numeric field.

Hypothesis draws a numeric field of a real workload (config, request,
abort, top level) and puts NaN, an infinity or an integer past 64 bits in
it. `Workload.from_json` must refuse it as a `SpecError` naming that very
field, and the CLI must say so in one line with exit 2, never a traceback
or a run. `arrival_time: NaN` was once accepted, and the reference's own
trace then failed four invariants in `check`.
"""

from __future__ import annotations

import copy
import json
import math
from functools import cache
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from schedspec.cli import main
from schedspec.conformance.workloads.builtin import BUILTIN
from schedspec.spec.config import MAX_GPU_BLOCKS
from schedspec.spec.errors import SpecError
from schedspec.spec.workload import Workload

BAD = [math.nan, math.inf, -math.inf, 2**63, -(2**63) - 1, 10**30]


@cache
def numeric_fields() -> list[tuple[str, tuple[Any, ...]]]:
    found = []

    def walk(x: Any, path: tuple[Any, ...], name: str) -> None:
        if isinstance(x, dict):
            for k, v in x.items():
                walk(v, (*path, k), name)
        elif isinstance(x, list):
            for i, v in enumerate(x):
                walk(v, (*path, i), name)
        elif isinstance(x, (int, float)) and not isinstance(x, bool):
            found.append((name, path))

    for name in ("seed-preemption", "seed-priority", "version-spec-caching"):
        walk(BUILTIN[name]().to_json(), (), name)
    return found


def where(path: tuple[Any, ...]) -> str:
    return "workload" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)


@settings(max_examples=300, derandomize=True, deadline=None)
@given(field=st.sampled_from(numeric_fields()), bad=st.sampled_from(BAD))
def test_a_non_finite_or_oversized_number_is_refused_naming_its_field(field, bad):
    name, path = field
    data = copy.deepcopy(BUILTIN[name]().to_json())
    x = data
    for key in path[:-1]:
        x = x[key]
    x[path[-1]] = bad
    data = json.loads(json.dumps(data))  # as a file would hold it: NaN and Infinity are JSON's extensions
    with pytest.raises(SpecError) as raised:
        Workload.from_json(data)
    assert raised.value.where == where(path), raised.value


@settings(max_examples=12, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(field=st.sampled_from(numeric_fields()), bad=st.sampled_from(BAD))
def test_the_cli_says_it_in_one_line(tmp_path, capsys, field, bad):
    name, path = field
    data = BUILTIN[name]().to_json()
    x = data
    for key in path[:-1]:
        x = x[key]
    x[path[-1]] = bad
    file = tmp_path / "w.json"
    file.write_text(json.dumps(data))
    capsys.readouterr()
    assert main(["simulate", str(file)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and where(path)[len("workload") :] in err, err


def test_sizes_that_would_not_fit_in_memory_are_refused_up_front(tmp_path, capsys):
    """`num_gpu_blocks: 10**12` once ended in a MemoryError traceback; `--workloads 100000000` after 35 s."""
    data = BUILTIN["seed-preemption"]().to_json()
    data["config"]["num_gpu_blocks"] = MAX_GPU_BLOCKS + 1
    (tmp_path / "w.json").write_text(json.dumps(data))
    assert main(["simulate", str(tmp_path / "w.json")]) == 2
    assert "GiB" in capsys.readouterr().err
    assert main(["certify", "--engine", "reference", "--workloads", "100000000", "--out", str(tmp_path / "c")]) == 2
    err = capsys.readouterr().err
    assert "GB" in err and "--shard" in err and not (tmp_path / "c").exists()
