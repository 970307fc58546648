#!/usr/bin/env bash
# Draws the benchmark plots (PNG) into docs/plots/ (where the documentation shows them) from the raw CSVs committed in
# bench/results/ (org.symmem4j.benchmarks.Plots, XChart, headless): DL4J data-parallel throughput
# against the single model and ParallelWrapper, the pipeline's measured bubble against the simulator's,
# the host all-reduce against Open MPI, the GPU all-reduce against NCCL, ZeRO's optimizer-state and
# gradient bytes per worker against the worker count; beside the raw ones, speed-up plots (symmem4j / the best
# baseline: *-speedup.png, linear from zero with the 1x line). Log axes are labelled at every decade, latencies
# in µs, rates from zero. Measures nothing.
#
#   bench/plots.sh [--results DIR] [--out DIR]       (SKIP_BUILD=1: use the jars already built)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
. bench/jdk25.sh
jdk=$(find_jdk25)

if [ "${SKIP_BUILD:-0}" != 1 ]; then
  mvn -q -B -DskipTests package -pl benchmarks -am
fi
cp="$(cat benchmarks/target/classpath.txt):$(ls "$root"/benchmarks/target/symmem4j-benchmarks-*.jar)"
exec "$jdk/bin/java" -Djava.awt.headless=true -cp "$cp" org.symmem4j.benchmarks.Plots "$@"
