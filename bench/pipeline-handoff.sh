#!/usr/bin/env bash
# Pipeline stage-to-stage hand-off latency on the host, one run: Open MPI MPI_Send/MPI_Recv
# ping-pong (bench/mpi/pingpong_bench.c), then JMH — StageLinkHandoffBenchmark with 2 ranks as
# threads and as processes, with default and with spin waits; memcpy of the same bytes; the
# hand-off's copies in one thread — written as markdown to bench/results/<date>-pipeline-handoff-host.md,
# with JMH's raw CSV beside it (<date>-pipeline-handoff-host-jmh.csv).
#
#   bench/pipeline-handoff.sh [extra JMH args, e.g. -wi 1 -i 2 for a quick look]
#
# Builds only the benchmarks module, offline: parallel/ and pipeline/ come from the local Maven
# repository, so run `mvn -DskipTests install` first on a fresh checkout and after changing them
# (the header notes installed jars older than their sources). About 7 minutes on 2 cores. Run it on
# an otherwise idle machine: ranks spin on their cores, and the header records the load average.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
. bench/jdk25.sh
jdk=$(find_jdk25)

# Powers of 4 from 1 KiB to 16 MiB: one stage's activation or gradient for one microbatch. The
# @Param default of StageLinkHandoffBenchmark lists the same sizes.
sizes=(1024 4096 16384 65536 262144 1048576 4194304 16777216)
sizes_csv=$(IFS=,; echo "${sizes[*]}")

mvn -q -B -o -DskipTests -pl benchmarks package
cp="$(cat benchmarks/target/classpath.txt):$(ls "$root"/benchmarks/target/symmem4j-benchmarks-*.jar)"
started=$(date -u +%Y-%m-%dT%H:%MZ)
stamp=$(date -u +%Y%m%dT%H%M%SZ)
out="$root/bench/tmp/handoff-$stamp"
mkdir -p "$out"

commit=$(git rev-parse --short HEAD)
git diff --quiet HEAD -- . ':!bench/results' || commit="$commit (plus uncommitted changes)"
# The measured StageLink and transports are the installed jars on the class path, not the working tree.
installed=""
for module in parallel pipeline; do
  jar=$(tr ':' '\n' < benchmarks/target/classpath.txt | grep "/symmem4j-$module-[^/]*\.jar$" | head -1)
  built=$(date -u -r "$jar" +%Y-%m-%dT%H:%MZ)
  newer=$(find "$module/src/main" -type f -newer "$jar" | wc -l)
  note=""
  if [ "$newer" -gt 0 ]; then
    note=", $newer source files changed since (mvn -DskipTests install to measure them)"
    echo "warning: $newer files under $module/src/main are newer than the installed $jar" >&2
  fi
  installed="$installed${installed:+; }$module jar built $built$note"
done
# CPU time (clock ticks) the whole machine has been busy, and this script's finished children have
# used: their difference over the run is what other jobs took from the benchmark's 2 cores.
machine_busy_ticks() { awk '/^cpu / {print $2 + $3 + $4 + $7 + $8 + $9}' /proc/stat; }
own_children_ticks() { awk '{print $16 + $17}' "/proc/$$/stat"; }
busy_before=$(machine_busy_ticks)
own_before=$(own_children_ticks)
seconds_before=$SECONDS
single_copy=$(ompi_info --param btl vader --level 9 2>/dev/null \
  | sed -n 's/.*"btl_vader_single_copy_mechanism" (current value: "\([^"]*\)".*/\1/p' | head -1)

echo "== Open MPI baseline" >&2
bench/mpi/run.sh pingpong "${sizes[@]}" | tee "$out/mpi-pingpong.txt" >&2

echo "== JMH" >&2
(cd "$out" && "$jdk/bin/java" -cp "$cp" org.openjdk.jmh.Main \
  '\.StageLinkHandoffBenchmark\.|\.MemcpyBenchmark\.|\.HandoffCopiesBenchmark\.' -p "bytes=$sizes_csv" \
  -rf csv -rff "$out/jmh.csv" "$@" >&2)
others_share=$(awk -v busy="$(( $(machine_busy_ticks) - busy_before ))" -v own="$(( $(own_children_ticks) - own_before ))" \
  -v seconds="$(( SECONDS - seconds_before ))" -v cores="$(nproc)" -v hz="$(getconf CLK_TCK)" \
  'BEGIN { share = (busy - own) / (seconds * cores * hz); printf "%.0f%%", 100 * (share < 0 ? 0 : share) }')
echo "other jobs used $others_share of the machine's CPU time during the run" >&2

{
  echo "# Pipeline stage hand-off benchmark (host)"
  echo
  echo "- date: $started"
  echo "- machine: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo) RAM, $(uname -sr)"
  echo "- JDK: $("$jdk/bin/java" -version 2>&1 | sed -n 2p)"
  echo "- commit: $commit"
  echo "- symmem4j modules measured: $installed"
  echo "- command: \`bench/pipeline-handoff.sh $*\`"
  echo "- other jobs' share of the machine's CPU time during the run: $others_share (anything above a few per cent"
  echo "  takes a core from a spinning rank and inflates the numbers several-fold)"
  echo "- method: a 2-rank, 1-stage-per-rank pipeline (\`PipelineShape.of(2, 4)\`), links as \`PipelineExecutor\`"
  echo "  wires them (\`ChannelLayout\`, 1 slot per link). Ping-pong: rank 0 sends its payload on the activation"
  echo "  link 0→1; rank 1 receives, copies the payload out into a private buffer, releases and sends that copy"
  echo "  back on the gradient link 1→0; rank 0 receives, copies out, releases. One way = round trip / 2."
  echo "  Rank 0 checks the echo byte for byte after set-up and after the last measured round trip."
  echo "  JMH sample time (medians), 1 fork; hand-off and copies 2 × 1 s warm-up, 4 × 1 s measurement, memcpy"
  echo "  3 × 1 s and 5 × 1 s (unless the command says otherwise); 16 round trips per hand-off sample. Rank 0 is"
  echo "  the JMH thread, rank 1 a thread (\"threads\", host-in-jvm) or a second JVM over /dev/shm (\"processes\","
  echo "  host-shm), neither pinned to a core. Open MPI: bench/mpi/pingpong_bench.c, blocking"
  echo "  \`MPI_Send\`/\`MPI_Recv\`, 2 processes bound to cores where possible (bench/mpi/run.sh), ob1 + vader BTL"
  echo "  (single-copy mechanism: ${single_copy:-unknown}), median of per-round-trip times / 2."
} > "$out/header.md"

report="bench/results/${started%%T*}-pipeline-handoff-host.md"
raw="${report%.md}-jmh.csv"
cp "$out/jmh.csv" "$raw"
echo "- raw JMH results (CSV, every benchmark and parameter): \`$(basename "$raw")\`" >> "$out/header.md"
"$jdk/bin/java" -cp "$cp" org.symmem4j.benchmarks.HandoffBenchReport \
  "$out/jmh.csv" "$out/mpi-pingpong.txt" "$out/header.md" > "$report"
echo "wrote $report and $raw" >&2
