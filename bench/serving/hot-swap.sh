#!/usr/bin/env bash
# Hot swap under load: 10,000 requests (1-3 rows, 8 closed-loop client threads) through the router, then through its
# HTTP front, while a new version is published every 500 answered requests and every 4th swap is a rollback; every
# answer checked against the outputs of the version it names; failures, overloaded answers, mixes, freed versions,
# and p50/p99 latency during swaps and without, from the same run (see HotSwapBench for the method and flags).
# Writes bench/results/<date>-hot-swap-10k.md: the report, then the machine and the raw output.
#
#   bench/serving/hot-swap.sh [HotSwapBench flags, e.g. --modes router --requests 2000 --swap-every 100]
#
# About a minute on 2 cores. Builds with `package` inside this checkout (never `install`); BENCH_SKIP_BUILD=1 reuses
# the last build. Exits 1 when a mode fails (a mix, a failed or overloaded request, a version not freed).
set -euo pipefail
. "$(dirname "$0")/../lib/preamble.sh" # cd to the root; sets root, jdk, cp, commit (builds the benchmarks jar)
report="${HOT_SWAP_REPORT:-bench/results/$(date -u +%Y-%m-%d)-hot-swap-10k.md}"
tables=$(mktemp)
raw=$(mktemp)
trap 'rm -f "$tables" "$raw"' EXIT
rc=0
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)  commit: $commit"
  echo "command: bench/serving/hot-swap.sh $*"
  echo "nproc: $(nproc)"; lscpu | head -15
  echo "load average: $(cat /proc/loadavg)"
  echo
  OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} "$jdk/bin/java" --enable-native-access=ALL-UNNAMED \
    --add-modules=jdk.incubator.vector --sun-misc-unsafe-memory-access=allow -cp "$cp" \
    org.symmem4j.benchmarks.HotSwapBench --out "$tables" --commit "$commit" \
    --command "bench/serving/hot-swap.sh $*" "$@" || rc=$?
  echo "load average after: $(cat /proc/loadavg)"
} >"$raw" 2>&1
{
  cat "$tables"
  echo
  echo "## Raw output"
  echo
  echo '```'
  cat "$raw"
  echo '```'
} >"$report"
echo "wrote $report (HotSwapBench exit status $rc)" >&2
exit "$rc"
