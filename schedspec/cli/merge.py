"""`schedspec merge`: the shard certificates of one campaign, as the certificate of the whole.

A CI matrix certifies with `--shard i/n` on n machines and merges their
folders in a last job (`docs/ci.md`). The merge is
`conformance/campaign/merge.py`; this module is its command line. Its exit
status is certify's for the merged verdict, so the last job of the matrix
is the one CI reads.
"""

from __future__ import annotations

import argparse

from rich.console import Console

from ..conformance.campaign import certify as cert_mod
from ..conformance.campaign.merge import merge
from .argparsing import Subcommands


def cmd_merge(args: argparse.Namespace, console: Console) -> int:
    from ..outdir import OutDir

    out = OutDir(args.out, args.force, "--out", "merge")
    out.prepare(cert_mod.OUTPUT_NAMES, cert_mod.OUTPUT_PATTERNS)
    cert, written = merge(args.shards, out.dir, final_dir=args.out)
    out.record(written)
    console.print(cert_mod.markdown(cert), markup=False, highlight=False, soft_wrap=True)
    shown = ", ".join(out.final(p) for p in written[:3])
    console.print(f"merged {len(args.shards)} shards: {shown}", markup=False, highlight=False)
    return cert_mod.exit_status(cert)


def add_merge_parser(sub: Subcommands) -> None:
    p = sub.add_parser("merge", help="merge the shard certificates of one certify campaign into one certificate")
    p.add_argument("shards", nargs="+", metavar="DIR", help="the --out folders of `certify --shard i/n`, all n of them")
    p.add_argument(
        "--out", required=True, metavar="DIR", help="folder for the merged certificate, JUnit XML and counterexamples"
    )
    p.add_argument("--force", action="store_true", help="replace an earlier merge's outputs in --out")
    p.set_defaults(func=cmd_merge)
