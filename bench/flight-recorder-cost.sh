#!/usr/bin/env bash
# The flight recorder's cost in a 1 KiB host all-reduce (issue #36: at most 1 %): FlightRecorderCostBenchmark with
# the recorder off (0 entries, the baseline) and on (1024) in the same run, 2 and 4 ranks as threads, ONE_SHOT and
# TWO_SHOT; prints one row per (algorithm, ranks): both means with JMH's 99.9 % error and the on/off difference.
# Raw JMH CSV and log go to bench/tmp/flight-recorder-cost-<stamp>/.
#
#   bench/flight-recorder-cost.sh [extra JMH args; default -f 5 -wi 3 -i 5]
#
# Needs at least 4 idle cores (every rank spins on a core of its own); about 8 minutes with the defaults.
# Builds with `mvn -pl benchmarks -am package` (no install; MVN_FLAGS=-o offline, SKIP_BUILD=1 to reuse a build).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
. bench/jdk25.sh
jdk=$(find_jdk25)
export JAVA25_HOME="$jdk"

if [ "${SKIP_BUILD:-0}" != 1 ]; then
  mvn -q -B ${MVN_FLAGS:-} -pl benchmarks -am package -DskipTests
fi
cp="$(cat benchmarks/target/classpath.txt):$(ls "$root"/benchmarks/target/symmem4j-benchmarks-*.jar | grep -v sources | head -1)"
stamp=$(date -u +%Y%m%dT%H%M%SZ)
out="$root/bench/tmp/flight-recorder-cost-$stamp"
mkdir -p "$out"
args=("$@")
[ ${#args[@]} -gt 0 ] || args=(-f 5 -wi 3 -i 5)

{
  echo "date: $(date -u +%Y-%m-%dT%H:%MZ)"
  echo "machine: $(nproc) cores; $(lscpu | sed -n 's/^Model name: *//p' | head -1); load $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "commit: $(git rev-parse --short HEAD)"
  echo "JDK: $("$jdk/bin/java" -version 2>&1 | sed -n 2p)"
  echo "JMH args: -p bytes=1024 -p algorithm=ONE_SHOT,TWO_SHOT ${args[*]}"
} | tee "$out/header.txt"

"$jdk/bin/java" -cp "$cp" org.openjdk.jmh.Main FlightRecorderCostBenchmark \
  -p bytes=1024 -p algorithm=ONE_SHOT,TWO_SHOT "${args[@]}" -rf csv -rff "$out/jmh.csv" > "$out/jmh.log" 2>&1 \
  || { tail -40 "$out/jmh.log" >&2; exit 1; }

# mean (JMH sample-time score) and its 99.9 % error per (algorithm, ranks, entries); then on vs off
awk -F, '
  { sub(/\r$/, "") } # JMH ends its CSV lines with CR LF
  NR == 1 {
    for (i = 1; i <= NF; i++) { h = $i; gsub(/"/, "", h); col[h] = i }
    next
  }
  {
    for (i = 1; i <= NF; i++) gsub(/"/, "", $i)
    if ($col["Benchmark"] !~ /allReduce$/) next
    key = $col["Param: algorithm"] " " $col["Param: ranks"]
    e = $col["Param: flightRecorderEntries"]
    score[key, e] = $col["Score"]; err[key, e] = $col["Score Error (99.9%)"]
    if (!(key in seen)) { seen[key] = 1; order[++n] = key }
  }
  END {
    printf "| algorithm | ranks | recorder off: mean ± error µs | recorder on (1024): mean ± error µs | on − off |\n"
    printf "|---|---:|---:|---:|---:|\n"
    for (k = 1; k <= n; k++) {
      split(order[k], p, " ")
      off = score[order[k], 0]; on = score[order[k], 1024]
      printf "| %s | %s | %.3f ± %.3f | %.3f ± %.3f | %+.1f %% |\n", p[1], p[2], off, err[order[k], 0], on, \
        err[order[k], 1024], (off > 0 ? 100 * (on - off) / off : 0)
    }
  }' "$out/jmh.csv" | tee "$out/summary.md"
echo "raw: $out/jmh.csv, $out/jmh.log" >&2
