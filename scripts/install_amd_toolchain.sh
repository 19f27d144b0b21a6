#!/usr/bin/env bash
# Installs the toolchain of hipevolve's `static` backend: an AMD device compile for gfx90a and
# gfx942 on a machine with no AMD GPU and no ROCm (DESIGN.md, Backends). Debian 12 or Ubuntu 24.04;
# runs as root, or through sudo when not root; idempotent (run it again to repair or update).
#
#   sudo scripts/install_amd_toolchain.sh
#   python -c "from hipevolve.verifier.build.amd_static import find_toolchain; print(find_toolchain())"
#   pytest -m amd_static tests/test_amd_static.py
#
# It installs from the distribution: clang-19, lld-19 (clang links the code object with ld.lld),
# llvm-19 (llvm-objdump-19, llvm-cxxfilt-19, llvm-as-19), clang-tools-19 (clang-offload-bundler,
# which a host+device HIP compile needs to bundle the code objects into the shared library), the
# ROCm device libraries and a HIP runtime to link against: libamdhip64 (Debian 12: bookworm's
# libamdhip64-5 5.2.3, installed with apt; its hip_4.2 symbol versions are the ones the 5.7.1
# headers' host code calls). Then it builds the prefix /opt/hipevolve-amd (or the folder given as
# $1, for a throwaway check), which hipevolve.verifier.build.amd_static looks for:
#
#   bin/clang, bin/llvm-objdump, bin/llvm-cxxfilt   links to the LLVM 19 tools
#   bin/hipcc                                       a wrapper around clang-19, as ROCm's hipcc wraps
#                                                   ROCm's clang: the rocm backend's and the
#                                                   exported loader's compile and link (docs/ROCM.md)
#   lib/libamdhip64.so                              link to the installed HIP runtime
#   include/hip/                                    HIP headers only, unpacked with dpkg -x from
#                                                   libamdhip64-dev (Debian 12: trixie's 5.7.1,
#                                                   which has hip_bf16.h; bookworm's 5.2.3 lacks it)
#   share/hip/version                               the HIP version, which clang reads
#   amdgcn/bitcode/                                 links to the device libraries, plus generated
#                                                   oclc_isa_version_<gfx>.bc where missing (below)
#   VERSIONS                                        what was installed and generated
#
# Workaround, gfx942 device library: Debian 12's rocm-device-libs 5.2.3 has no
# oclc_isa_version_942.bc, and clang refuses gfx942 without it ("cannot find ROCm device library
# for gfx942"). That file holds one constant, __oclc_ISA_version = major*1000 + minor*100 +
# stepping: 9402 for gfx942, as in ROCm's own file (the gfx940 file in 5.2.3 holds 9400). We write
# it from LLVM IR with llvm-as-19, with the target's data layout taken from clang-19 itself. The
# 5.2.3 ockl/ocml/opencl libraries only compare the constant with 8000, 8999, 9000 and 9006 and test
# it for equality with 9008 and 9010 (gfx908, gfx90a), so 9402 selects the same code as gfx940's
# file would. The same is done for gfx90a (9010) and gfx950 (9500) when a distribution lacks them.
# Nothing of the system is modified beyond apt installs: trixie is reached through a private apt
# state (its own sources list, lists and cache), never through /etc/apt.
set -euo pipefail

PREFIX=${1:-/opt/hipevolve-amd}
# apt-get, waiting for another apt or dpkg to release its lock instead of failing at once
APT_GET=$(cd "$(dirname "$0")" && pwd)/apt_get.sh
LLVM=19
TRIXIE_LINE='deb http://deb.debian.org/debian trixie main'

missing=()
miss() { missing+=("$1"); echo "MISSING: $1" >&2; }
say() { echo "install_amd_toolchain: $*"; }
finish_if_missing() {
  if ((${#missing[@]})); then
    echo "install_amd_toolchain: FAILED, ${#missing[@]} missing piece(s):" >&2
    printf '  MISSING: %s\n' "${missing[@]}" >&2
    exit 1
  fi
}

if [[ $(id -u) -eq 0 ]]; then
  SUDO=()
elif command -v sudo >/dev/null; then
  SUDO=(sudo)
else
  echo "MISSING: root rights (run as root, or install sudo)" >&2
  exit 1
fi
as_root() { "${SUDO[@]}" "$@"; }

. /etc/os-release
case "${ID}:${VERSION_ID:-}" in
  debian:12) DISTRO=debian12 ;;
  ubuntu:24.04) DISTRO=ubuntu2404 ;;
  *)
    echo "MISSING: a supported system (Debian 12 or Ubuntu 24.04); this is ${PRETTY_NAME:-$ID}" >&2
    exit 1 ;;
