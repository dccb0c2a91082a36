"""The coverage map's impossible cells, held against thousands of workloads; and the map reached on other seeds.

`coverage_map.IMPOSSIBLE` argues each impossible cell. Here the mixed
families, which draw every knob at once, run 1000 workloads each (250 per
mode) beside 200 of every other family, and no impossible cell may show up.
The default campaign reaching every possible cell is pinned in
tests/campaigns/test_certify_torch.py (seed 0); other seeds, at twice its
size, must reach every one too, so that it is not the luck of one seed.
"""

from collections import Counter

import pytest

from schedspec.conformance.campaign.cell_coverage import POSSIBLE_CELLS, cells
from schedspec.conformance.workloads.families import FAMILIES, generate
from schedspec.conformance.workloads.mixed import MIXED_FAMILIES
from schedspec.reference_impl import simulate


def reached(workloads) -> Counter[str]:
    seen: Counter[str] = Counter()
    for w in workloads:
        seen.update(cells(w, simulate(w).steps))
    return seen


def test_no_impossible_cell_is_reached_in_thousands_of_workloads():
    seen = reached(
        generate(family, 1, index) for family in FAMILIES for index in range(1000 if family in MIXED_FAMILIES else 200)
    )
    assert not sorted(c for c in seen if c not in POSSIBLE_CELLS)
    assert not [c for c in POSSIBLE_CELLS if not seen[c]]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_campaign_of_other_seeds_reaches_every_possible_cell(seed):
    names = list(FAMILIES)
    seen = reached(generate(names[k % len(names)], seed, k // len(names)) for k in range(1800))
    assert not [c for c in POSSIBLE_CELLS if not seen[c]]
