#!/usr/bin/env bash
# Sets hipevolve up on Debian 12 / Ubuntu 24.04: system packages, the AMD static toolchain,
# and a virtual environment in .venv with hipevolve installed editable.
#   bash scripts/setup.sh          # for running hipevolve
#   bash scripts/setup.sh --dev    # also the test and lint tools
#   bash scripts/setup.sh --dev --isolated   # what CI runs: a fresh machine's environment
# A PyTorch already installed in the system Python (for example a ROCm or CUDA build) is reused:
# the environment sees the system's site-packages. With --isolated it sees none of them, so it
# holds only what this script installs (.ci/run uses it to prove that is enough).
set -euo pipefail
cd "$(dirname "$0")/.."

dev=0
venv_flags=(--system-site-packages)
for arg in "$@"; do
  case "$arg" in
    --dev) dev=1 ;;
    --isolated) venv_flags=() ;;
    *) echo "setup.sh: unknown option $arg (use --dev, --isolated)" >&2; exit 2 ;;
  esac
done
extras="[ray]"
[ "$dev" = 1 ] && extras="[ray,dev]"

sudo_cmd=""
[ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"

need=()
command -v g++ >/dev/null || need+=(build-essential)
python3 -c "import venv, ensurepip" 2>/dev/null || need+=(python3-venv)
if [ ${#need[@]} -gt 0 ]; then
  $sudo_cmd bash scripts/apt_get.sh update -q
  $sudo_cmd bash scripts/apt_get.sh install -y -q "${need[@]}"
fi

bash scripts/install_amd_toolchain.sh

[ -x .venv/bin/python ] || python3 -m venv "${venv_flags[@]}" .venv
py=.venv/bin/python
if [ ${#venv_flags[@]} -eq 0 ] && grep -qi "include-system-site-packages *= *true" .venv/pyvenv.cfg; then
  echo "setup.sh: --isolated, but .venv sees the system's site-packages: remove .venv and run again" >&2
  exit 1
fi
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
if [ "$dev" = 1 ] && ! command -v chromium >/dev/null; then
  if . /etc/os-release && [ "${ID:-}" = "debian" ]; then
    $sudo_cmd bash scripts/apt_get.sh update -q
    $sudo_cmd bash scripts/apt_get.sh install -y -q chromium
  else
    $py -m playwright install --with-deps chromium
  fi
fi
# ---- end: headless Chromium for the `evolve report` test

echo "hipevolve is installed in .venv: run .venv/bin/evolve doctor"