esac
say "system: $PRETTY_NAME"

export DEBIAN_FRONTEND=noninteractive
as_root bash "$APT_GET" update -qq || miss "apt-get update of this system's archive failed"

# Pick what this archive has; one MISSING line per absent package.
has_pkg() { [[ -n $(apt-cache policy "$1" 2>/dev/null | awk '/Candidate:/ {print $2}' | grep -v '(none)') ]]; }
want=(clang-$LLVM lld-$LLVM llvm-$LLVM clang-tools-$LLVM)
# The HIP runtime the rocm backend's host code links against: the newest libamdhip64-N here.
HIP_RUNTIME_PKG=$(apt-cache pkgnames libamdhip64- 2>/dev/null | grep -E '^libamdhip64-[0-9]+$' | sort -V | tail -1 || true)
want+=("${HIP_RUNTIME_PKG:-libamdhip64-5}")
HIP_RUNTIME_PKG=${HIP_RUNTIME_PKG:-libamdhip64-5}
if [[ $DISTRO == debian12 ]]; then
  # The keyring update brings trixie's archive keys, which the private apt state below checks.
  want+=(rocm-device-libs debian-archive-keyring)
  DEVICE_LIBS_PKG=rocm-device-libs
else
  # Ubuntu 24.04 (universe) has the 6.0 libraries, built against LLVM 17, as rocm-device-libs-17.
  DEVICE_LIBS_PKG=rocm-device-libs-17
  has_pkg rocm-device-libs-17 || DEVICE_LIBS_PKG=rocm-device-libs
  want+=("$DEVICE_LIBS_PKG")
fi
install=()
for p in "${want[@]}"; do
  if has_pkg "$p"; then install+=("$p"); else miss "package $p is not in this system's apt archive (on Ubuntu, enable 'universe')"; fi
done
finish_if_missing
as_root bash "$APT_GET" install -y -qq --no-install-recommends "${install[@]}" >/dev/null \
  || { miss "apt-get install ${install[*]} failed"; finish_if_missing; }

for tool in clang llvm-objdump llvm-cxxfilt llvm-as ld.lld clang-offload-bundler; do
  [[ -x /usr/lib/llvm-$LLVM/bin/$tool ]] || miss "/usr/lib/llvm-$LLVM/bin/$tool (from clang-$LLVM / llvm-$LLVM / lld-$LLVM / clang-tools-$LLVM)"
done
HIP_RUNTIME=$(dpkg -L "$HIP_RUNTIME_PKG" 2>/dev/null | grep -E '/libamdhip64\.so\.[0-9]+$' | head -1 || true)
[[ -n $HIP_RUNTIME ]] || miss "libamdhip64.so.N in package $HIP_RUNTIME_PKG"
BITCODE_SRC=$(dpkg -L "$DEVICE_LIBS_PKG" 2>/dev/null | grep '/ocml\.bc$' | head -1 | xargs -r dirname)
[[ -n $BITCODE_SRC ]] || miss "ocml.bc in package $DEVICE_LIBS_PKG"
finish_if_missing

WORK=$(mktemp -d)
trap 'as_root rm -rf "$WORK"' EXIT
chmod 755 "$WORK"

# --- libamdhip64-dev: downloaded only (its runtime dependencies are not wanted), unpacked below.
if [[ $DISTRO == debian12 ]]; then
  APT_DIR=$WORK/apt
  mkdir -p "$APT_DIR"/{lists/partial,cache/archives/partial,parts,prefs}
  echo "$TRIXIE_LINE" >"$APT_DIR/sources.list"
  APT_OPTS=(-o "Dir::Etc::SourceList=$APT_DIR/sources.list" -o "Dir::Etc::SourceParts=$APT_DIR/parts"
    -o "Dir::Etc::Preferences=/dev/null" -o "Dir::Etc::PreferencesParts=$APT_DIR/prefs"
    -o "Dir::State::Lists=$APT_DIR/lists" -o "Dir::Cache=$APT_DIR/cache"
    -o "Dir::State::status=/dev/null" -o "APT::Sandbox::User=root")
  as_root bash "$APT_GET" "${APT_OPTS[@]}" update -qq \
    || miss "trixie package index ($TRIXIE_LINE): apt-get update through a private apt state failed (network, or trixie's archive key: upgrade debian-archive-keyring)"
  finish_if_missing
  (cd "$WORK" && as_root bash "$APT_GET" "${APT_OPTS[@]}" download -qq libamdhip64-dev) \
    || miss "libamdhip64-dev from trixie (apt-get download through the private apt state failed)"
