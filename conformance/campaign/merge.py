"""Shard certificates of one campaign, merged into the certificate of the whole.

A CI matrix runs `certify --shard i/n` on n machines; each writes a
certificate of its share. `schedspec merge` makes the one a reader wants:
one verdict, one set of outcomes, one coverage map, every counterexample
and one JUnit file, equal to what a single unsharded run would have
written, apart from its times (`tests/unit/conformance/campaign/test_merge.py`
holds it to that on a 4-shard campaign). One difference is by design: each
shard shrinks up to `--max-counterexamples` divergences of its own, so a
merge can hold more shrunk counterexamples than one run with the same cap.

It refuses, in one line, what would make that a lie:

* shards of different campaigns: another engine or oracle (with their
  versions, so another release), level, seed, workload count, families or
  `--allow-divergence`;
* a shard given twice, or one missing: a merge of 3 of 4 shards would
  read as the campaign and hold three quarters of it.

The verdict is judged again, by certify's own rule (`certify.judged`),
never taken from a shard: an error in any shard makes the whole an error.
Per-workload lists (counterexamples, errors, violations) are put back in
the campaign's order, which `families.workload_name` and the campaign's
arithmetic give: workload k is family k mod F, index k div F.
"""

from __future__ import annotations

import datetime as dt
import os
from collections import Counter
from typing import Any
from xml.etree import ElementTree as ET

from ...spec.errors import SpecError
from ...spec.jsonio import read_json, write_bytes_atomic, write_json_atomic
from ..workloads.families import workload_name
from .cell_coverage import summary as coverage_map_summary
from .certificate_text import markdown
from .certify import OUTPUT_NAMES, judged

# What makes two shards parts of one campaign (beside the shard count, checked on its own).
CAMPAIGN_FIELDS = ("engine", "engine_version", "against", "against_version", "level", "allow_divergence")
CAMPAIGN_KEYS = ("seed", "workloads", "families_requested")
# Per-workload lists, each entry naming its workload: concatenated, then put back in campaign order.
PER_WORKLOAD = ("counterexamples", "errors", "skipped", "invariant_violations", "known_violations")


def read_shard(folder: str) -> dict[str, Any]:
    path = os.path.join(folder, "certificate.json")
    if not os.path.isdir(folder):
        raise SpecError("merge", folder, "is not a folder of a certify run")
    if not os.path.exists(path):
        raise SpecError("merge", folder, "holds no certificate.json: not a certify run, or one that never finished")
    cert = read_json(path)
    if not isinstance(cert, dict) or cert.get("version") != 2 or "campaign" not in cert:
        raise SpecError(path, cert.get("version") if isinstance(cert, dict) else cert, "is not a certificate")
    if not isinstance(cert["campaign"], dict) or "families_requested" not in cert["campaign"]:
        raise SpecError(path, None, "was written by an older schedspec, which did not record the campaign's families")
    # What the merge reads: a certificate cut or edited by hand is one line naming what it lacks, not a KeyError.
    for key in ("engine", "engine_version", "against", "against_version", "level", "levels_checked",
                "allow_divergence", "outcomes", "workloads_run", "steps_compared", "elapsed_s", "time_shares",
                "per_family", "coverage", "coverage_map", "determinism", "vllm_source", "invariants_checked",
                *PER_WORKLOAD):  # fmt: skip
        if key not in cert:
            raise SpecError(f"{path}: {key}", None, "is required in a certificate")
    for key in ("seed", "workloads", "shard"):
        if key not in cert["campaign"]:
            raise SpecError(f"{path}: campaign.{key}", None, "is required in a certificate")
    return cert


def identity(cert: dict[str, Any]) -> dict[str, Any]:
    return {**{k: cert[k] for k in CAMPAIGN_FIELDS}, **{k: cert["campaign"][k] for k in CAMPAIGN_KEYS}}


