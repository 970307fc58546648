#!/usr/bin/env bash
# Runs on a lent machine (see pack.sh): unpacks the soak pack beside this script into /tmp/soak and runs
# the named soak test classes of it-tests, one after the other, with the JUnit console launcher. Each
# soak writes its markdown report to $OUT (or ./soak-out), with a log per class.
#
#   bash .device-soak/run.sh [-Dprop=value ...] ClassName [ClassName ...]
#   e.g. bash .device-soak/run.sh -Dsoak.trials=200 FaultSoakTest RunOnEveryRankSoakTest
#   bash .device-soak/run.sh --cli org.symmem4j.benchmarks.StoreStarvationBench --ranks 16 --strangers 1000
#     runs one CLI's main on the same class path instead (its output goes to $OUT/<simple name>.log)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-$PWD/soak-out}
mkdir -p "$out" /tmp/soak
[ -x /tmp/soak/jre/bin/java ] || xz -dc "$here/soak.tar.xz" | tar -xf - -C /tmp/soak
props=()
classes=()
for a in "$@"; do
  case "$a" in
    -D*) props+=("$a") ;;
    *) classes+=("$a") ;;
  esac
done
cd /tmp/soak
cp=$(cat classpath.txt)
if [ "${1:-}" = "--cli" ]; then
  main=$2
  shift 2
  jre/bin/java --enable-native-access=ALL-UNNAMED --add-modules jdk.incubator.vector -cp "$cp" "$main" "$@" 2>&1 \
    | tee "$out/${main##*.}.log"
  exit "${PIPESTATUS[0]}"
fi
echo "soak: $(cat "$here/COMMIT" 2>/dev/null); $(nproc) CPUs; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); ulimit -n $(ulimit -n)"
status=0
for c in "${classes[@]}"; do
  echo "=== $c"
  jre/bin/java --enable-native-access=ALL-UNNAMED --add-modules jdk.incubator.vector "${props[@]}" \
    -Dsoak.out="$out/$c.md" -cp "$cp" org.junit.platform.console.ConsoleLauncher execute \
    --class-path "$cp" --select-class "org.symmem4j.it.$c" --include-tag soak --details=summary \
    --disable-banner 2>&1 | tee "$out/$c.log" | tail -n 40
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
done
exit $status