else
  has_pkg libamdhip64-dev || miss "package libamdhip64-dev is not in this system's apt archive (on Ubuntu, enable 'universe')"
  finish_if_missing
  (cd "$WORK" && as_root bash "$APT_GET" download -qq libamdhip64-dev) || miss "apt-get download libamdhip64-dev failed"
fi
finish_if_missing
DEB=$(ls "$WORK"/libamdhip64-dev_*.deb)
HIP_DEB_VERSION=$(dpkg-deb -f "$DEB" Version)
dpkg-deb -x "$DEB" "$WORK/hip"
[[ -f $WORK/hip/usr/include/hip/hip_runtime.h ]] || miss "hip/hip_runtime.h in $DEB"
[[ -f $WORK/hip/usr/include/hip/hip_bf16.h ]] || miss "hip/hip_bf16.h in $DEB (libamdhip64-dev $HIP_DEB_VERSION is too old)"
finish_if_missing

# --- The prefix, built aside and swapped in whole, so a failed run leaves the old one working.
NEW=$WORK/prefix
mkdir -p "$NEW"/{bin,lib,include,share/hip,amdgcn/bitcode}
for tool in clang llvm-objdump llvm-cxxfilt clang-offload-bundler; do ln -s "/usr/lib/llvm-$LLVM/bin/$tool" "$NEW/bin/$tool"; done
ln -s "$HIP_RUNTIME" "$NEW/lib/libamdhip64.so"
# hipcc: ROCm's is a wrapper that adds the ROCm paths to its clang; this one adds the prefix's.
# --no-undefined makes the link a check: every symbol the host code calls must be in libamdhip64
# (or libc), as the dynamic loader of a ROCm machine will demand.
write_hipcc() {  # $1: the prefix the wrapper names, $2: where it is written
  cat >"$2" <<HIPCC
#!/bin/sh
# hipcc of hipevolve's AMD prefix (scripts/install_amd_toolchain.sh): clang-$LLVM with the
# prefix's HIP headers, device libraries and HIP runtime; docs/ROCM.md says what it builds.
P=$1
if [ "\$1" = --version ]; then
  echo "HIP version: \$(sed -n 's/^HIP_VERSION_\(MAJOR\|MINOR\|PATCH\)=//p' "\$P/share/hip/version" 2>/dev/null | paste -sd.) (hipevolve-amd: clang-$LLVM, Debian's HIP)"
  exec "\$P/bin/clang" --version
fi
exec "\$P/bin/clang" --rocm-path="\$P" --rocm-device-lib-path="\$P/amdgcn/bitcode" \\
  -D__HIP_PLATFORM_AMD__ -fuse-ld=lld -L"\$P/lib" -Wl,--no-undefined "\$@"
HIPCC
  chmod 755 "$2"
}
write_hipcc "$PREFIX" "$NEW/bin/hipcc"
cp -r "$WORK/hip/usr/include/hip" "$NEW/include/hip"
if [[ -f $WORK/hip/usr/share/hip/version ]]; then
  cp "$WORK/hip/usr/share/hip/version" "$NEW/share/hip/version"
