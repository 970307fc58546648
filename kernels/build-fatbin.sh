#!/usr/bin/env bash
# Builds CUDA kernels into one fatbin: SASS for sm_80 (A100), sm_90 (H100/H200), sm_100 (B200)
# and PTX for sm_100, so newer GPUs JIT-compile it. Skips the work when the fatbin is newer than the
# source. Writes a manifest line saying whether the jar carries the kernels (the jar plugin puts it
# in the jar's manifest, e.g. Symmem4j-Kernels). Without nvcc it says so loudly and exits 0 — the rest
# of the build does not need the kernels — unless the kernels are required (`mvn -Pcuda`): then it fails.
# Run once for symmem4j's kernels and once for the example user kernel (see pom.xml).
#   build-fatbin.sh <source.cu> <output dir> <manifest fragment> <required: true|false> [fatbin name] [manifest key]
set -euo pipefail
src=$1
out_dir=$2
manifest=$3
required=${4:-false}
name=${5:-symmem4j.fatbin}
key=${6:-Symmem4j-Kernels}
out="$out_dir/$name"
# writes "key: value" into the manifest fragment, replacing an earlier line of the same key
manifest_line() {
  local kept
  kept=$(grep -v "^$key:" "$manifest" 2>/dev/null || true)
  { [ -n "$kept" ] && printf '%s\n' "$kept"; printf '%s: %s\n' "$key" "$1"; } > "$manifest"
}
mkdir -p "$(dirname "$manifest")"
nvcc_bin=$(command -v nvcc || true)
[ -z "$nvcc_bin" ] && [ -x /usr/local/cuda/bin/nvcc ] && nvcc_bin=/usr/local/cuda/bin/nvcc
if [ -z "$nvcc_bin" ]; then
  if [ "$required" = true ]; then
    echo "[kernels] ERROR: nvcc not found, and this build requires the CUDA kernels (-Pcuda): install the" >&2
    echo "[kernels] CUDA toolkit (nvcc on PATH or /usr/local/cuda/bin/nvcc), or build without -Pcuda" >&2
    exit 1
  fi
  rm -f "$out" # a fatbin from an earlier build with nvcc would not match this source
  if [ "$name" = symmem4j.fatbin ]; then
    manifest_line "ABSENT (built without nvcc: the CUDA transport can run only Algorithm.NCCL)"
    what="on GPUs only Algorithm.NCCL can run. Host code is unaffected."
  elif [ "$name" = remote_read_rounds.fatbin ]; then
    manifest_line "ABSENT (built without nvcc: GpuRemoteShardBench measures no in-kernel read)"
    what="GpuRemoteShardBench's in-kernel read cells cannot run (its other cells can)."
  else
    manifest_line "ABSENT (built without nvcc: UserKernelAllReduceExample and CudaUserKernelTest cannot run)"
    what="the user-kernel example (UserKernelAllReduceExample) and its GPU test cannot run."
  fi
  cat <<BANNER
[kernels] ************************************************************************************
[kernels] WARNING: nvcc not found: $(basename "$src") is NOT built.
[kernels] The symmem4j-kernels jar ships WITHOUT $name (its manifest says
[kernels] "$key: ABSENT"): $what
[kernels] To build it: put CUDA's nvcc on PATH (or /usr/local/cuda/bin); -Pcuda makes this an error.
[kernels] ************************************************************************************
BANNER
  exit 0
fi
mkdir -p "$out_dir"
version=$("$nvcc_bin" --version | tail -1)
present() {
  manifest_line "present (SASS sm_80, sm_90, sm_100; PTX compute_100; $version)"
}
if [ -f "$out" ] && [ "$out" -nt "$src" ] && [ "$out" -nt "$0" ]; then
  present
  echo "[kernels] $out is up to date"
  exit 0
fi
usage=$(mktemp)
trap 'rm -f "$usage"' EXIT
"$nvcc_bin" -std=c++17 -O3 -fatbin --resource-usage \
  -gencode arch=compute_80,code=sm_80 \
  -gencode arch=compute_90,code=sm_90 \
  -gencode arch=compute_100,code=sm_100 \
  -gencode arch=compute_100,code=compute_100 \
  -o "$out" "$src" 2> "$usage" || { cat "$usage" >&2; exit 1; }
# No kernel may keep a struct in local memory: the 128-byte by-value copies of the peer and pad
# pointer tables (indexed by a run-time rank) gave every collective a stack frame, and eager
# launches of those kernels were measured at 30-50 us of driver time each. Kernel parameters indexed
# by rank are therefore __grid_constant__. A register spill of a few bytes (sm_100's TWO_SHOT bf16
# spills 4) is tolerated; anything above 16 bytes fails the build.
big_frames=$(awk '/Compiling entry function/ {fn=$0} /bytes stack frame/ {if ($1 + 0 > 16) print fn " -> " $0}' "$usage")
if [ -n "$big_frames" ]; then
  echo "$big_frames" >&2
  rm -f "$out"
  echo "[kernels] a kernel keeps more than 16 bytes in local memory (above): fix it (see build-fatbin.sh)" >&2
  exit 1
fi
present
echo "[kernels] built $out with $version"
