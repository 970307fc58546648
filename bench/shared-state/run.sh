#!/usr/bin/env bash
# Runs the shared-state benchmarks of issue #33 on a lent machine's CPUs, from the two parts bench/shared-state/pack.sh
# packed (DEST/a: the runtime, our jars, JMH, Agrona, Aeron; DEST/b: Chronicle Map and its libraries), one part carried
# per device call, each with this script beside it. Every call first unpacks the part beside this script into HOME_DIR
# (default /tmp/symmem4j-state, outside the repository, kept while the machine stays warm): part a replaces HOME_DIR,
# part b adds its jars to it. Then it runs the steps named:
#   bash .device-state/a/run.sh unpack                first call, carry ['.device-state/a']: unpacks only
#   bash .device-state/b/run.sh STEP..                second call, carry ['.device-state/b'], while the machine is
#                                                     still warm: unpacks Chronicle Map's jars, then runs the steps
#   bash .device-state/a/run.sh STEP..                one call for the steps without Chronicle Map (all but `map` and
#                                                     `chronicle-p99`; a pack of part a alone, WITHOUT_CHRONICLE=1)
# A step that needs part a or b and does not find it in HOME_DIR fails with what to carry. One device call holds `ring`
# alone (~5.5 min on 16 cores) or `map cache switch` (~4.5 min) or `ring-fill` (~4 min) or `chronicle-p99 map`
# (~5.5 min); `ringcost` fits beside `ring` or `map cache switch`, `chronicle-p99` beside `ring-fill` (~6 min).
#   ring    RingSuite (RingBenchmark): 2 processes over /dev/shm, 64 B and 4 KiB messages, throughput and round trip
#           (p50, p99), symmem4j's one-to-one and many-to-one rings (offer, and tryClaim/commit) against Agrona's over
#           mapped files (write, and tryClaim/commit) and Aeron IPC (exclusive and concurrent publications, media
#           driver embedded in rank 0: SHARED threading, busy spin); RING_KINDS (comma-separated RingPair.Kind names,
#           default all ten) narrows the kinds, e.g. to fit one call: each trial takes ~9.5 s on 16 cores;
#           one-to-one throughput with RING_FORKS (3) forks, the rest RING_OTHER_FORKS (1); RING_WI (2) warm-up and
#           RING_I (4) measured iterations of 1 s. The producer, consumer and Aeron driver threads are pinned to
#           RING_CPUS (default: three distinct cores sharing a last-level cache, not CPU 0's, from lscpu; RING_CPUS=none
#           pins nothing). AERON_TERM_LENGTH: Aeron's IPC term buffer bytes (default 1 MiB, the rings' capacity).
#           RING_ONE_TO_ONE_ONLY=1 leaves the many-to-one kinds out (~6.5 min with the claim kinds, 40 trials).
#           RING_SIZES (default 64,4096) narrows the message sizes; RING_RTT_ONLY=1 measures round trips only, with
#           RING_OTHER_FORKS forks per kind and size (a p50 comparison over forks, e.g. RING_KINDS=SYMMEM_ONE_TO_ONE,
#           AGRONA_ONE_TO_ONE RING_SIZES=64 RING_RTT_ONLY=1 RING_OTHER_FORKS=6: 12 trials, ~2 min).
#           The table (each maker's msg/s with its error and its forks' spread, ratios, p50/p99, and whether the error
#           bars are apart) goes to summary.txt and ring-summary.md. (all kinds: ~9.5 min, over one call's 10 min
#           with the unpacking: split it with RING_ONE_TO_ONE_ONLY=1, then RING_KINDS=<the many-to-one kinds>)
#   ring-fill RingFillSuite (RingFillBenchmark): ring throughput, 2 processes, with the ring HELD at fixed fill levels
#           (a credit window with a floor: the producer stops at T+2B messages in the ring, the consumer reads batches
#           of B=64 only while T remain; no empty ring, no full ring, so the two regimes of `ring`'s many-to-one forks
#           cannot occur), symmem4j's rings (offer, tryClaim) against Agrona's (write, tryClaim), one-to-one and
#           many-to-one, in one JMH run; table with each ring's msg/s, error, forks' lowest–highest mean and spread, and
#           the verdicts (error bars apart?) in ring-fill-summary.md. RINGFILL_FORKS (2) forks per trial,
#           RINGFILL_WI (1) warm-up and RINGFILL_I (3) measured iterations of 1 s, RINGFILL_SIZES (64; e.g. 64,256,1024
#           for ~3× the time), RINGFILL_FILLS (25,75 % of the messages the ring holds), RINGFILL_KINDS (comma-separated
#           RingPair.Kind names, default the 8 of symmem4j and Agrona), RINGFILL_GC=1 adds JMH's GC profiler. The two
#           threads are pinned to RINGFILL_CPUS (default: two distinct cores sharing a last-level cache, not CPU 0's;
#           none pins nothing). Defaults: 16 trials × 2 forks of ~7.5 s, ~4 min on 16 cores (RINGFILL_LIMIT 330 s;
#           RINGFILL_FORKS=3 takes ~6 min: a call of its own, with RINGFILL_LIMIT=420)
#   ring-paired RingPairedSuite (RingFillBenchmark in paired mode): symmem4j's rings against Agrona's with BOTH in one
#           fork: the two rings held at the same fill level, served by the same consumer thread, short blocks alternating
#           between them (ABBA), so both sides of a pair run on the same pinned cores, in the same JVMs, a block apart and
#           the machine's level (forks at ~25 M or ~40 M msg/s at 64 B, both rings') cancels in the pair; each of
#           our kinds against Agrona's of the same family and write (SYMMEM_X against AGRONA_X); the paired difference
#           as % with 95 % t and bootstrap intervals, each fork's means and difference, the verdict (faster/slower only
#           when both intervals are on one side of 0) in ring-paired-summary.md. RINGPAIRED_KINDS (our kinds, default
#           SYMMEM_MANY_TO_ONE,SYMMEM_MANY_TO_ONE_CLAIM,SYMMEM_ONE_TO_ONE,SYMMEM_ONE_TO_ONE_CLAIM), RINGPAIRED_SIZES (64),
#           RINGPAIRED_FILLS (25,75), RINGPAIRED_FORKS (3), RINGPAIRED_PAIRS (30 pairs per fork), RINGPAIRED_BLOCK_MS
#           (100), RINGPAIRED_WB (30 warm-up blocks); threads pinned to RINGPAIRED_CPUS (default as ring-fill's). Each
#           cell ~35 s: the defaults (8 cells) ~5 min (RINGPAIRED_LIMIT 420 s); 4 KiB holds 25 % only
#           (RINGPAIRED_FILLS=25). RINGPAIRED_RTT=1 pairs the round trip's p50 and p99 instead (RingBenchmark.roundTrip in
#           paired mode, one run per kind and size, no fill level, so any RINGPAIRED_FILLS; target: ours lower), e.g.
#           RINGPAIRED_RTT=1 RINGPAIRED_SIZES=64,4096: 8 runs, ~5 min. RINGPAIRED_CONTROL=-Dsymmem4j.ring.X=old measures a
#           change of ours against its control in the same run: each fork of the default is paired with a fork under
#           that property (fork and peer), ABBA over the fork pairs, so a cell takes twice the forks; the summary adds the
#           control's rows and the change's effect with a t interval over the fork pairs. The step's summary is printed
#           to stdout too (a call whose result folder does not come back still shows it). RINGPAIRED_IDLE=noop: every
#           spinning loop of both processes polls again at once after an empty poll (Agrona's NoOpIdleStrategy) instead
#           of Thread.onSpinWait (pause, the default, Agrona's BusySpinIdleStrategy); RINGPAIRED_CONTROL=
#           -Dsymmem4j.bench.ring.idle=noop measures the one against the other
#   chronicle-p99 MapLatencySuite (MapBenchmark in sample-time mode): get and put latency p50/p90/p99/p99.9 at 2
#           processes on one map, symmem4j's SymmetricHashMap against Chronicle Map persisted to /dev/shm, in one run,
#           with the forks' p99 range; table in map-latency-summary.md. P99_FORKS (3), P99_WI (2), P99_I (3),
#           P99_FLOOR=1 adds ConcurrentHashMap in one JVM. ~2 min (P99_LIMIT 240 s)
#   ringcost RingOpCostBenchmark: one message written and read back in one thread, 64 B and 4 KiB, symmem4j's rings
#           (offer, and tryClaim/commit) against Agrona's (write, and tryClaim/commit), one-to-one and many-to-one:
#           the CPU cost per message without cores or scheduling in it (~2.5 min, RINGCOST_LIMIT; not in the defaults)
#   map     MapBenchmark: get/put ops/s and latency percentiles at 2 and 4 processes, symmem4j's SymmetricHashMap
#           against Chronicle Map persisted to /dev/shm and ConcurrentHashMap in one JVM (~3.5 min)
#   cache   ParameterCacheBenchmark: lookup latency against a ConcurrentHashMap of segments (~20 s)
#   switch  ParameterCacheSwitchBench: a 100 MB entry swapped SWAPS (400) times after 10 not measured, the switch as
#           a reader on another rank sees it (it polls the version, which allocates nothing), against that reader
#           copying the entry; ranks as threads of one JVM, then as two JVMs; owner and reader pinned to two cores
#           (SWITCH_CPUS, default from lscpu; none pins nothing); SWITCH_POLLS="version get" adds the reader that
#           polls with a get (a view, garbage, per poll); switch-MODE-POLL.md (~15 s per mode and poll)
#   recorder FlightRecorderCostBench (issue #36): the flight recorder's cost in a 1 KiB all-reduce on one communicator
#           per rank whose recorder is switched off and on between 40 ms blocks (FlightRecorderPairedBenchmark, 2 and 4
#           ranks, ONE_SHOT and TWO_SHOT, 2 forks x 200 pairs; RECORDER_ARGS replaces its arguments), and its calls
#           alone (FlightRecorderOpsBenchmark); the ranks are pinned to RECORDER_CPUS (default: four distinct cores
#           sharing a last-level cache, not CPU 0's, from lscpu; RECORDER_CPUS=none pins nothing); recorder.md has the
#           off and on times, the paired differences with 95 % t and bootstrap intervals, as % of the off time
#           (~3.5 min on 16 cores; not in the default steps)
#   bash run.sh [unpack] [STEP..]       (default: ring; `unpack` alone unpacks and runs nothing)
# JMH settings of the other steps: WI (2) warm-up iterations of W (1) s, I (3) iterations of R (1) s, one fork. Each
# step is bounded by `timeout` (RING_LIMIT 480, RINGCOST_LIMIT 200, MAP_LIMIT 230, CACHE_LIMIT 40, SWITCH_LIMIT 40,
# RECORDER_LIMIT 300 s).
# Ring files and Aeron directories this script's benchmarks leave in /dev/shm are removed at the end.
# Results in $OUT: machine.txt, <step>.txt (JMH's tables), <step>.json (JMH's results), switch.md, summary.txt,
# ring-fill.json and ring-fill-summary.md, ring-paired-*.json and ring-paired-summary.md, map-latency.json and map-latency-summary.md,
# bench-peer.log (the peer processes' output).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# the parts: beside this script (a carried part), or, run from the checkout, in .device-state/a and .device-state/b
case "$here" in
  */bench/shared-state) parts_dirs=("$here/../../.device-state/a" "$here/../../.device-state/b") ;;
  *) parts_dirs=("$here") ;;
