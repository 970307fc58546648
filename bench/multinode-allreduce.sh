#!/usr/bin/env bash
# Hierarchical (symmetric memory inside each machine + MPI between machines) against flat MPI
# all-reduce, on this one machine pretending to be MACHINES machines of RANKS_PER_MACHINE ranks:
# mpirun with Open MPI's TCP transport only (its shared memory off), so traffic between the
# pretended machines goes through sockets. Writes bench/results/<date>-multinode-allreduce.md and .csv.
#   bench/multinode-allreduce.sh [--repetitions R] [--max-bytes B]
# Environment: MACHINES (default 2), RANKS_PER_MACHINE (default 2), SKIP_BUILD=1 to reuse the build.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/jdk25.sh
JAVA25_HOME=$(find_jdk25) || { echo "install a JDK 25 or set JAVA25_HOME" >&2; exit 1; }
export JAVA25_HOME
command -v mpirun >/dev/null || { echo "mpirun not found: install Debian's openmpi-bin" >&2; exit 1; }
machines=${MACHINES:-2}
per=${RANKS_PER_MACHINE:-2}
ranks=$((machines * per))
if [ "${SKIP_BUILD:-0}" != 1 ]; then
  mvn -q -B -DskipTests install -pl benchmarks -am
fi
cp="benchmarks/target/classes:$(cd benchmarks && mvn -q -o dependency:build-classpath -Dmdep.outputFile=/dev/stdout)"
stamp=$(date +%F)
md="bench/results/${stamp}-multinode-allreduce-${machines}x${per}.md"
csv="bench/results/${stamp}-multinode-allreduce.csv"
port=$((20000 + RANDOM % 20000))
secret="multinode-bench-$(head -c 24 /dev/urandom | base64 | tr -d '/+=')"
{
  echo "# Hierarchical vs flat MPI all-reduce, ${machines} pretended machines x ${per} ranks"
  echo
  echo "- Date: $(date -u +%FT%TZ); machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | xargs);"
  echo "  commit $(git rev-parse --short HEAD)$(git diff --quiet || echo ' (with uncommitted changes)')."
  echo "- Command: MACHINES=$machines RANKS_PER_MACHINE=$per bench/multinode-allreduce.sh $*; raw medians appended to $(basename "$csv")."
  echo "- mpirun --mca btl tcp,self (between pretended machines: TCP over loopback); inside a machine: /dev/shm symmetric memory."
  echo
  mpirun --allow-run-as-root --oversubscribe -np "$ranks" --mca btl tcp,self --mca btl_tcp_if_include lo \
    -x MASTER_ADDR=127.0.0.1 -x MASTER_PORT="$port" -x SYMMEM4J_RUN_ID="multinode-bench-$port" -x SYMMEM4J_SECRET="$secret" \
    "$JAVA25_HOME/bin/java" --enable-native-access=ALL-UNNAMED --add-modules=jdk.incubator.vector -Xmx4g \
    -Dsymmem4j.pretend.ranks.per.node="$per" -cp "$cp" org.symmem4j.benchmarks.MultiNodeAllReduceBench --raw "$csv" "$@" \
    2> >(grep -v '^WARNING' >&2)
} | tee "$md"
