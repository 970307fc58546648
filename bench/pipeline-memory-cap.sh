#!/usr/bin/env bash
# A network larger than one JVM's memory cap trained by a pipeline whose ranks hold only their stages (issue #35):
#   1. control: one JVM builds the whole network (DL4J's init, then fit) under the cap: JavaCPP refuses it
#      (OutOfMemoryError, "Physical memory usage is too high"), exit status 3;
#   2. reference: the same pipeline in thread mode (4 rank threads of one JVM, no cap);
#   3. the run: 4 JVMs under bin/symmem4j-run, each capped, the trainer started from the configuration.
# It checks that the run trains, that every stage's trained parameters (CRC-32 of their bits) and every step's loss
# (its bits) equal the reference's, and prints every run's raw lines (per-rank model bytes, resident bytes).
#
#   bench/pipeline-memory-cap.sh [example flags, e.g. --hidden 1024 --layers 8]    CAP=512m (default) sets the cap
#   bench/pipeline-memory-cap.sh --model residual    the same dense layers as a ComputationGraph of residual blocks
#
# DETAIL=1 (default) runs every JVM with -XX:NativeMemoryTracking=summary and the example with --memory-detail: each
# process prints where its resident memory is at each phase (smaps by mapping kind, malloc's arenas, the JVM's NMT
# categories, ND4J's counters), the raw numbers of the per-rank accounting; DETAIL=0 runs without.
#
# The cap is JavaCPP's maxphysicalbytes: the process's whole resident set (heap, JIT, libraries, ND4J's arrays);
# maxbytes does not bind ND4J's CPU arrays (it does not count them). Each JVM runs with a fixed, pre-touched heap
# (-Xms128m -Xmx128m -XX:+AlwaysPreTouch) so the heap is resident from the start and does not grow into the cap.
# About 1.5 GB of memory and a minute or two on 2 cores. Builds with `package` inside this checkout (never `install`);
# BENCH_SKIP_BUILD=1 reuses the last build (or set CP to a class path with the examples and their dependencies).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
. bench/jdk25.sh
jdk=$(find_jdk25)
if [ -z "${CP:-}" ]; then
  if [ "${BENCH_SKIP_BUILD:-0}" != 1 ]; then
    mvn -q -B -o -pl examples,launcher -am -DskipTests package
  fi
  CP="$root/examples/target/classes:$(cat examples/target/classpath.txt)"
fi
cap=${CAP:-512m}
main=org.symmem4j.examples.PipelineMemoryCapExample
jvm=(--enable-native-access=ALL-UNNAMED --add-modules=jdk.incubator.vector --sun-misc-unsafe-memory-access=allow
  -Xms128m -Xmx128m -XX:+AlwaysPreTouch -Dorg.deeplearning4j.crash.reporting.enabled=false)
detail=()
if [ "${DETAIL:-1}" = 1 ]; then
  # where each process's resident memory is, per phase (ResidentMemory): the JVM's parts need its native memory tracking
  jvm+=(-XX:NativeMemoryTracking=summary)
  detail=(--memory-detail)
fi
capped=(-Dorg.bytedeco.javacpp.maxbytes="$cap" -Dorg.bytedeco.javacpp.maxphysicalbytes="$cap")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
raw() { grep -E 'step |stage |holds |workspaces |whole |refused|rank|memory |error|Exception' "$1" | grep -v '^\s*at ' || true; }

echo "date: $(date -u '+%Y-%m-%d %H:%M UTC'); commit $(git rev-parse --short HEAD); cap $cap; flags: $*"
nproc; lscpu | head -n 12
echo "== 1. control: the whole network in one JVM under the cap"
status=0
"$jdk/bin/java" "${jvm[@]}" "${capped[@]}" -cp "$CP" $main --mode whole "${detail[@]}" "$@" > "$tmp/whole" 2>&1 || status=$?
raw "$tmp/whole"
[ "$status" = 3 ] || { echo "FAIL: the control exited $status, expected 3 (JavaCPP's refusal): the cap does not bind" >&2; exit 1; }
echo "== 2. reference: the pipeline on 4 threads of one JVM, no cap"
"$jdk/bin/java" "${jvm[@]/-Xmx128m/-Xmx1g}" -cp "$CP" $main --ranks 4 "${detail[@]}" "$@" > "$tmp/threads" 2>&1 \
  || { cat "$tmp/threads"; echo "FAIL: the reference did not train" >&2; exit 1; }
raw "$tmp/threads"
echo "== 3. the run: 4 processes under symmem4j-run, each capped at $cap"
bin/symmem4j-run -n 4 --java "${jvm[@]}" "${capped[@]}" -cp "$CP" $main "${detail[@]}" "$@" > "$tmp/ranks" 2>&1 \
  || { cat "$tmp/ranks"; echo "FAIL: the capped ranks did not train" >&2; exit 1; }
raw "$tmp/ranks"
echo "== comparison"
grep -oE 'stage [0-9]+ layers .*crc32=[0-9a-f]+' "$tmp/threads" | sort > "$tmp/threads.crc"
grep -oE 'stage [0-9]+ layers .*crc32=[0-9a-f]+' "$tmp/ranks" | sort > "$tmp/ranks.crc"
grep -oE 'step [0-9]+ loss=[0-9a-f]+' "$tmp/threads" | sort -u > "$tmp/threads.loss"
grep -oE 'step [0-9]+ loss=[0-9a-f]+' "$tmp/ranks" | sort -u > "$tmp/ranks.loss"
[ -s "$tmp/threads.crc" ] && [ -s "$tmp/threads.loss" ] || { echo "FAIL: the reference printed no stage or loss" >&2; exit 1; }
if cmp -s "$tmp/threads.crc" "$tmp/ranks.crc" && cmp -s "$tmp/threads.loss" "$tmp/ranks.loss"; then
  echo "PASS: every stage's parameters and every step's loss are bitwise the thread-mode pipeline's" \
    "($(wc -l < "$tmp/ranks.crc") stages, $(wc -l < "$tmp/ranks.loss") steps); the whole network was refused under the cap"
else
  diff "$tmp/threads.crc" "$tmp/ranks.crc" || true
  diff "$tmp/threads.loss" "$tmp/ranks.loss" || true
  echo "FAIL: the capped ranks differ from the thread-mode pipeline" >&2
  exit 1
fi
