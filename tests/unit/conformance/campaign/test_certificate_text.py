"""A certificate never reads a behaviour no step showed as covered: a zero count says "not exercised", and the
behaviours the campaign missed are named below the table."""

from __future__ import annotations

from schedspec.conformance.campaign.certificate_text import markdown
from schedspec.conformance.campaign.certify import Shard, certify, plan
from schedspec.conformance.engines.engine_spec import parse_engine


def test_zero_count_behaviours_are_flagged_not_exercised(tmp_path):
    tasks = plan(
        parse_engine("reference"), parse_engine("reference"), "blocks", ["budget"], 3, 0, Shard(0, 1), str(tmp_path)
    )
    cert, _ = certify(parse_engine("reference"), tasks=tasks, out_dir=str(tmp_path), workloads=3)
    zero = [b for b, n in cert["coverage"].items() if n == 0]
    seen = [b for b, n in cert["coverage"].items() if n > 0]
    assert zero and seen, cert["coverage"]  # the budget family alone never preempts, and always decodes
    text = markdown(cert)
    for b in zero:
        assert f"| {b} | 0: not exercised |" in text
    for b in seen:
        assert f"| {b} | {cert['coverage'][b]} |" in text
    assert f"Not exercised by this campaign: {', '.join(zero)}." in text
