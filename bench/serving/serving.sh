#!/usr/bin/env bash
# Serving benchmark: symmem4j's router (dynamic batching, workers over one shared copy of the weights) against
# DL4J's ParallelInference (BATCHED), same models, same closed-loop clients, same run: requests/s and p50/p99 latency
# for an MLP and a small CNN at each worker count, then the summed PSS of K worker JVMs serving M models (see
# ServingBench for the method and flags). Writes bench/results/<date>-serving.txt.
#
#   bench/serving/serving.sh [ServingBench flags, e.g. --seconds 2 --reps 1 --workers 1,2 --processes 2]
#
# Defaults take about 10 minutes on 2 cores. Builds with `package` inside this checkout (never `install`). Run it
# on an otherwise idle machine; pin ND4J to one thread per worker (OMP_NUM_THREADS=1, as below) so that worker
# counts mean cores.
set -euo pipefail
. "$(dirname "$0")/../lib/preamble.sh" # cd to the root; sets root, jdk, cp, commit (builds the benchmarks jar)
report="${SERVING_REPORT:-bench/results/$(date -u +%Y-%m-%d)-serving.txt}"
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)  commit: $commit"
  echo "command: bench/serving/serving.sh $*"
  echo "nproc: $(nproc)"; lscpu | head -15
  echo
  OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} "$jdk/bin/java" --enable-native-access=ALL-UNNAMED \
    --add-modules=jdk.incubator.vector --sun-misc-unsafe-memory-access=allow -cp "$cp" \
    org.symmem4j.benchmarks.ServingBench "$@"
} 2>&1 | tee "$report"
echo "wrote $report" >&2
