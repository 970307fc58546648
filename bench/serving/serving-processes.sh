#!/usr/bin/env bash
# Serving M models with K workers, three ways in the same run: the router with K worker threads, the router with K
# worker processes (ProcessWorkers: worker JVMs fed through ring buffers, over one shared copy of the weights), and
# DL4J's ParallelInference (BATCHED, K workers per model); requests/s and p50/p99 latency per model under closed-loop
# clients, and the PSS summed over each side's JVMs (see ServingProcessBench for the method and flags). Writes
# bench/results/<date>-serving-processes.txt.
#
#   bench/serving/serving-processes.sh [ServingProcessBench flags, e.g. --workers 8 --models 4 --clients 32 --reps 3]
#
# Defaults (K=2, M=2: an MLP and a CNN, 8 clients, 6 s per model, 1 rep) take about 2 minutes on 2 cores. Builds
# with `package` inside this checkout (never `install`). ND4J is pinned to one thread per op (OMP_NUM_THREADS=1, as
# below; the side JVMs inherit it) so that K workers mean K cores on every side.
set -euo pipefail
. "$(dirname "$0")/../lib/preamble.sh" # cd to the root; sets root, jdk, cp, commit (builds the benchmarks jar)
report="${SERVING_REPORT:-bench/results/$(date -u +%Y-%m-%d)-serving-processes.txt}"
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)  commit: $commit"
  echo "command: bench/serving/serving-processes.sh $*"
  echo "nproc: $(nproc)"; lscpu | head -15; uptime
  echo
  OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} "$jdk/bin/java" --enable-native-access=ALL-UNNAMED \
    --add-modules=jdk.incubator.vector --sun-misc-unsafe-memory-access=allow -cp "$cp" \
    org.symmem4j.benchmarks.ServingProcessBench "$@"
} 2>&1 | tee "$report"
echo "wrote $report" >&2
