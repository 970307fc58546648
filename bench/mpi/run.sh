#!/usr/bin/env bash
# Builds and runs an Open MPI baseline with 2 ranks on this host: the
# all-reduce (allreduce_bench.c, the default) or the point-to-point ping-pong
# (pingpong_bench.c). The other arguments are forwarded to the program:
#   bench/mpi/run.sh [allreduce|pingpong] [--max-seconds-per-size X] [BYTES ...]
# Results go to stdout; diagnostics to stderr.
set -euo pipefail

program=allreduce
case "${1:-}" in
    allreduce|pingpong) program="$1"; shift ;;
esac

script_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# bench/tmp/ is git-ignored.
build_dir="$(cd "${script_dir}/.." && pwd)/tmp/mpi"
binary="${build_dir}/${program}_bench"

if ! command -v mpicc >/dev/null || ! command -v mpirun >/dev/null; then
    echo "run.sh: installing openmpi-bin libopenmpi-dev" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2
    apt-get install -y -qq openmpi-bin libopenmpi-dev >&2
fi

mkdir -p "${build_dir}"
# Always rebuild: it takes well under a second and never leaves a stale binary.
mpicc -std=c11 -O3 -march=native -Wall -Wextra -o "${binary}" \
    "${script_dir}/${program}_bench.c"

# --allow-run-as-root: Open MPI 4.1 refuses to start as root without it.
# --oversubscribe: no effect with 2 ranks on 2 cores, but keeps a 1-core VM
#   from refusing to start instead of just running slower.
# --mca pml ob1 --mca btl self,vader: pin the shared-memory BTL path (vader,
#   with self for a rank's own data). vader is already the on-node default;
#   naming it (and ob1, the PML that uses BTLs, so UCX cannot take over where
#   it is usable) makes the baseline explicit and keeps TCP/openib out.
mpirun_args=(--allow-run-as-root --oversubscribe -np 2
             --mca pml ob1 --mca btl self,vader)

# Probe core binding with a trivial job: on some VMs/containers hwloc cannot
# bind, and mpirun then aborts before the benchmark starts.
if mpirun "${mpirun_args[@]}" --bind-to core true >/dev/null 2>&1; then
    binding=core
else
    binding=none
    echo "run.sh: --bind-to core failed on this machine; falling back to" \
         "--bind-to none (ranks may migrate between cores)" >&2
fi

exec mpirun "${mpirun_args[@]}" --bind-to "${binding}" "${binary}" "$@"
