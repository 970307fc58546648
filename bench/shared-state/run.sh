#!/usr/bin/env bash
# Runs the shared-state benchmarks of issue #33 on a lent machine's CPUs, in one call of under 8 minutes on 16 cores,
# from what bench/shared-state/pack.sh packed (carry the folder; this script runs from inside it or the checkout):
#   ring    RingBenchmark: 2 processes over /dev/shm, 64 B and 4 KiB messages, throughput and round trip (p50, p99),
#           symmem4j's one-to-one and many-to-one rings against Agrona's over mapped files (~2.5 min)
#   ringcost RingOpCostBenchmark: one message written and read back in one thread, 64 B and 4 KiB, symmem4j's rings
#           (offer, and tryClaim/commit) against Agrona's (write, and tryClaim/commit): the CPU cost per message
#           without cores or scheduling in it (~2 min; not in the default steps)
#   map     MapBenchmark: get/put ops/s and latency percentiles at 2 and 4 processes, symmem4j's SymmetricHashMap
#           against Chronicle Map persisted to /dev/shm and ConcurrentHashMap in one JVM (~3.5 min)
#   cache   ParameterCacheBenchmark: lookup latency against a ConcurrentHashMap of segments (~20 s)
#   switch  ParameterCacheSwitchBench: a 100 MB entry swapped 40 times, the switch as a reader on another rank sees
#           it, against that reader copying the entry (~15 s)
#   recorder FlightRecorderCostBench (issue #36): the flight recorder's cost in a 1 KiB all-reduce, recorder off and
#           on alternating in each JVM fork (FlightRecorderPairedBenchmark, 2 and 4 ranks, ONE_SHOT and TWO_SHOT,
#           RECORDER_ARGS replaces its arguments), and its calls alone (FlightRecorderOpsBenchmark); recorder.md has
#           the paired differences with 95 % intervals (~5.5 min; not in the default steps)
#   bash run.sh [STEP..]       (default: ring map cache switch)
# JMH settings: WI (2) warm-up iterations of W (1) s, I (3) iterations of R (1) s, one fork. Each step is bounded
# by `timeout` (RING_LIMIT 170, MAP_LIMIT 230, CACHE_LIMIT 40, SWITCH_LIMIT 40 s) so the call ends in time.
# Results in $OUT: machine.txt, <step>.txt (JMH's tables), <step>.json (JMH's results), switch.md, summary.txt,
# bench-peer.log (the peer processes' output).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
case "$here" in
  */bench/shared-state) pack="$here/../../.device-state" ;;
  *) pack=$here ;;
esac
out=${OUT:-/tmp/symmem4j-state-out}
mkdir -p "$out"
cd "$out" || exit 1
[ -f "$pack/state.tar.xz" ] || { echo "no state.tar.xz in $pack: run bench/shared-state/pack.sh first and carry it" >&2; exit 1; }
# the runtime and jars, unpacked once per machine into HOME_DIR (default /tmp/symmem4j-state)
home=${HOME_DIR:-/tmp/symmem4j-state}
if [ ! -x "$home/jre/bin/java" ] || [ "$pack/state.tar.xz" -nt "$home/commit" ]; then
  rm -rf "$home" && mkdir -p "$home" && xz -dc "$pack/state.tar.xz" | tar -C "$home" -xf - \
    || { echo "unpacking $pack/state.tar.xz into $home failed" >&2; exit 1; }
fi
pack=$home
{
  date -u; echo "commit: $(cat "$pack/commit" 2>/dev/null || echo unknown)"; nproc; lscpu 2>/dev/null | head -20
  free -g; uptime
} > machine.txt 2>&1
java=("$pack/jre/bin/java" --enable-native-access=ALL-UNNAMED --add-modules=jdk.incubator.vector
      --sun-misc-unsafe-memory-access=allow -Xmx2g -cp "$pack/lib/*")
jmh() { # $1 step, $2 limit, $3 benchmark regex, then JMH flags
  local step=$1 limit=$2 regex=$3; shift 3
  echo "== $step at ${SECONDS}s" | tee -a summary.txt
  timeout -k 10 "$limit" "${java[@]}" org.openjdk.jmh.Main "$regex" -wi "${WI:-2}" -w "${W:-1}" -i "${I:-3}" \
    -r "${R:-1}" -f 1 -rf json -rff "$out/$step.json" "$@" > "$step.txt" 2>&1
  local code=$?
  echo "== $step: exit=$code at ${SECONDS}s" | tee -a summary.txt
  # the result tables JMH prints at the end (partial runs: the per-trial lines)
  sed -n '/^Benchmark /,$p' "$step.txt" >> summary.txt
  [ $code -eq 0 ] || grep -E 'Exception|Error|Result "' "$step.txt" | tail -20 >> summary.txt
  return $code
}
rc=0
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(ring map cache switch)
for step in "${steps[@]}"; do
  case $step in
    ring) jmh ring "${RING_LIMIT:-170}" 'org.symmem4j.benchmarks.RingBenchmark' || rc=1 ;;
    ringcost) jmh ringcost "${RINGCOST_LIMIT:-150}" 'org.symmem4j.benchmarks.RingOpCostBenchmark' || rc=1 ;;
    map) jmh map "${MAP_LIMIT:-230}" 'org.symmem4j.benchmarks.MapBenchmark' || rc=1 ;;
    cache) jmh cache "${CACHE_LIMIT:-40}" 'org.symmem4j.benchmarks.ParameterCacheBenchmark' || rc=1 ;;
    switch)
      echo "== switch at ${SECONDS}s" | tee -a summary.txt
      timeout -k 10 "${SWITCH_LIMIT:-40}" "${java[@]}" org.symmem4j.benchmarks.ParameterCacheSwitchBench \
        --bytes 100000000 --swaps "${SWAPS:-40}" --out "$out/switch.md" > switch.txt 2>&1 || rc=1
      cat switch.txt >> summary.txt ;;
    recorder)
      echo "== recorder at ${SECONDS}s" | tee -a summary.txt
      # shellcheck disable=SC2086
      timeout -k 10 "${RECORDER_LIMIT:-480}" "${java[@]}" org.symmem4j.benchmarks.FlightRecorderCostBench \
        --out "$out/recorder.md" ${RECORDER_ARGS:-} > recorder.txt 2>&1
      code=$?
      [ $code -eq 0 ] || rc=1
      echo "== recorder: exit=$code at ${SECONDS}s" | tee -a summary.txt
      if [ -f recorder.md ]; then cat recorder.md >> summary.txt; else tail -30 recorder.txt >> summary.txt; fi ;;
    *) echo "unknown step $step (expected ring, ringcost, map, cache, switch or recorder)" | tee -a summary.txt; rc=1 ;;
  esac
done
echo "== done at ${SECONDS}s, exit=$rc" | tee -a summary.txt
exit $rc
