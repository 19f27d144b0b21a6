#!/usr/bin/env bash
# The GPU session in one call: install hipevolve (and carried wheels) on a GPU machine, run the
# gpu-marked tests, verify the worked example, run the benchmarks named as arguments.
#   bash scripts/gpu_check.sh [bench/timer_agreement.py ...]
# Logs go to $OUT (or ./gpu-logs) so they survive the machine.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-gpu-logs}"
mkdir -p "$out"
export PYTHONUNBUFFERED=1
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
fi
python3 -m pip install -q --no-deps --no-build-isolation -e . >"$out/install.log" 2>&1 \
  || { tail -5 "$out/install.log"; exit 1; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
nvcc --version | tail -1
timeout "${PYTEST_LIMIT_S:-420}" python3 -m pytest -q -m gpu -p no:cacheprovider -rfE \
  --durations=8 --timeout 240 ${PYTEST_ARGS:-} tests 2>&1 | tee "$out/pytest_gpu.log" | tail -40
python3 -m hipevolve verify prompts/examples/softmax_native --task softmax 2>&1 \
  | tee "$out/verify_softmax.log"
for bench in "$@"; do
  echo "== $bench"
  python3 "$bench" 2>&1 | tee "$out/$(basename "$bench" .py).log" | tail -40
done
