#!/usr/bin/env bash
# Pipeline speed benchmark, one run: the DL4J pipeline against the single model (PipelineBench: 1F1B and
# interleaved, split by parameters and by measured pass times, a core per rank), then the executor's
# measured idle time against the simulator with stages of known duration (PipelineExecutorBubbleBench,
# parked and spinning waits). Writes bench/results/<date>-pipeline-speed[-TAG].md with the machine,
# the load before and after, the commit and the raw numbers, and beside it the raw CSVs:
# <date>-pipeline-speed[-TAG].csv (PipelineBench, one row per measured run) and
# <date>-pipeline-speed[-TAG]-executor.csv (PipelineExecutorBubbleBench, one row per step and rank).
#
#   bench/pipeline-speed.sh [extra PipelineBench flags, e.g. --steps 10 --reps 1 for a quick look]
#
# Environment: RANKS (comma-separated; default: 4,8 from 16 cores, 2,4 from 4, else 2), TAG (file name
# suffix), SKIP_BUILD=1 (use the jars already built). The target needs a core per rank: on 16 cores,
# RANKS=4,8 with 2 microbatches per rank reproduces the issue's 4 x 8 and 8 x 16 runs
# (--microbatches-per-rank 2). About 15 minutes on 2 cores with the defaults. Run it on an otherwise
# idle machine: every rank spins on its core, and any other load lands in the bubble.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
. bench/jdk25.sh
jdk=$(find_jdk25)

if [ "${SKIP_BUILD:-0}" != 1 ]; then
  mvn -q -B -DskipTests verify
fi
cp="$(cat benchmarks/target/classpath.txt):$(ls "$root"/benchmarks/target/symmem4j-benchmarks-*.jar)"

cores=$(nproc)
if [ -z "${RANKS:-}" ]; then
  if [ "$cores" -ge 16 ]; then RANKS=4,8; elif [ "$cores" -ge 4 ]; then RANKS=2,4; else RANKS=2; fi
fi
commit=$(git rev-parse --short HEAD)
if [ -n "$(git status --porcelain -- . ':!bench/results' ':!bench/tmp')" ]; then
  commit="$commit (plus uncommitted changes)"
fi
mkdir -p bench/results bench/tmp
report="bench/results/$(date -u +%Y-%m-%d)-pipeline-speed${TAG:+-$TAG}.md"
raw="${report%.md}.csv"
raw_executor="${report%.md}-executor.csv"
rm -f "$raw" "$raw_executor" # the benchmarks append to an existing CSV; this run's report replaces the day's, so do its CSVs
machine="$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), $cores cores, $(free -g | awk '/^Mem:/{print $2}') GiB RAM, $(uname -sr)"
java=("$jdk/bin/java" --enable-native-access=ALL-UNNAMED --add-modules=jdk.incubator.vector
      --sun-misc-unsafe-memory-access=allow -cp "$cp")
export OMP_NUM_THREADS=1

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
"${java[@]}" org.symmem4j.benchmarks.dl4j.PipelineBench --ranks "$RANKS" --out bench/tmp/pipeline-bench.md --raw "$raw" \
  --commit "$commit" --machine "$machine" --command "RANKS=$RANKS bench/pipeline-speed.sh $*" "$@"
{
  cat bench/tmp/pipeline-bench.md
  echo
  echo "## Executor against the simulator (no model)"
  echo
  echo "Stages whose passes take a known time, every step started on all ranks together; the measured idle"
  echo "fraction per rank next to the simulator's for that step's measured pass and hand-off times"
  echo "(raw data, one CSV row per step and rank: \`$(basename "$raw_executor")\`)."
  echo
  "${java[@]}" org.symmem4j.benchmarks.PipelineExecutorBubbleBench --ranks 4 --microbatches 8 --wait park --raw "$raw_executor"
  echo
  "${java[@]}" org.symmem4j.benchmarks.PipelineExecutorBubbleBench --ranks "$(( cores < 2 ? 1 : (cores < 4 ? 2 : 4) ))" \
    --microbatches 8 --forward-us 1000 --backward-us 2000 --wait spin --raw "$raw_executor"
  echo
  echo "Load average (1, 5, 15 min) before: $load_before; after: $(cut -d' ' -f1-3 /proc/loadavg)."
} > "$report" 2> >(grep -v '^WARNING: Using incubator modules' >&2)
echo "wrote $report, $raw and $raw_executor" >&2
