"""How many workloads of a campaign reach each release variant, by the reference alone.

For each variant rule (`spec/versions.py`) the reference runs every workload of the default campaign at the
release before the rule, and again with the rule taken early ("0.32.0+rule"); a workload reaches the rule when
the two runs part. This is what `schedspec changelog A B` should find between the real releases, and it costs
seconds, not minutes: run it after changing a family, to see that every rule is still reached.

    .venv/bin/python benchmarks/variant_reach.py [--workloads 1000] [--seed 0]
"""

from __future__ import annotations

import argparse
import collections
import dataclasses

from schedspec.conformance.harness.differ import diff
from schedspec.conformance.workloads.families import FAMILIES, at_release, generate
from schedspec.reference_impl import ReferenceEngine
from schedspec.spec.versions import RELEASES, VARIANTS


def _at(version: str):
    """The reference pinned to `version` whatever the workload's config says."""
    return lambda config: ReferenceEngine(dataclasses.replace(config, vllm_version=version))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--workloads", type=int, default=1000)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    families = list(FAMILIES)
    print("| variant | at | workloads reaching it | by family |\n|---|---|---:|---|")
    for v in VARIANTS:
        if v.config_only:
            continue
        before = RELEASES[RELEASES.index(v.since) - 1]
        taken = f"{before}+{v.name}"
        hits: collections.Counter[str] = collections.Counter()
        for k in range(args.workloads):
            family = families[k % len(families)]
            w = at_release(generate(family, args.seed, k // len(families)), before)
            if diff(w, ReferenceEngine, _at(taken), "blocks").divergence is not None:
                hits[family] += 1
        shown = ", ".join(f"{f} {n}" for f, n in hits.most_common())
        print(f"| `{v.name}` | {before} | {sum(hits.values())} | {shown} |", flush=True)


if __name__ == "__main__":
    main()
