#!/usr/bin/env bash
# apt-get that waits for another apt or dpkg to finish instead of failing at once: setup.sh and
# install_amd_toolchain.sh run every apt-get through it (as root, or under sudo).
#   bash scripts/apt_get.sh install -y -q build-essential
# DPkg::Lock::Timeout makes apt-get wait for dpkg's locks; apt-get update takes the package
# lists' lock without waiting (apt 2.6), so a run that fails on any "Could not get lock" is run
# again every few seconds, saying so once, until APT_LOCK_WAIT_S (default 600) have passed.
set -uo pipefail

wait_s=${APT_LOCK_WAIT_S:-600}
# Milliseconds from EPOCHREALTIME: bash's SECONDS counts whole wall-clock seconds, which gave up
# to a second early.
now_ms() { local t=${EPOCHREALTIME/[.,]/}; echo $((10#${t:0:-3})); }
deadline=$(($(now_ms) + wait_s * 1000))
said=0
log=$(mktemp)
trap 'rm -f "$log"' EXIT
while :; do
  status=0
  apt-get -o DPkg::Lock::Timeout="$wait_s" "$@" 2>"$log" || status=$?
  held=$(grep -m1 "Could not get lock" "$log")
  left=$((deadline - $(now_ms)))
  if [ "$status" -ne 0 ] && [ -n "$held" ] && [ "$left" -gt 0 ]; then
    if [ "$said" = 0 ]; then
      echo "apt_get.sh: ${held#E: }: waiting up to ${wait_s} s for it" >&2
      said=1
    fi
    nap_ms=$((left < 2000 ? left : 2000))
    sleep "$((nap_ms / 1000)).$(printf '%03d' $((nap_ms % 1000)))"
    continue
  fi
  cat "$log" >&2
  exit "$status"
done
