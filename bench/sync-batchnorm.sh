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
. "$root/bench/lib/cli-report.sh"
cli_report "bench/results/$(date -u +%Y-%m-%d)-sync-batchnorm.md" "Synchronized BatchNorm: cost per BatchNorm layer" "bench/sync-batchnorm.sh" org.symmem4j.benchmarks.dl4j.SyncBatchNormBench "$@"
