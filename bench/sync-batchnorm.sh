#!/usr/bin/env bash
# Synchronized BatchNorm's cost per BatchNorm layer: step time and collective time of the same training through
# the wrapper with and without syncBatchNorm(true), measured in the same run (see SyncBatchNormBench for the
# method and flags); written as markdown to bench/results/<date>-sync-batchnorm.md.
#
#   bench/sync-batchnorm.sh [extra SyncBatchNormBench flags, e.g. --workers 8 --reps 5]
#
# A few minutes. Builds with `package` inside this checkout (never `install`: that would replace the artifacts in
# ~/.m2 that other checkouts use). Run it on an otherwise idle machine.
set -euo pipefail
. "$(dirname "$0")/lib/preamble.sh" # cd to the root; sets root, jdk, cp, commit (builds the benchmarks jar)
report="bench/results/$(date -u +%Y-%m-%d)-sync-batchnorm.md"
{
  echo "# Synchronized BatchNorm: cost per BatchNorm layer"
  echo
  echo "Date: $(date -u '+%Y-%m-%d %H:%M UTC'); commit $commit; command: bench/sync-batchnorm.sh $*"
  echo
  echo '```'
  nproc
  lscpu | head
  echo '```'
  echo
  "$jdk/bin/java" --enable-native-access=ALL-UNNAMED --add-modules=jdk.incubator.vector \
    --sun-misc-unsafe-memory-access=allow -cp "$cp" org.symmem4j.benchmarks.dl4j.SyncBatchNormBench "$@" \
    2>/dev/null | grep -v '^ \|^[A-Z_]*:\|^HAVE_\|^STD version'
} > "$report"
echo "wrote $report" >&2
