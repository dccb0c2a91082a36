#!/usr/bin/env bash
# The torch engine on a CUDA machine, in one prepared run: conformance on CUDA, then the benchmark.
#
# What it does, from the repository root, writing everything under $OUT (default ./gpu-check-out):
#   1. environment: the machine's own python3, which holds PyTorch with CUDA (nothing is downloaded;
#      the device machines here reach no registry). The project is installed without its dependencies
#      (`pip --no-deps --no-index --target`, or, if that fails, linked into the same folder in the layout
#      pyproject.toml's package-dir gives): torch, hypothesis, rich and pytest come from the image.
#      jsonschema (which spec/jsonio.py imports) is not in that image: it is installed from the
#      wheels in ./.whl when they are there (see PREPARE below).                       -> env.txt
#   2. `schedspec certify --engine torch --level blocks` with SCHEDSPEC_TORCH_DEVICE=cuda on
#      $WORKLOADS workloads (default 900, every family, prefix caching, spec decode and async included; the batched path), then 45 workloads in
#      lock-step mode (TorchEngine, B = 1, on CUDA).                                    -> cert/, certify.txt
#   3. the unit tests of the torch engine, its three features (prefix caching, spec decode, async scheduling) and
#      its columnar Engine API (outputs built when read), with the CUDA-vs-CPU checks.   -> tests.txt
#   4. benchmarks/bench_torch.py on cpu and cuda (the reference and torch-cpu run on this machine's
#      CPU, so the ratios are within one run; vLLM has no venv there and is skipped), the Engine API
#      both with its objects read and columnar.                                          -> bench.md, bench.json
# 7 files come back (the device tool returns at most 8; junit.xml is dropped), plus counterexamples if any.
#
# PREPARE (once, on the development machine, in the repository root; needs pip access):
#   echo /.whl/ >> .git/info/exclude
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
#     -d .whl jsonschema==4.26.0 jsonschema-specifications==2025.9.1 referencing==0.37.0 rpds-py==2026.9.1
#
# RUN (device tool; about 5 of the 15 minutes a task gets, at most 180 + 90 + 120 + 220 s by the stage
# timeouts below; carry the wheels):
#   run(command="bash benchmarks/gpu_check.sh", carry=[".whl"], timeout_s=600)
# On any other CUDA machine: `OUT=/tmp/out bash benchmarks/gpu_check.sh`.
# A dry run without a GPU (checks the script itself):
#   DEV=cpu PYTHON=.venv/bin/python WORKLOADS=90 BENCH_ARGS="--quick --running 1000 --instances 1 64" \
#     OUT=/tmp/gc bash benchmarks/gpu_check.sh
set -uo pipefail

OUT=${OUT:-$PWD/gpu-check-out}
WORKLOADS=${WORKLOADS:-900}
DEV=${DEV:-cuda}
BENCH_ARGS=${BENCH_ARGS:-}
PY=${PYTHON:-python3}
SITE=/tmp/schedspec-site
export PYTHONUNBUFFERED=1
mkdir -p "$OUT"
status=0

# ---- 1. environment ----------------------------------------------------------------------------
{
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
  $PY -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__, "cuda", torch.cuda.is_available())'
} >"$OUT/env.txt" 2>&1
if ! $PY -c 'import jsonschema' 2>/dev/null; then
  if ls .whl/*.whl >/dev/null 2>&1; then
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .whl/*.whl \
      >>"$OUT/env.txt" 2>&1 || { echo "wheel install failed" >>"$OUT/env.txt"; exit 2; }
  else
    echo "jsonschema is missing and no .whl/ was carried: see PREPARE in this script" | tee -a "$OUT/env.txt"
    exit 2
  fi
fi
link_package() {  # the layout pyproject.toml's package-dir gives, as links: needs no setuptools
  rm -rf "$SITE/schedspec" "$SITE"/schedspec-*.dist-info && mkdir -p "$SITE/schedspec" "$SITE/schedspec-0.1.0.dist-info"
  for f in schedspec/*.py; do ln -s "$PWD/$f" "$SITE/schedspec/"; done
  for d in spec reference_impl gpu_impl conformance proofs mutants live; do ln -s "$PWD/$d" "$SITE/schedspec/$d"; done
  printf 'Metadata-Version: 2.1\nName: schedspec\nVersion: 0.1.0\n' >"$SITE/schedspec-0.1.0.dist-info/METADATA"
}
if [ -z "${LINK_ONLY:-}" ] && $PY -m pip install -q --no-deps --no-build-isolation --no-index --upgrade --target "$SITE" . \
    >>"$OUT/env.txt" 2>&1; then
  echo "schedspec installed with pip" >>"$OUT/env.txt"
else
  link_package && echo "schedspec linked into $SITE (pip install unavailable)" >>"$OUT/env.txt"
fi
rm -rf build
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
DEV=$DEV $PY -c 'import os, torch, schedspec.gpu_impl.engine as e
cuda = os.environ["DEV"] == "cuda"
assert torch.cuda.is_available() or not cuda, "no CUDA device"
print("device", torch.cuda.get_device_name(0) if cuda else "cpu (dry run)", "engine", e.TorchEngine.__module__)' \
  >>"$OUT/env.txt" 2>&1 \
  || { cat "$OUT/env.txt"; exit 2; }
cat "$OUT/env.txt"

# ---- 2. conformance on CUDA ------------------------------------------------------------------------
export SCHEDSPEC_TORCH_DEVICE=$DEV
{
  echo "== batched: $WORKLOADS workloads, all families, level blocks, device $DEV"
  timeout 180 $PY -m schedspec.cli certify --engine torch --level blocks --workloads "$WORKLOADS" \
    --seed 5 --out "$OUT/cert" --force
  echo "== lock-step (TorchEngine, one instance on $DEV): 45 workloads"
  SCHEDSPEC_CERTIFY_LOCKSTEP=1 timeout 90 $PY -m schedspec.cli certify --engine torch --level blocks \
    --workloads 45 --seed 6 --out /tmp/cert-lockstep --force | head -8
} 2>&1 | tee "$OUT/certify.txt"
rm -f "$OUT/cert/junit.xml"  # the device tool returns 8 files at most
[ "$(grep -c ': PASSED' "$OUT/certify.txt")" -eq 2 ] || status=1

# ---- 3. the torch engine's unit tests (CUDA vs CPU included) -----------------------------------------
unset SCHEDSPEC_TORCH_DEVICE
timeout 120 $PY -m pytest -q -p no:cacheprovider tests/unit/gpu_impl/test_torch_engine.py tests/unit/gpu_impl/test_torch_features.py \
  tests/unit/gpu_impl/test_torch_columnar.py 2>&1 | tail -15 | tee "$OUT/tests.txt"

# ---- 4. the benchmark ----------------------------------------------------------------------------
# shellcheck disable=SC2086
timeout 220 $PY benchmarks/bench_torch.py --device cpu $([ "$DEV" = cuda ] && echo cuda) --no-vllm $BENCH_ARGS \
  --json "$OUT/bench.json" 2>&1 | tee "$OUT/bench.md"

echo "gpu_check: done (status $status); outputs in $OUT"
exit $status
