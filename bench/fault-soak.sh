#!/usr/bin/env bash
# The long fault soak: hundreds of SIGKILL trials on 3-rank process groups (victim and moment at
# random: during set-up, mid-collective, rank 0 included), each checked for hangs (a survivor alive
# past timeout + 10 s), corrupted all-reduce results, /dev/shm residue and an unnamed culprit, with
# the time from each kill to the last survivor's end. Writes bench/results/<date>-fault-soak.md with
# every trial (see it-tests' FaultSoakTest). CI runs the short fault suite (FaultInjectionTest).
#
#   bench/fault-soak.sh [trials, default 300] [seed, default 1]
#
# About 4 s a trial on 2 cores. Builds inside this checkout (never `install`).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
. bench/jdk25.sh
JAVA25_HOME=$(find_jdk25)
export JAVA25_HOME
trials=${1:-300}
seed=${2:-1}
mkdir -p bench/results
report="$root/bench/results/$(date -u +%Y-%m-%d)-fault-soak.md"
commit=$(git rev-parse --short HEAD)
mvn -q -B -pl it-tests -am verify -Dtest=FaultSoakTest -Dsurefire.failIfNoSpecifiedTests=false \
  -Dsymmem4j.excludedGroups=none -Dsoak.trials="$trials" -Dsoak.seed="$seed" -Dsoak.out="$report" \
  || status=$?
{
  echo
  echo "Commit $commit; command: bench/fault-soak.sh $*; $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs))."
} >> "$report"
echo "wrote $report" >&2
exit ${status:-0}
