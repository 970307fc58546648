#!/usr/bin/env bash
# The metrics endpoint under half-sent requests (issue #29: a scrape within 100 ms while 1,000 are held):
# MetricsEndpointStallBench starts a PrometheusEndpoint, times scrapes with none held (the baseline), holds
# M half-sent requests, times the scrapes again and prints key=value lines (median, p90, p99, max, how many
# held requests stayed open). Loopback only; about 2 M + 256 file descriptors.
#
#   bench/metrics-endpoint-stall.sh run [options]   build here (package, never install) and run, e.g.
#                                                  --half-open 1000 --scrapes 200 (see the class comment)
#   bench/metrics-endpoint-stall.sh pack DEST       DEST/lib: the 18 jars it needs (no DL4J, no ND4J), DEST/jre:
#                                                  a jlinked JDK 25 (java.base, jdk.httpserver, java.logging),
#                                                  DEST/stall.tar.xz: both, for a machine without Java; then
#                                                  there: tar -xJf stall.tar.xz && jre/bin/java -cp 'lib/*' \
#                                                    org.symmem4j.benchmarks.MetricsEndpointStallBench
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
. bench/jdk25.sh
jdk=$(find_jdk25)
export JAVA25_HOME=$jdk
mode=${1:-run}
shift || true

# package, never install: ~/.m2 holds artifacts other checkouts use
mvn -q -B -pl benchmarks -am -DskipTests package
# the endpoint and its optional Prometheus dependencies, the runtime's exception, the bench: nothing of DL4J
jars=$( (tr ':' '\n' < benchmarks/target/classpath.txt; echo; ls benchmarks/target/symmem4j-benchmarks-*.jar) \
  | grep -E '/(symmem4j-(prometheus|parallel|benchmarks)-[^/]*|micrometer-(core|commons|observation|registry-prometheus)-[^/]*|prometheus-metrics-[^/]*|HdrHistogram-[^/]*|LatencyUtils-[^/]*|slf4j-api-[^/]*)\.jar$' \
  | grep -vE -- '-(sources|javadoc)\.jar$')

case "$mode" in
  run)
    exec "$jdk/bin/java" -cp "$(echo "$jars" | paste -sd:)" org.symmem4j.benchmarks.MetricsEndpointStallBench "$@"
    ;;
  pack)
    dest=$(realpath -m "${1:?pack needs a destination folder}")
    rm -rf "$dest/lib" "$dest/jre"
    mkdir -p "$dest/lib"
    cp $jars "$dest/lib/"
    "$jdk/bin/jlink" --add-modules java.base,jdk.httpserver,java.logging --strip-debug --no-man-pages \
      --no-header-files --output "$dest/jre"
    (cd "$dest" && tar -cf - jre lib | xz -6 -T2 > stall.tar.xz)
    ls "$dest/lib"
    du -sh "$dest/stall.tar.xz"
    echo "on the machine: tar -xJf stall.tar.xz && jre/bin/java -cp 'lib/*' org.symmem4j.benchmarks.MetricsEndpointStallBench"
    ;;
  *)
    echo "usage: $0 run [options] | pack DEST (found mode=$mode)" >&2
    exit 2
    ;;
esac
