#!/usr/bin/env bash
# Sets hipevolve up on Debian 12 / Ubuntu 24.04: system packages, the AMD static toolchain,
# and a virtual environment in .venv with hipevolve installed editable.
#   bash scripts/setup.sh          # for running hipevolve
#   bash scripts/setup.sh --dev    # also the test and lint tools
# A PyTorch already installed in the system Python (for example a ROCm or CUDA build) is reused:
# the environment sees the system's site-packages.
set -euo pipefail
cd "$(dirname "$0")/.."

extras="[ray]"
[ "${1:-}" = "--dev" ] && extras="[ray,dev]"

sudo_cmd=""
[ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"

need=()
command -v g++ >/dev/null || need+=(build-essential)
python3 -c "import venv, ensurepip" 2>/dev/null || need+=(python3-venv)
if [ ${#need[@]} -gt 0 ]; then
  $sudo_cmd apt-get update -q
  $sudo_cmd apt-get install -y -q "${need[@]}"
fi

bash scripts/install_amd_toolchain.sh

[ -x .venv/bin/python ] || python3 -m venv --system-site-packages .venv
py=.venv/bin/python
if ! $py -c "import torch" 2>/dev/null; then
  # No PyTorch yet: the pinned release (a GPU machine should install its ROCm or CUDA build first).
  $py -m pip install -q "torch==2.13.0"
fi
$py -m pip install -q "setuptools>=69" wheel
$py -m pip install -q -e ".${extras}"
# ---- begin: headless Chromium for the `evolve report` test (tests/test_report.py), --dev only
# playwright (a dev extra) drives a Chromium: Debian's own package where apt has a real one, else
# the build playwright downloads (Ubuntu's chromium package is only a snap stub). The test skips
# itself, saying why, when no Chromium is found.
if [ "${1:-}" = "--dev" ] && ! command -v chromium >/dev/null; then
  if . /etc/os-release && [ "${ID:-}" = "debian" ]; then
    $sudo_cmd apt-get update -q
    $sudo_cmd apt-get install -y -q chromium
  else
    $py -m playwright install --with-deps chromium
  fi
fi
# ---- end: headless Chromium for the `evolve report` test

echo "hipevolve is installed in .venv: run .venv/bin/evolve doctor"