esac
out=${OUT:-/tmp/symmem4j-state-out}
mkdir -p "$out"
cd "$out" || exit 1
# the runtime and jars, unpacked once per call into HOME_DIR; part a first (it replaces the folder), then part b
home=${HOME_DIR:-/tmp/symmem4j-state}
for part in a b; do
  for dir in "${parts_dirs[@]}"; do
    archive="$dir/state-$part.tar.xz"
    [ -f "$archive" ] || continue
    t0=$SECONDS
    if [ $part = a ]; then
      rm -rf "$home" && mkdir -p "$home"
    else
      mkdir -p "$home" && rm -f "$home"/lib/chronicle*.jar "$home/commit-b"
    fi
    xz -dc "$archive" | tar -C "$home" -xf - || { echo "unpacking $archive into $home failed" >&2; exit 1; }
    echo "unpacked part $part ($(stat -c %s "$archive") bytes, commit $(cat "$home/commit-$part" 2>/dev/null)) into $home" \
      "in $((SECONDS - t0)) s"
  done
done
if [ -f "$home/commit-a" ] && [ -f "$home/commit-b" ] && [ "$(cat "$home/commit-a")" != "$(cat "$home/commit-b")" ]; then
  echo "note: part a was packed at $(cat "$home/commit-a"), part b at $(cat "$home/commit-b") (Chronicle Map's jars" \
    "follow pom.xml's chronicle.map.version, not our code)"
