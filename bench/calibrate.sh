#!/usr/bin/env bash
# Calibrates the host all-reduce thresholds of this machine (the benchmarks module's CalibrateThresholds) on the
# JDK 25 that bench/jdk25.sh finds, with the flags the runtime needs; a bare `java` is often an older
# JDK and fails with UnsupportedClassVersionError.
#
#   bench/calibrate.sh [--ranks N] [--max-bytes B] [--repetitions R] [--max-spread S] [--out FILE]
#   bench/calibrate.sh --help
#
# Writes ~/.symmem4j/thresholds.properties by default (its rows override the shipped defaults). Each
# measurement is repeated (5 times by default); when the repetitions spread too far, or a small size
# is far slower than a larger one, nothing is written and the exit status is 1: run it again on an
# idle machine. About a minute with the defaults. SKIP_BUILD=1 uses the jars already built.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
. bench/jdk25.sh
jdk=$(find_jdk25)

if [ "${SKIP_BUILD:-0}" != 1 ]; then
  mvn -q -B -DskipTests package -pl benchmarks -am
fi
cp="$(cat benchmarks/target/classpath.txt):$(ls "$root"/benchmarks/target/symmem4j-benchmarks-*.jar)"
exec "$jdk/bin/java" --enable-native-access=ALL-UNNAMED --add-modules=jdk.incubator.vector \
  --sun-misc-unsafe-memory-access=allow -cp "$cp" org.symmem4j.benchmarks.CalibrateThresholds "$@"
