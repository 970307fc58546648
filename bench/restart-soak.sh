#!/usr/bin/env bash
# The restart soak (issue 32): T trials of a 2-rank DL4J job under `symmem4j-run -n 2 --max-restarts 1`
# (examples' RestartingTraining: 2 epochs of 12 steps, a checkpoint every 4 steps), each with a kill -9 of a
# random rank after a random step, against one uninterrupted run of the same job. Per trial: the time from the
# kill to generation 1's first step, the steps redone, hangs (a watchdog kills the job when the launcher is not
# back in time), torn checkpoints skipped and corrupt ones loaded, bitwise equality of the final model with the
# uninterrupted run's, residue (processes, /dev/shm files, listening ports of the job). Writes the raw CSV and a
# summary: bench/results/<date>-restart-soak.csv and .md (see examples' RestartSoak).
#
#   bench/restart-soak.sh [trials, default 100] [seed, default 1] [minutes, default 60] [watchdog s, default 120]
#                         [parallel: trials at once, default 1]
#
# About 10-15 s a trial on 2 idle cores (two JVM starts with ND4J each); no trial starts once `minutes` are spent.
# With parallel > 1 the jobs run with --cpu-bind none (each job's ranks have one ND4J thread: about 5 at once on
# 16 cores). The last line printed is the summary: trials, the slowest kill -> first step, hangs, corrupt, unequal.
# Builds inside this checkout with test-compile (never `install`). Packed for a lent machine, with only a JRE and
# jars (bench/fault-soak/pack-restart.sh and run-restart.sh), it runs with SOAK_JAVA (that JRE's bin/java),
# SOAK_CLASSPATH, SOAK_COMMIT and SOAK_RESULTS (where the CSV and report go) set, and neither Maven nor git.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
trials=${1:-100}
seed=${2:-1}
minutes=${3:-60}
watchdog=${4:-120}
parallel=${5:-1}
if [ -n "${SOAK_CLASSPATH:-}" ]; then
  java_bin=${SOAK_JAVA:?SOAK_JAVA: bin/java of the packed runtime}
  cp=$SOAK_CLASSPATH
  commit=${SOAK_COMMIT:-packed}
  results=${SOAK_RESULTS:-$PWD}
else
  . bench/jdk25.sh
  JAVA25_HOME=$(find_jdk25)
  export JAVA25_HOME
  java_bin=$JAVA25_HOME/bin/java
  cpfile="$root/examples/target/soak-classpath.txt"
  mvn -q -B -o -pl examples -am test-compile dependency:build-classpath -Dmdep.includeScope=test \
    -Dmdep.outputFile="$cpfile"
  cp="$root/examples/target/test-classes:$root/examples/target/classes:$(cat "$cpfile")"
  commit=$(git rev-parse --short HEAD)
  if [ -n "$(git status --porcelain -- . ':!bench/results')" ]; then
    commit="$commit (plus uncommitted changes)"
  fi
  results=$root/bench/results
fi
mkdir -p "$results"
day=$(date -u +%Y-%m-%d)
md="$results/$day-restart-soak.md"
csv="$results/$day-restart-soak.csv"
body=$(mktemp)
"$java_bin" --enable-native-access=ALL-UNNAMED --add-modules=jdk.incubator.vector \
  --sun-misc-unsafe-memory-access=allow -Xmx1g -cp "$cp" org.symmem4j.examples.RestartSoak \
  trials="$trials" seed="$seed" minutes="$minutes" watchdog="$watchdog" parallel="$parallel" csv="$csv" md="$body" \
  work="${TMPDIR:-/tmp}/restart-soak-$$" || status=$?
{
  echo "# #32 restart soak: kill -9 of a random rank at a random step, $trials trials asked"
  echo
  echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "- commit: $commit; command: bench/restart-soak.sh $*"
  echo "- machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(free -g | awk '/Mem:/{print $2}') GB"
  echo
  echo '```'
  lscpu 2>/dev/null | head -n 8
  echo '```'
  echo
  cat "$body"
} > "$md"
rm -f "$body"
echo "wrote $md and $csv" >&2
exit ${status:-0}
