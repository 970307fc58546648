#!/usr/bin/env bash
# The long fault soak: SIGKILL trials on 3-rank process groups (victim and moment at random: while
# joining, while setting up memories, some with another survivor descheduled around the kill, and
# mid-collective, rank 0 included) and SIGSTOP trials on 3- and 4-rank groups (RING, ONE_SHOT,
# TWO_SHOT), each checked for hangs (a survivor alive past timeout + 10 s), corrupted all-reduce
# results, /dev/shm residue and whether every survivor blamed the failed rank and no other, with the
# time from each fault to the last survivor's end. Writes bench/results/<date>-fault-soak.md with
# every trial (see it-tests' FaultSoak). CI runs the short fault suite (FaultInjectionTest).
#
#   bench/fault-soak.sh [kill trials, default 200] [stop trials, default 200] [seed, default 1] [parallel, default 1]
#
# About 4 s a kill trial and 20 s a stop trial on 2 cores; trials run `parallel` at a time (a
# 16-core machine takes 4). Builds inside this checkout (never `install`). Without Maven, see the
# class comment of it-tests' FaultSoak (java -cp ... org.symmem4j.it.FaultSoak kill=200 stop=200).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
. bench/jdk25.sh
JAVA25_HOME=$(find_jdk25)
export JAVA25_HOME
trials=${1:-200}
stop_trials=${2:-200}
seed=${3:-1}
parallel=${4:-1}
mkdir -p bench/results
report="$root/bench/results/$(date -u +%Y-%m-%d)-fault-soak.md"
commit=$(git rev-parse --short HEAD)
mvn -q -B -pl it-tests -am verify -Dtest=FaultSoakTest -Dsurefire.failIfNoSpecifiedTests=false \
  -Dsymmem4j.excludedGroups=none -Dsoak.trials="$trials" -Dsoak.stopTrials="$stop_trials" -Dsoak.seed="$seed" \
  -Dsoak.parallel="$parallel" -Dsoak.out="$report" \
  || status=$?
{
  echo
  echo "Commit $commit; command: bench/fault-soak.sh $*; $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs))."
} >> "$report"
echo "wrote $report" >&2
exit ${status:-0}
