#!/usr/bin/env bash
# Build the isolated venv that holds one real vLLM release's scheduler (CPU only).
#
# Why a separate venv: vLLM pins torch (0.33.0: torch==2.14.0) and CUDA stacks,
# while its scheduler runs fine on the CPU build of torch 2.13.0. So vLLM and
# xgrammar are installed with --no-deps, and the 61 modules its import chain
# actually needs come from a pinned list, also with --no-deps. pip must never
# resolve vLLM's own dependencies: that would pull torch 2.14 and CUDA.
# See the shared reference vllm-0.33-on-cpu.md, sections 3-6.
#
# Usage: conformance/vllm_env/setup_vllm_ref.sh [VERSION]
#   VERSION        the vLLM release (default: $VLLM_REF_VERSION, else 0.33.0);
#                  one of the releases in spec/versions.py:RELEASES
#   VLLM_REF_VENV  where to build (default: <repo>/.venv-vllm-ref for 0.33.0,
#                  <repo>/.venv-vllm-<VERSION> for any other release)
#   PYTHON         interpreter to build it from (default: python3.11)
# Every release gets the same torch, xgrammar and pinned list: the import chain
# of 0.28.0-0.33.0 needs the same modules (checked by the smoke test below). A
# release that needed more would list it in vllm-ref-deps-<VERSION>.txt.
# Idempotent: a stamp file inside the venv (.vllm-ref-<VERSION>) makes later
# runs a no-op, so CI can call it every time. About 60-90 s on a fresh machine.
# The one exception: a stamped venv built before coverage was part of it gets
# coverage added (one pip install, a second or two), never a rebuild.
set -euo pipefail
trap 'echo "error: setup_vllm_ref.sh failed (exit $?) at line $LINENO: $BASH_COMMAND" >&2' ERR

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
version="${1:-${VLLM_REF_VERSION:-0.33.0}}"
if [[ ! "$version" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]]; then
    echo "error: vLLM version must look like 0.33.0, got '$version'" >&2
    exit 2
fi
if [[ "$version" == "0.33.0" ]]; then
    default_venv="$repo/.venv-vllm-ref"
else
    default_venv="$repo/.venv-vllm-$version"
fi
venv="${VLLM_REF_VENV:-$default_venv}"
python="${PYTHON:-python3.11}"
stamp="$venv/.vllm-ref-$version"
# coverage.py, for the driver's line coverage of vLLM's scheduler ($SCHEDSPEC_VLLM_COVERAGE, line_coverage.py):
# pinned, since its statement analysis decides which lines count, and --no-deps like everything else here.
# It has no dependencies; its C tracer keeps a measured run within a small factor of an unmeasured one.
coverage_pin="coverage==7.6.1"
has_coverage() {
    compgen -G "$venv/lib/python*/site-packages/coverage-${coverage_pin#coverage==}.dist-info" >/dev/null
}

if [[ -f "$stamp" ]]; then
    # Venvs stamped before coverage joined the list get it now: checking costs a glob, adding it one small wheel.
    if ! has_coverage; then
        "$venv/bin/python" -m pip install -q --no-cache-dir --no-deps "$coverage_pin"
        echo "vLLM $version reference venv: added $coverage_pin"
    fi
    echo "vLLM $version reference venv ready: $venv"
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

echo "Building the vLLM $version reference venv in $venv (about 60-90 s) ..."
"$python" -m venv "$venv"
pip=("$venv/bin/python" -m pip install -q --no-cache-dir)

# 1. torch first, alone: pins to the local CPU wheel (torch==2.13.0+cpu).
"${pip[@]}" torch==2.13.0
# 2. vLLM and xgrammar, never with their dependencies (torch 2.14, CUDA, triton).
"${pip[@]}" --no-deps "vllm==$version" xgrammar==0.2.8
# 3. What the scheduler's import chain needs, pinned, also without resolution.
"${pip[@]}" --no-deps -r "$here/vllm-ref-deps.txt"
if [[ -f "$here/vllm-ref-deps-$version.txt" ]]; then
    "${pip[@]}" --no-deps -r "$here/vllm-ref-deps-$version.txt"
fi
# 3b. The line-coverage tool (see coverage_pin above): optional to the driver, always installed here.
"${pip[@]}" --no-deps "$coverage_pin"

# 4. The scheduler never loads vLLM's compiled CUDA kernels (634 MB).
site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
find "$site/vllm" -name '*.so' -type f -delete

# 5. Prove the venv works before stamping it: CPU torch, importable scheduler.
#    vLLM's harmless import warnings are kept out of sight unless the check fails.
log="$venv/smoke-check.log"
if ! HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 VLLM_LOGGING_LEVEL=ERROR VLLM_CACHE_ROOT="$venv/vllm-cache" \
    "$venv/bin/python" - "$version" >"$log" 2>&1 <<'PY'
import sys
import torch
assert torch.version.cuda is None, f"expected the CPU build of torch, got {torch.__version__}"
import vllm
assert vllm.__version__ == sys.argv[1], (vllm.__version__, sys.argv[1])
from vllm.v1.core.sched.scheduler import Scheduler  # noqa: F401
from vllm.v1.core.sched.async_scheduler import AsyncScheduler  # noqa: F401
import coverage  # noqa: F401
PY
then
    tail -n 20 "$log" >&2
    echo "error: the venv in $venv was built but cannot import vLLM's scheduler (log: $log)" >&2
    exit 1
fi

date -u +%Y-%m-%dT%H:%M:%SZ > "$stamp"
echo "vLLM $version reference venv built: $venv"
