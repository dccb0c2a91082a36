#!/usr/bin/env bash
# Build the isolated venv that holds the real vLLM 0.33.0 scheduler (CPU only).
#
# Why a separate venv: vLLM 0.33.0 pins torch==2.14.0 and CUDA stacks, while
# its scheduler runs fine on the CPU build of torch 2.13.0. So vLLM and
# xgrammar are installed with --no-deps, and the 61 modules its import chain
# actually needs come from a pinned list, also with --no-deps. pip must never
# resolve vLLM's own dependencies: that would pull torch 2.14 and CUDA.
# See the shared reference vllm-0.33-on-cpu.md, sections 3-6.
#
# Usage: conformance/vllm_env/setup_vllm_ref.sh
#   VLLM_REF_VENV  where to build (default: <repo>/.venv-vllm-ref)
#   PYTHON         interpreter to build it from (default: python3.11)
# Idempotent: a stamp file inside the venv makes later runs a no-op, so CI
# can call it every time. Takes about 60-90 s on a fresh machine.
set -euo pipefail
trap 'echo "error: setup_vllm_ref.sh failed (exit $?) at line $LINENO: $BASH_COMMAND" >&2' ERR

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
venv="${VLLM_REF_VENV:-$repo/.venv-vllm-ref}"
python="${PYTHON:-python3.11}"
stamp="$venv/.vllm-ref-0.33.0"

if [[ -f "$stamp" ]]; then
    echo "vLLM reference venv ready: $venv"
    exit 0
fi

# A venv without the stamp is half-built (an interrupted run): start over.
# Refuse to delete anything that does not look like a venv or an empty path.
if [[ -e "$venv" ]]; then
    if [[ -f "$venv/pyvenv.cfg" ]]; then
        rm -rf -- "$venv"
    else
        echo "error: $venv exists and is not a venv; remove it or set VLLM_REF_VENV" >&2
        exit 1
    fi
fi

echo "Building the vLLM reference venv in $venv (about 60-90 s) ..."
"$python" -m venv "$venv"
pip=("$venv/bin/python" -m pip install -q --no-cache-dir)

# 1. torch first, alone: pins to the local CPU wheel (torch==2.13.0+cpu).
"${pip[@]}" torch==2.13.0
# 2. vLLM and xgrammar, never with their dependencies (torch 2.14, CUDA, triton).
"${pip[@]}" --no-deps vllm==0.33.0 xgrammar==0.2.8
# 3. What the scheduler's import chain needs, pinned, also without resolution.
"${pip[@]}" --no-deps -r "$here/vllm-ref-deps.txt"

# 4. The scheduler never loads vLLM's compiled CUDA kernels (634 MB).
site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
find "$site/vllm" -name '*.so' -type f -delete

# 5. Prove the venv works before stamping it: CPU torch, importable scheduler.
#    vLLM's harmless import warnings are kept out of sight unless the check fails.
log="$venv/smoke-check.log"
if ! HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 VLLM_LOGGING_LEVEL=ERROR VLLM_CACHE_ROOT="$venv/vllm-cache" \
    "$venv/bin/python" - >"$log" 2>&1 <<'PY'
import torch
assert torch.version.cuda is None, f"expected the CPU build of torch, got {torch.__version__}"
import vllm
assert vllm.__version__ == "0.33.0", vllm.__version__
from vllm.v1.core.sched.scheduler import Scheduler  # noqa: F401
PY
then
    tail -n 20 "$log" >&2
    echo "error: the venv in $venv was built but cannot import vLLM's scheduler (log: $log)" >&2
    exit 1
fi

date -u +%Y-%m-%dT%H:%M:%SZ > "$stamp"
echo "vLLM reference venv built: $venv"
