#!/usr/bin/env bash
# The preamble the benchmark CLI scripts share; source it (`. "$(dirname "$0")/lib/preamble.sh"`), do not run it.
# It cds to the checkout's root and sets:
#   root    the checkout's root
#   jdk     a JDK >= 25 home (bench/jdk25.sh)
#   cp      the benchmarks module's class path, its jar included, after `mvn package` of benchmarks and what it needs
#           (inside this checkout: never `install`, which would replace the artifacts in ~/.m2 other checkouts use)
#   commit  HEAD's short hash, with " (plus uncommitted changes)" when the tree outside bench/results differs
# and makes bench/results. Set BENCH_SKIP_BUILD=1 to reuse the last build's jar and class path.
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
. bench/jdk25.sh
jdk=$(find_jdk25)

if [ "${BENCH_SKIP_BUILD:-0}" != 1 ]; then
  mvn -q -B -o -pl benchmarks -am -DskipTests package
fi
cp="$(cat benchmarks/target/classpath.txt):$(ls "$root"/benchmarks/target/symmem4j-benchmarks-*.jar)"

commit=$(git rev-parse --short HEAD)
if [ -n "$(git status --porcelain -- . ':!bench/results' ':!bench/tmp')" ]; then
  commit="$commit (plus uncommitted changes)"
fi
mkdir -p bench/results
