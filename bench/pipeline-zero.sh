#!/usr/bin/env bash
# ZeRO stage 1 (or 2, --stage GRADIENTS, or 3, --stage PARAMETERS) on the pipeline's dp axis: step time and model bytes held of a dp x pp
# pipeline (threads, 1F1B) with and without sharding(ZeroStage.OPTIMIZER_STATE), measured in the same run (see PipelineZeroBench for the method and
# flags); written as markdown to bench/results/<date>-pipeline-zero.md.
#
#   bench/pipeline-zero.sh [extra PipelineZeroBench flags, e.g. --dp 4 --pp 4 --hidden 1024 --reps 5 --stage GRADIENTS]
#
# A few minutes. Needs a core per rank thread (dp x pp) to say anything about speed. Builds with `package` inside this
# checkout (never `install`: that would replace the artifacts in ~/.m2 that other checkouts use). Run it on an
# otherwise idle machine.
set -euo pipefail
. "$(dirname "$0")/lib/preamble.sh" # cd to the root; sets root, jdk, cp, commit (builds the benchmarks jar)
. "$root/bench/lib/cli-report.sh"
cli_report "bench/results/$(date -u +%Y-%m-%d)-pipeline-zero.md" "Pipeline ZeRO stage 1 on the dp axis: step time and model bytes" "bench/pipeline-zero.sh" org.symmem4j.benchmarks.dl4j.PipelineZeroBench "$@"
