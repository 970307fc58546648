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
#
# About 10-15 s a trial on 2 idle cores (two JVM starts with ND4J each); no trial starts once `minutes` are spent.
# Builds inside this checkout with test-compile (never `install`).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
. bench/jdk25.sh
JAVA25_HOME=$(find_jdk25)
export JAVA25_HOME
trials=${1:-100}
seed=${2:-1}
minutes=${3:-60}
watchdog=${4:-120}
cpfile="$root/examples/target/soak-classpath.txt"
mvn -q -B -o -pl examples -am test-compile dependency:build-classpath -Dmdep.includeScope=test \
  -Dmdep.outputFile="$cpfile"
cp="$root/examples/target/test-classes:$root/examples/target/classes:$(cat "$cpfile")"
commit=$(git rev-parse --short HEAD)
if [ -n "$(git status --porcelain -- . ':!bench/results')" ]; then
  commit="$commit (plus uncommitted changes)"
fi
mkdir -p bench/results
day=$(date -u +%Y-%m-%d)
md="$root/bench/results/$day-restart-soak.md"
csv="$root/bench/results/$day-restart-soak.csv"
body=$(mktemp)
"$JAVA25_HOME/bin/java" --enable-native-access=ALL-UNNAMED --add-modules=jdk.incubator.vector \
  --sun-misc-unsafe-memory-access=allow -Xmx1g -cp "$cp" org.symmem4j.examples.RestartSoak \
  trials="$trials" seed="$seed" minutes="$minutes" watchdog="$watchdog" csv="$csv" md="$body" \
  work="${TMPDIR:-/tmp}/restart-soak-$$" || status=$?
{
  echo "# #32 restart soak: kill -9 of a random rank at a random step, $trials trials asked"
  echo
  echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "- commit: $commit; command: bench/restart-soak.sh $*"
  echo "- machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(free -g | awk '/Mem:/{print $2}') GB"
  echo
  echo '```'
  lscpu | head -n 8
  echo '```'
  echo
  cat "$body"
} > "$md"
rm -f "$body"
echo "wrote $md and $csv" >&2
exit ${status:-0}