fi
for f in "$BITCODE_SRC"/*.bc; do ln -s "$f" "$NEW/amdgcn/bitcode/"; done

# The data layout clang-19 gives amdgcn, so the generated bitcode links without layout warnings.
LAYOUT=$(echo 'int x;' | /usr/lib/llvm-$LLVM/bin/clang -x c --target=amdgcn-amd-amdhsa -nogpulib \
  -S -emit-llvm -o - - | grep '^target datalayout')
generated=()
for pair in gfx90a:9010 gfx942:9402 gfx950:9500; do
  gfx=${pair%%:*} value=${pair##*:} name=oclc_isa_version_${gfx#gfx}.bc
  [[ -e $NEW/amdgcn/bitcode/$name ]] && continue
  printf '%s\ntarget triple = "amdgcn-amd-amdhsa"\n@__oclc_ISA_version = linkonce_odr protected local_unnamed_addr addrspace(4) constant i32 %s, align 4\n' \
    "$LAYOUT" "$value" >"$WORK/$name.ll"
  /usr/lib/llvm-$LLVM/bin/llvm-as "$WORK/$name.ll" -o "$NEW/amdgcn/bitcode/$name"
  generated+=("$name=$value")
done

pkg_version() { dpkg-query -W -f '${Version}' "$1" 2>/dev/null; }
{
  echo "system: $PRETTY_NAME"
  echo "clang-$LLVM: $(pkg_version clang-$LLVM)"
  echo "lld-$LLVM: $(pkg_version lld-$LLVM)"
  echo "llvm-$LLVM: $(pkg_version llvm-$LLVM)"
  echo "$DEVICE_LIBS_PKG: $(pkg_version "$DEVICE_LIBS_PKG") ($BITCODE_SRC)"
  echo "libamdhip64-dev (headers only): $HIP_DEB_VERSION"
  echo "$HIP_RUNTIME_PKG (the HIP runtime linked against): $(pkg_version "$HIP_RUNTIME_PKG") ($HIP_RUNTIME)"
  echo "generated ISA-version bitcode: ${generated[*]:-none}"
} >"$NEW/VERSIONS"

# Check the result before it replaces anything: a HIP kernel compiles for each target.
cat >"$WORK/probe.hip" <<'EOF'
#include <hip/hip_runtime.h>
#include <hip/hip_bf16.h>
__global__ void probe(const __hip_bfloat16* x, float* y) { y[threadIdx.x] = expf(__bfloat162float(x[threadIdx.x])); }
EOF
compiled=()
for gfx in gfx90a gfx942 gfx950; do
  if "$NEW/bin/clang" -x hip --offload-device-only --no-gpu-bundle-output --offload-arch=$gfx -O3 \
    --rocm-path="$NEW" --rocm-device-lib-path="$NEW/amdgcn/bitcode" -D__HIP_PLATFORM_AMD__ \
    "$WORK/probe.hip" -o "$WORK/probe-$gfx.co" 2>"$WORK/probe-$gfx.log"; then
    compiled+=("$gfx")
  elif [[ $gfx != gfx950 ]]; then
    miss "a working $gfx device compile: $(grep -m1 'error' "$WORK/probe-$gfx.log" || head -1 "$WORK/probe-$gfx.log")"
  else
    say "gfx950: not available with clang-$LLVM (LLVM 20 added it); skipped"
  fi
done
finish_if_missing
echo "targets that compile: ${compiled[*]}" >>"$NEW/VERSIONS"
# ... and a host+device shared library links against the HIP runtime through hipcc (a wrapper
# naming the new prefix, since the final one is not in place yet).
cat >"$WORK/link.hip" <<'LINK'
#include <hip/hip_runtime.h>
__global__ void scale(float* y, float a) { y[threadIdx.x] *= a; }
extern "C" hipError_t launch(float* y, float a, hipStream_t s) {
  hipLaunchKernelGGL(scale, dim3(1), dim3(64), 0, s, y, a);
  return hipGetLastError();
}
LINK
write_hipcc "$NEW" "$WORK/hipcc-probe"
if "$WORK/hipcc-probe" -x hip -shared -fPIC -O3 --offload-arch=gfx942 "$WORK/link.hip" \
  -o "$WORK/link.so" 2>"$WORK/link.log"; then
  echo "host+device link against libamdhip64 through bin/hipcc: ok" >>"$NEW/VERSIONS"
else
  miss "a host+device HIP link against $HIP_RUNTIME: $(grep -m1 'error' "$WORK/link.log" || head -1 "$WORK/link.log")"
fi
finish_if_missing

as_root rm -rf "$PREFIX.old"
[[ -e $PREFIX ]] && as_root mv "$PREFIX" "$PREFIX.old"
as_root mv "$NEW" "$PREFIX"
as_root rm -rf "$PREFIX.old"
as_root chown -R root:root "$PREFIX"
as_root chmod -R a+rX "$PREFIX"
say "installed $PREFIX"
sed 's/^/  /' "$PREFIX/VERSIONS"
