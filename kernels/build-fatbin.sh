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
"$nvcc_bin" -std=c++17 -O3 -fatbin \
  -gencode arch=compute_80,code=sm_80 \
  -gencode arch=compute_90,code=sm_90 \
  -gencode arch=compute_100,code=sm_100 \
  -gencode arch=compute_100,code=compute_100 \
  -o "$out" "$src"
echo "[kernels] built $out with $("$nvcc_bin" --version | tail -1)"
