#!/usr/bin/env bash
# Host all-reduce benchmark, one run: Open MPI MPI_Allreduce (bench/mpi), then JMH — symmem4j
# all-reduce with 2 ranks as threads and as processes, memcpy of the same bytes, and the reduction
# loop's bandwidth — written as markdown to bench/results/<date>-host-allreduce.md, with JMH's raw CSV
# beside it (<date>-host-allreduce-jmh.csv).
#
#   bench/host-allreduce.sh [extra JMH args, e.g. -wi 1 -i 2 for a quick look]
#
# About 25 minutes on 2 cores. Run it on an otherwise idle machine: ranks spin on their cores.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
. bench/jdk25.sh
jdk=$(find_jdk25)

mvn -q -B -DskipTests install
cp="$(cat benchmarks/target/classpath.txt):$(ls "$root"/benchmarks/target/symmem4j-benchmarks-*.jar)"
stamp=$(date -u +%Y%m%dT%H%M%SZ)
out="$root/bench/tmp/host-$stamp"
mkdir -p "$out"

commit=$(git rev-parse --short HEAD)
git diff --quiet HEAD -- . ':!bench/results' || commit="$commit (plus uncommitted changes)"
{
  echo "# Host all-reduce benchmark"
  echo
  echo "- date: $(date -u +%Y-%m-%dT%H:%MZ)"
  echo "- machine: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo) RAM, $(uname -sr)"
  echo "- JDK: $("$jdk/bin/java" -version 2>&1 | sed -n 2p)"
  echo "- commit: $commit"
  echo "- command: \`bench/host-allreduce.sh $*\`"
  echo "- method: JMH sample time (medians), 1 fork, 3 × 1 s warm-up, 5 × 1 s measurement, 16 all-reduces per sample;"
  echo "  rank 0 is the JMH thread, rank 1 a thread (\"threads\") or a second JVM over /dev/shm (\"processes\");"
  echo "  buffers are symmetric memory (in place, no staging copy). Open MPI: see bench/mpi/allreduce_bench.c."
} > "$out/header.md"

echo "== Open MPI baseline" >&2
bench/mpi/run.sh | tee "$out/mpi.txt" >&2

echo "== JMH" >&2
(cd "$out" && "$jdk/bin/java" -cp "$cp" org.openjdk.jmh.Main \
  'HostAllReduceBenchmark|ProcessAllReduceBenchmark|MemcpyBenchmark|ReducerBandwidthBenchmark' \
  -rf csv -rff "$out/jmh.csv" "$@" >&2)

report="bench/results/$(date -u +%Y-%m-%d)-host-allreduce.md"
raw="${report%.md}-jmh.csv"
cp "$out/jmh.csv" "$raw"
echo "- raw JMH results (CSV, every benchmark and parameter): \`$(basename "$raw")\`" >> "$out/header.md"
"$jdk/bin/java" -cp "$cp" org.symmem4j.benchmarks.HostBenchReport "$out/jmh.csv" "$out/mpi.txt" "$out/header.md" > "$report"
echo "wrote $report and $raw" >&2