fi
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(ring)
if [ "${steps[*]}" = unpack ]; then
  du -sh "$home" 2>/dev/null
  echo "unpacked; now the second call (same warm machine): bash .device-state/b/run.sh STEP.. with carry ['.device-state/b']"
  exit 0
fi
[ -x "$home/jre/bin/java" ] || { echo "no runtime in $home: part a was not unpacked on this machine (fix: first a call" \
  "'bash .device-state/a/run.sh unpack' with carry ['.device-state/a'], then this one while the machine is warm)" >&2; exit 1; }
pack=$home
{
  date -u; echo "commit: $(cat "$pack/commit-a" 2>/dev/null || echo unknown) (Chronicle part: $(cat "$pack/commit-b" 2>/dev/null \
    || echo none))"; nproc; lscpu 2>/dev/null | head -20
  free -g; uptime
  # each CPU's core, socket, node and caches: the guest's view of where the pinned threads sit (a KVM guest's
  # virtual CPUs are placed by the host, which this cannot show)
  lscpu -e 2>/dev/null
} > machine.txt 2>&1
java=("$pack/jre/bin/java" --enable-native-access=ALL-UNNAMED --add-modules=jdk.incubator.vector
      --sun-misc-unsafe-memory-access=allow -Xmx2g -cp "$pack/lib/*")