def check_one_campaign(folders: list[str], certs: list[dict[str, Any]]) -> int:
    """The shard count; a SpecError naming the first difference, a duplicate or a missing shard."""
    first = identity(certs[0])
    for folder, cert in zip(folders, certs):
        for key, value in identity(cert).items():
            if value != first[key]:
                raise SpecError(
                    "merge",
                    folder,
                    f"is another campaign: {key} is {value!r} there, {first[key]!r} in {folders[0]}",
                )
    shards = [tuple(int(x) for x in c["campaign"]["shard"].split("/")) for c in certs]
    n = shards[0][1]
    for folder, cert, (_, parts) in zip(folders, certs, shards):
        if parts != n:
            raise SpecError(
                "merge", folder, f"is shard {cert['campaign']['shard']}, of another split than {folders[0]} (i/{n})"
            )
    seen: dict[int, str] = {}
    for folder, (i, _) in zip(folders, shards):
        if i in seen:
            raise SpecError("merge", folder, f"is shard {i}/{n} again (also {seen[i]})")
        seen[i] = folder
    missing = [i for i in range(n) if i not in seen]
    if missing:
        raise SpecError("merge", f"{len(seen)} of {n} shards", f"misses shard {missing[0]}/{n}: give all {n}")
    return n


def campaign_order(cert: dict[str, Any]) -> dict[str, int]:
    """Each workload's position in the unsharded campaign."""
    c = cert["campaign"]
    families = c["families_requested"]
    return {workload_name(families[k % len(families)], c["seed"], k // len(families)): k for k in range(c["workloads"])}


def merged_certificate(certs: list[dict[str, Any]], out_dir: str) -> dict[str, Any]:
    order = campaign_order(certs[0])

    def ordered(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return sorted(entries, key=lambda e: order.get(e["workload"], len(order)))

    head = certs[0]
    lists = {key: ordered([e for c in certs for e in c[key]]) for key in PER_WORKLOAD}
    for cx in lists["counterexamples"]:
        for key in ("file", "timeline"):
            if cx.get(key):
                cx[key] = os.path.join(out_dir, os.path.basename(cx[key]))
    nondet = ordered([n for c in certs for n in c["determinism"]["nondeterministic"]])
    per_family: dict[str, dict[str, int]] = {}
    for f in head["campaign"]["families_requested"]:
        for c in certs:
            if f in c["per_family"]:
                into = per_family.setdefault(f, Counter())
                into.update(c["per_family"][f])
    reached: Counter[str] = Counter()
    coverage: Counter[str] = Counter()
    for c in certs:
        reached.update(c["coverage_map"]["counts"])
        coverage.update(c["coverage"])
    steps = sum(c["steps_compared"] for c in certs)
    elapsed = max(c["elapsed_s"] for c in certs)  # the shards ran side by side: the wall time is the longest
    total = sum(c["time_shares"]["seconds"] for c in certs)
    parts = list(head["time_shares"]["shares"])
    shares = {
        p: round(sum(c["time_shares"]["seconds"] * c["time_shares"]["shares"][p] for c in certs) / total, 3)
        if total > 0
        else 0.0
        for p in parts
    }
    crashes = [cx for cx in lists["counterexamples"] if cx["crash"]]
    departures = [cx for cx in lists["counterexamples"] if not cx["crash"]]
    families_run = [f for f in head["campaign"]["families_requested"] if f in per_family]
    return {
        **{k: head[k] for k in ("version", "engine", "engine_version", "against", "against_version", "level")},
        "levels_checked": head["levels_checked"],
        "campaign": {
            "seed": head["campaign"]["seed"],
            "workloads": head["campaign"]["workloads"],
            "shard": "0/1",
            "families": families_run,
            "families_requested": head["campaign"]["families_requested"],
            "families_out_of_scope": head["campaign"].get("families_out_of_scope", {}),
            "empty_shard": not families_run,
        },
        "vllm_source": head["vllm_source"],
        "allow_divergence": head["allow_divergence"],
        **judged(
            lists["errors"],
            lists["skipped"],
            departures,
            crashes,
            nondet,
            lists["invariant_violations"],
            head["allow_divergence"],
        ),
        "outcomes": {k: sum(c["outcomes"][k] for c in certs) for k in head["outcomes"]},
        "departures": departures if head["allow_divergence"] else [],
        "workloads_run": sum(c["workloads_run"] for c in certs),
        "steps_compared": steps,
        "elapsed_s": elapsed,
        "steps_per_second": round(steps / elapsed, 1) if elapsed > 0 else None,
        "time_shares": {"seconds": round(total, 2), "shares": shares},
        "per_family": {f: dict(v) for f, v in per_family.items()},
        "coverage": {b: coverage.get(b, 0) for b in head["coverage"]},
        "coverage_map": coverage_map_summary(reached),
        "determinism": {"checked": sum(c["determinism"]["checked"] for c in certs), "nondeterministic": nondet},
        "counterexamples": lists["counterexamples"],
        "errors": lists["errors"],
        "skipped": lists["skipped"],
        "invariant_violations": lists["invariant_violations"],
        "known_violations": lists["known_violations"],
        "invariants_checked": head["invariants_checked"],
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "merged_from": [c["campaign"]["shard"] for c in certs],
    }


def merged_junit(folders: list[str], cert: dict[str, Any], renamed: dict[str, str]) -> bytes:
    """The shards' test cases in one suite, in campaign order, their counterexample paths the merged ones."""
    order = campaign_order(cert)
    cases: list[ET.Element] = []
    counts: Counter[str] = Counter()
    for folder in folders:
        path = os.path.join(folder, "junit.xml")
        try:
            suite = ET.parse(path).getroot()
        except (OSError, ET.ParseError) as e:
            raise SpecError("merge", path, f"cannot be read as JUnit XML: {e}") from None
        for key in ("tests", "failures", "errors", "skipped"):
            counts[key] += int(suite.get(key, "0"))
        cases.extend(suite.findall("testcase"))
    cases.sort(key=lambda case: order.get(case.get("name", ""), len(order)))
    merged = ET.Element("testsuite", name=f"schedspec-certify-{cert['engine']}")
    for key in ("tests", "failures", "errors", "skipped"):
        merged.set(key, str(counts[key]))
    merged.set("time", str(cert["elapsed_s"]))
    for case in cases:
        for element in case.iter():
            for old, new in renamed.items():
                if element.text and old in element.text:
                    element.text = element.text.replace(old, new)
        merged.append(case)
    return ET.tostring(merged, encoding="utf-8", xml_declaration=True)


def merge(folders: list[str], out_dir: str, final_dir: str | None = None) -> tuple[dict[str, Any], list[str]]:
    """Merge the shard folders into `out_dir`; the certificate and every file written.

    `final_dir` is where the files will be read from, if `out_dir` is only
    where they are written first (the CLI's staging folder).
    """
    if not folders:
        raise SpecError("merge", folders, "needs the shard folders to merge")
    certs = [read_shard(f) for f in folders]
    check_one_campaign(folders, certs)
    cert = merged_certificate(certs, final_dir or out_dir)
    renamed: dict[str, str] = {}
    written: list[str] = []
    for folder, shard in zip(folders, certs):
        for cx in shard["counterexamples"]:
            for key in ("file", "timeline"):
                if not cx.get(key):
                    continue
                source = os.path.join(folder, os.path.basename(cx[key]))
                target = os.path.join(out_dir, os.path.basename(cx[key]))
                if not os.path.exists(source):
                    raise SpecError("merge", source, f"is missing: the shard's certificate lists it as {key}")
                with open(source, "rb") as f:
                    write_bytes_atomic(target, f.read())
                renamed[cx[key]] = os.path.join(final_dir or out_dir, os.path.basename(cx[key]))
                written.append(target)
    junit = merged_junit(folders, cert, renamed)
    paths = [os.path.join(out_dir, n) for n in OUTPUT_NAMES]
    write_json_atomic(paths[0], cert)
    write_bytes_atomic(paths[1], markdown(cert).encode())
    write_bytes_atomic(paths[2], junit)
    return cert, paths + written
