#!/usr/bin/env bash
# Builds the CUDA kernels into one fatbin: SASS for sm_80 (A100), sm_90 (H100/H200), sm_100 (B200)
# and PTX for sm_100, so newer GPUs JIT-compile it. Skips the work when the fatbin is newer than the
# source. Without nvcc it says so and exits 0: the rest of the build does not need the kernels.
#   build-fatbin.sh <source.cu> <output dir>
set -euo pipefail
src=$1
out_dir=$2
out="$out_dir/symmem4j.fatbin"
nvcc_bin=$(command -v nvcc || true)
[ -z "$nvcc_bin" ] && [ -x /usr/local/cuda/bin/nvcc ] && nvcc_bin=/usr/local/cuda/bin/nvcc
if [ -z "$nvcc_bin" ]; then
  echo "[kernels] nvcc not found: CUDA kernels NOT built; the jar ships without symmem4j.fatbin (GPU transport: NCCL only)"
  exit 0
fi
mkdir -p "$out_dir"
if [ -f "$out" ] && [ "$out" -nt "$src" ] && [ "$out" -nt "$0" ]; then
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
echo "[kernels] built $out with $("$nvcc_bin" --version | tail -1)"