# CPUs for spinning threads: distinct cores that share a last-level cache, skipping CPU 0's core (the kernel's
# housekeeping); `pick_cpus WANT MIN`: WANT of them, else MIN (or none); the ring takes 3 (producer, consumer, Aeron's
# driver) or at least 2, the recorder one per rank, 4
pick_cpus() {
  lscpu -p=CPU,CORE,CACHE 2>/dev/null | awk -F, -v want="${1:-3}" -v min="${2:-2}" '
    /^#/ { next }
    { n = split($3, c, ":"); llc = c[n] }
    $1 == 0 { skip[$2] = 1; next }
    skip[$2] || used[$2]++ { next }
    { count[llc]++; list[llc] = list[llc] (count[llc] > 1 ? "," : "") $1; if (count[llc] == want && best == "") best = list[llc] }
    END { if (best == "") for (k in count) if (count[k] >= min) { split(list[k], p, ","); best = p[1]; for (i = 2; i <= min; i++) best = best "," p[i]; break }
          print best }'
}
cleanup_shm() {
  rm -rf /dev/shm/symmem4j-aeron-bench-* /dev/shm/symmem4j-ring-bench-* /dev/shm/symmem4j-map-bench-* 2>/dev/null
}
trap cleanup_shm EXIT
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
ring_fill() {
  local cpus=${RINGFILL_CPUS-$(pick_cpus 2 2)}
  [ "$cpus" = none ] && cpus=
  echo "== ring-fill at ${SECONDS}s (cpus: ${cpus:-not pinned})" | tee -a summary.txt
  timeout -k 10 "${RINGFILL_LIMIT:-330}" "${java[@]}" ${cpus:+-Dsymmem4j.bench.cpus=$cpus} \
    org.symmem4j.benchmarks.RingFillSuite --out "$out" --forks "${RINGFILL_FORKS:-2}" --warmups "${RINGFILL_WI:-1}" \
    --iterations "${RINGFILL_I:-3}" --sizes "${RINGFILL_SIZES:-64}" --fills "${RINGFILL_FILLS:-25,75}" \
    ${RINGFILL_KINDS:+--kinds "$RINGFILL_KINDS"} ${RINGFILL_GC:+--gc} > ring-fill.txt 2>&1
  local code=$?
  echo "== ring-fill: exit=$code at ${SECONDS}s" | tee -a summary.txt
  sed -n '/^## Ring throughput at a held fill level/,$p' ring-fill.txt >> summary.txt
  grep -h '^ring-fill ' bench-peer.log 2>/dev/null | sort | uniq -c | sort -rn | head -5 >> summary.txt
  [ $code -eq 0 ] || { sed -n '/^Benchmark /,$p' ring-fill.txt; grep -E 'Exception|Error|Result "' ring-fill.txt | tail -20; } >> summary.txt
  return $code
}
ring_paired() {
  local cpus=${RINGPAIRED_CPUS-$(pick_cpus 2 2)}
  [ "$cpus" = none ] && cpus=
  echo "== ring-paired at ${SECONDS}s (cpus: ${cpus:-not pinned})" | tee -a summary.txt
  timeout -k 10 "${RINGPAIRED_LIMIT:-420}" "${java[@]}" ${cpus:+-Dsymmem4j.bench.cpus=$cpus} \
    org.symmem4j.benchmarks.RingPairedSuite --out "$out" --forks "${RINGPAIRED_FORKS:-3}" --pairs "${RINGPAIRED_PAIRS:-30}" \
    --block-ms "${RINGPAIRED_BLOCK_MS:-100}" --warmup-blocks "${RINGPAIRED_WB:-30}" --sizes "${RINGPAIRED_SIZES:-64}" \
    --fills "${RINGPAIRED_FILLS:-25,75}" ${RINGPAIRED_KINDS:+--kinds "$RINGPAIRED_KINDS"} ${RINGPAIRED_RTT:+--round-trip} \
    ${RINGPAIRED_CONTROL:+--control "$RINGPAIRED_CONTROL"} ${RINGPAIRED_IDLE:+--idle "$RINGPAIRED_IDLE"} > ring-paired.txt 2>&1
  local code=$?
  echo "== ring-paired: exit=$code at ${SECONDS}s" | tee -a summary.txt
  # the report of the cells finished (rewritten after each: a run cut by the limit keeps them), on stdout too
  if [ -f ring-paired-summary.md ]; then tee -a summary.txt < ring-paired-summary.md; fi
  grep -h '^ring-fill ' bench-peer.log 2>/dev/null | sort | uniq -c | sort -rn | head -8 >> summary.txt
  [ $code -eq 0 ] || grep -E 'Exception|Error|Result "' ring-paired.txt | tail -20 >> summary.txt
  return $code
}
chronicle_p99() {
  echo "== chronicle-p99 at ${SECONDS}s" | tee -a summary.txt
  timeout -k 10 "${P99_LIMIT:-240}" "${java[@]}" -Dchronicle.analytics.disable=true \
    org.symmem4j.benchmarks.MapLatencySuite --out "$out" --forks "${P99_FORKS:-3}" --warmups "${P99_WI:-2}" \
    --iterations "${P99_I:-3}" ${P99_FLOOR:+--with-floor} > map-latency.txt 2>&1
  local code=$?
  echo "== chronicle-p99: exit=$code at ${SECONDS}s" | tee -a summary.txt
  sed -n '/^## Hash map latency/,$p' map-latency.txt >> summary.txt
  [ $code -eq 0 ] || { sed -n '/^Benchmark /,$p' map-latency.txt; grep -E 'Exception|Error|Result "' map-latency.txt | tail -20; } >> summary.txt
  return $code
}
ring() {
  local cpus=${RING_CPUS-$(pick_cpus 3 2)}
  [ "$cpus" = none ] && cpus=
  echo "== ring at ${SECONDS}s (cpus: ${cpus:-not pinned})" | tee -a summary.txt
  timeout -k 10 "${RING_LIMIT:-480}" "${java[@]}" ${cpus:+-Dsymmem4j.bench.cpus=$cpus} \
    ${AERON_TERM_LENGTH:+-Dsymmem4j.bench.aeronTermLength=$AERON_TERM_LENGTH} \
    org.symmem4j.benchmarks.RingSuite --out "$out" --forks "${RING_FORKS:-3}" --other-forks "${RING_OTHER_FORKS:-1}" \
    --warmups "${RING_WI:-2}" --iterations "${RING_I:-4}" ${RING_ONE_TO_ONE_ONLY:+--no-many-to-one} \
    ${RING_KINDS:+--kinds "$RING_KINDS"} ${RING_SIZES:+--sizes "$RING_SIZES"} ${RING_RTT_ONLY:+--round-trip-only} \
    > ring.txt 2>&1
  local code=$?
  echo "== ring: exit=$code at ${SECONDS}s" | tee -a summary.txt
  sed -n '/^## Ring buffers/,$p' ring.txt >> summary.txt
  [ $code -eq 0 ] || { sed -n '/^Benchmark /,$p' ring.txt; grep -E 'Exception|Error|Result "' ring.txt | tail -20; } >> summary.txt
  return $code
}
rc=0
for step in "${steps[@]}"; do
  case $step in
    map|chronicle-p99)
      if ! compgen -G "$pack/lib/chronicle-map-*.jar" > /dev/null; then
        echo "step $step: expected Chronicle Map's jars (part b) in $pack/lib, found none (fix: run it in a call" \
          "carrying .device-state/b, 'bash .device-state/b/run.sh $step', after the call that unpacked part a on the" \
          "same warm machine; pack.sh packs part b unless PACK_PARTS=a or WITHOUT_CHRONICLE=1)" | tee -a summary.txt
        rc=1
        continue
      fi ;;
  esac
  case $step in
    ring) ring || rc=1 ;;
    ring-fill) ring_fill || rc=1 ;;
    ring-paired) ring_paired || rc=1 ;;
    chronicle-p99) chronicle_p99 || rc=1 ;;
    ringcost) jmh ringcost "${RINGCOST_LIMIT:-200}" 'org.symmem4j.benchmarks.RingOpCostBenchmark' || rc=1 ;;
    map) jmh map "${MAP_LIMIT:-230}" 'org.symmem4j.benchmarks.MapBenchmark' || rc=1 ;;
    cache) jmh cache "${CACHE_LIMIT:-40}" 'org.symmem4j.benchmarks.ParameterCacheBenchmark' || rc=1 ;;
    switch)
      echo "== switch at ${SECONDS}s" | tee -a summary.txt
      cpus=${SWITCH_CPUS-$(pick_cpus 2 2)}
      [ "$cpus" = none ] && cpus=
      for poll in ${SWITCH_POLLS:-version}; do
        for mode in threads processes; do
          md=switch-$mode-$poll
          # shellcheck disable=SC2086
          timeout -k 10 "${SWITCH_LIMIT:-90}" "${java[@]}" ${cpus:+-Dsymmem4j.bench.cpus=$cpus} \
            org.symmem4j.benchmarks.ParameterCacheSwitchBench --bytes 100000000 --swaps "${SWAPS:-400}" \
            --poll "$poll" $([ $mode = processes ] && echo --processes) --out "$out/$md.md" > "$md.txt" 2>&1 || rc=1
          cat "$md.txt" >> summary.txt
        done
      done ;;
    recorder)
      cpus=${RECORDER_CPUS-$(pick_cpus 4 4)}
      [ "$cpus" = none ] && cpus=
      echo "== recorder at ${SECONDS}s (cpus: ${cpus:-not pinned})" | tee -a summary.txt
      # shellcheck disable=SC2086
      timeout -k 10 "${RECORDER_LIMIT:-300}" "${java[@]}" ${cpus:+-Dsymmem4j.bench.cpus=$cpus} \
        org.symmem4j.benchmarks.FlightRecorderCostBench --out "$out/recorder.md" ${RECORDER_ARGS:-} > recorder.txt 2>&1
      code=$?
      [ $code -eq 0 ] || rc=1
      echo "== recorder: exit=$code at ${SECONDS}s" | tee -a summary.txt
      if [ -f recorder.md ]; then cat recorder.md >> summary.txt; else tail -30 recorder.txt >> summary.txt; fi ;;
    unpack) ;;
    *) echo "unknown step $step (expected unpack, ring, ring-fill, ring-paired, chronicle-p99, ringcost, map, cache, switch or recorder)" | tee -a summary.txt; rc=1 ;;
  esac
done
echo "== done at ${SECONDS}s, exit=$rc" | tee -a summary.txt
exit $rc
