#!/usr/bin/env bash
# Runs the restart soak on a lent machine from what bench/fault-soak/pack-restart.sh packed (a JRE and jars: no
# Maven, no git). Unpacks into /root/symmem4j-restart; results (the CSV, the markdown report, the log) go to $OUT.
#
#   bash DEST/run-restart.sh unpack-part1                     first call: the runtime and ND4J's native jar
#   bash DEST/run-restart.sh soak [T] [SEED] [MIN] [WD] [PAR]  second call (part2 carried): the other jars, then
#                                                             T trials (default 100), PAR at once (default 5)
#   bash DEST/run-restart.sh all ...                          one call, when both parts are carried
# On 16 cores, 5 trials at once (each job: 2 ranks of one ND4J thread, about 10-15 s a trial) run 100 trials in
# about 5 minutes; the last line is the summary: trials, the slowest kill -> first step, hangs, corrupt, unequal.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
home=/root/symmem4j-restart
out=${OUT:-/tmp/symmem4j-restart-out}
mkdir -p "$home" "$out"

unpack() { # $1 part
  xz -dc "$here/$1" | tar -C "$home" -xf - || { echo "unpack $1 failed" >&2; exit 1; }
  echo "unpacked $1 into $home"
}

soak() {
  [ -x "$home/jre/bin/java" ] || { echo "no runtime in $home: run 'run-restart.sh unpack-part1' first (same warm machine)" >&2; exit 1; }
  local cp="" e
  for e in $(tr ':' ' ' < "$home/classpath.txt"); do cp="${cp:+$cp:}$home/$e"; done
  SOAK_JAVA="$home/jre/bin/java" SOAK_CLASSPATH="$cp" SOAK_COMMIT="$(cat "$home/COMMIT" 2>/dev/null || echo packed)" \
    SOAK_RESULTS="$out" bash "$here/restart-soak.sh" "${1:-100}" "${2:-1}" "${3:-9}" "${4:-120}" "${5:-5}" 2>&1 \
    | tee "$out/restart-soak.log" | grep -E "^(reference run|trial [0-9]+[ :]|time budget|wrote|SUMMARY)"
  return "${PIPESTATUS[0]}"
}

case "${1:-}" in
  unpack-part1) unpack part1.tar.xz ;;
  soak) shift; unpack part2.tar.xz; soak "$@" ;;
  all) shift; unpack part1.tar.xz; unpack part2.tar.xz; soak "$@" ;;
  *) echo "usage: run-restart.sh unpack-part1 | soak [trials] [seed] [minutes] [watchdog] [parallel] | all ..." >&2; exit 2 ;;
esac
