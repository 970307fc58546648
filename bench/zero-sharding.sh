#!/usr/bin/env bash
# ZeRO-style and hybrid sharding benchmark: parameter, gradient and optimizer-state bytes and peak
# off-heap bytes per rank, and step time (median, p90), of plain data parallelism (the baseline), ZeRO
# stages 1, 2 and 3 and HSDP (stage 3 in groups of S ranks, replicated across groups: --shard-groups),
# for N = 1, 2, 4 ranks, every run in fresh JVMs; the MLP by default, the CNN with --models mlp,cnn;
# ranks as threads by default, as one JVM per rank with --placements threads,processes. Written as
# markdown to bench/results/<date>-zero-sharding.md and, one row per run, as CSV beside it
# (<date>-zero-sharding.csv, which bench/plots.sh draws from; see ZeroShardingBench for the method).
#
#   bench/zero-sharding.sh [extra ZeroShardingBench flags, e.g. --reps 1 --steps 20 for a quick look]
#
# About 5 minutes on 2 cores. Builds with `package` inside this checkout (never `install`: that
# would replace the artifacts in ~/.m2 that other checkouts use). Run it on an otherwise idle machine.
set -euo pipefail
. "$(dirname "$0")/lib/preamble.sh" # cd to the root; sets root, jdk, cp, commit (builds the benchmarks jar)
report="bench/results/$(date -u +%Y-%m-%d)-zero-sharding.md"
raw="${report%.md}.csv"
rm -f "$raw" # the benchmark appends to an existing CSV; this run's report replaces the day's, so does its CSV

"$jdk/bin/java" --enable-native-access=ALL-UNNAMED --add-modules=jdk.incubator.vector \
  --sun-misc-unsafe-memory-access=allow -cp "$cp" org.symmem4j.benchmarks.dl4j.ZeroShardingBench \
  --out "$report" --raw "$raw" --commit "$commit" --command "bench/zero-sharding.sh $*" "$@"
echo "wrote $report and $raw" >&2
