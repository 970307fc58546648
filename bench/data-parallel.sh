#!/usr/bin/env bash
# Data-parallel training benchmark, one run: the same MLP, data and number of optimizer steps trained
# by a single model's fit() on merged batches, DL4J ParallelWrapper AVERAGING(1) and SHARED_GRADIENTS,
# and symmem4j's SymmemParallelWrapper; median of 3 repetitions each, round-robin; written as markdown
# to bench/results/<date>-data-parallel.md and, one row per measured run, as CSV beside it
# (<date>-data-parallel.csv; see DataParallelBench for the method and flags).
#
#   bench/data-parallel.sh [extra DataParallelBench flags, e.g. --steps 300 --reps 1 for a quick look]
#
# About 4 minutes on 2 cores. Run it on an otherwise idle machine: every mode uses all cores. Builds
# with `package` inside this checkout (never `install`: that would replace the artifacts in ~/.m2 that
# other checkouts use). The single model runs at its fastest ND4J thread count (a sweep over 1..cores
# first). For scaling over many cores see bench/cpu-scaling/ (ScalingBench).
set -euo pipefail
. "$(dirname "$0")/lib/preamble.sh" # cd to the root; sets root, jdk, cp, commit (builds the benchmarks jar)
report="bench/results/$(date -u +%Y-%m-%d)-data-parallel.md"
raw="${report%.md}.csv"
rm -f "$raw" # the benchmark appends to an existing CSV; this run's report replaces the day's, so does its CSV

"$jdk/bin/java" --enable-native-access=ALL-UNNAMED --add-modules=jdk.incubator.vector \
  --sun-misc-unsafe-memory-access=allow -cp "$cp" org.symmem4j.benchmarks.dl4j.DataParallelBench \
  --out "$report" --raw "$raw" --commit "$commit" --command "bench/data-parallel.sh $*" "$@"
echo "wrote $report and $raw" >&2
