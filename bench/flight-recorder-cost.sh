#!/usr/bin/env bash
# The flight recorder's cost in a 1 KiB host all-reduce (issue #36: at most 1 %), paired on one communicator:
# FlightRecorderCostBench runs FlightRecorderOpsBenchmark (the recorder's four calls per collective alone) and
# FlightRecorderPairedBenchmark (one communicator per rank whose recorder is switched off and on between 40 ms blocks,
# off, on, on, off, ... in the same fork, so the communicator's memory and threads are the same in both), then prints
# per (algorithm, ranks) the off and on times, the mean paired difference with its 95 % t and bootstrap intervals, as
# ns and as % of the recorder-off all-reduce, each fork's mean difference, the verdict against 1 %, and the recorder's
# own ns per collective against the all-reduce of the same run.
# The report, JMH's log and the header go to bench/tmp/flight-recorder-cost-<stamp>/.
#
#   [CPUS=1,2,3,4] bench/flight-recorder-cost.sh [FlightRecorderCostBench args; default: --forks 2 --pairs 200
#                  --block-ms 40 --warmups 100, ranks 2 and 4, ONE_SHOT and TWO_SHOT, 1024 bytes]   (about 3.5 minutes)
#
# Where the recorder writes its entry, after the entry barrier's wait or in its shadow (the default, measured
# cheaper on 16 cores: bench/results/2026-11-29-recorder-placement-16core.md), both in one run, one-shot and two-shot on 2 ranks (4 cells x 3 forks x 500 blocks, about 5 minutes):
#   CPUS=1,2,3,4 bench/flight-recorder-cost.sh --ranks 2 --forks 3 --pairs 200 --arrivals after-wait,in-shadow --ops-forks 1
#
# Where the one-shot cost beyond the calls goes (docs/flight-recorder.md, "Where the rest goes"): the default against
# an A/A control (+none: recorder on, none of its calls), the entry's write alone (+arrival) and the waits polling 256
# times without a pause first (+spin256, off and on alike), one-shot on 2 ranks, about 4.5 minutes:
#   CPUS=1,2,3,4 bench/flight-recorder-cost.sh --ranks 2 --algorithms ONE_SHOT --forks 3 --pairs 150 \
#     --arrivals in-shadow,in-shadow+none,in-shadow+arrival,in-shadow+spin256 --ops-forks 1
#
# The recorder against its A/A control (+none), one-shot on 2 ranks, with each fork's JIT verdicts on the recorder's
# calls (bench/results/2026-11-30-recorder-aa-32core.md ran the first part):
#   CPUS=1,2,3,4 bench/flight-recorder-cost.sh --ranks 2 --algorithms ONE_SHOT --forks 8 --pairs 150 --warmups 50 \
#     --arrivals in-shadow,in-shadow+none --ops-forks 1 --jit-log
#   then `bench/shared-state/jit-forks.py .` (the forks write jit-pid*.log into the working directory, the checkout) and
#   remove the jit-pid*.log files
#
# The other storage layouts (+copy, +heap, +padded, +compact, +runs) were removed on 2026-11-30; their runs are in
# bench/results/2026-11-28..30-*recorder*.md.
#
# CPUS pins rank r to the r-th CPU listed (one per rank of the largest --ranks; fewer: nothing is pinned).
# Needs at least 4 idle cores (every rank spins on a core of its own). On a lent machine (no Java there) use the
# shared-state pack instead: bench/shared-state/pack.sh, then the device tool with
#   command='RECORDER_LIMIT=300 bash .device-state/a/run.sh recorder', carry=['.device-state/a']
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

{
  echo "date: $(date -u +%Y-%m-%dT%H:%MZ)"
  echo "machine: $(nproc) cores; $(lscpu | sed -n 's/^Model name: *//p' | head -1); load $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "commit: $(git rev-parse --short HEAD)"
  echo "JDK: $("$jdk/bin/java" -version 2>&1 | sed -n 2p)"
  echo "args: $*; cpus: ${CPUS:-not pinned}"
} | tee "$out/header.txt"

"$jdk/bin/java" --enable-native-access=ALL-UNNAMED --add-modules=jdk.incubator.vector ${CPUS:+-Dsymmem4j.bench.cpus=$CPUS} -cp "$cp" \
  org.symmem4j.benchmarks.FlightRecorderCostBench --out "$out/report.md" "$@" > "$out/jmh.log" 2>&1 \
  || { tail -40 "$out/jmh.log" >&2; exit 1; }
cat "$out/report.md"
echo "raw: $out/jmh.log" >&2
