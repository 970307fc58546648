#!/usr/bin/env bash
# Packs the CPU scaling benchmark (ScalingBench) for the CPUs of a lent GPU machine, which has no Java
# and no network and takes at most 64 MiB per call: a jlinked JDK 25 runtime and every jar of the
# benchmarks' class path, each jar re-stored without compression (zip -0) so that xz sees the raw class
# files and native libraries (ND4J's libnd4jcpu.so: 323 MB -> about 30 MB), in two tar.xz parts that
# each fit one call:
#   part1.tar.xz  the runtime and ND4J's native jar
#   part2.tar.xz  every other jar (DL4J, ND4J's Java side, OpenBLAS's natives, ours)
# plus run.sh. The device command is run with carry [".device-dp"] from the checkout the device tool
# sends; run.sh unpack-part1 in the first call, then (while the machine is still warm: it is given back
# after 30 s idle) put part2 in place of part1 and call run.sh bench in the second. See run.sh.
#
#   bench/cpu-scaling/pack.sh [DEST]     (default DEST: .device-dp in this checkout, git-ignored by the caller)
#   XZ_LEVEL=-3 SPLIT_PART1=2 PACK_PARTS=1 bench/cpu-scaling/pack.sh DEST   part1 only, fast, in 2 chunks
#   PACK_PARTS=ours bench/cpu-scaling/pack.sh DEST   only our own jars (ours.tar.xz, a few MB), to carry after a
#                                                 part2 of the same dependencies was unpacked on the warm machine
#   PACK_PARTS=2 bench/cpu-scaling/pack.sh DEST   only part2 (our code changed; the runtime and ND4J's
#                                                 natives did not), into an existing DEST
# xz -9 of part1 takes minutes on 2 idle cores and half an hour on busy ones: XZ_LEVEL=-3 packs in a few minutes,
# larger (part1 then needs splitting into two carries: see run.sh's unpack-part1).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
. bench/jdk25.sh
jdk=$(find_jdk25)
dest=$(realpath -m "${1:-.device-dp}")

# package, never install: ~/.m2 holds artifacts other checkouts use
mvn -q -B -o -pl benchmarks -am -DskipTests package
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/p1/lib" "$stage/p2/lib"
parts=${PACK_PARTS:-1 2}
[[ " $parts " == *" 1 "* ]] && "$jdk/bin/jlink" --add-modules java.base,java.desktop,java.sql,java.management,java.logging,java.naming,java.net.http,java.xml,jdk.httpserver,jdk.management,jdk.unsupported,jdk.incubator.vector,jdk.jfr \
  --strip-debug --no-man-pages --no-header-files --output "$stage/p1/jre"

restore() { # $1 jar, $2 destination folder: the same entries, stored
  local jar=$1 into=$2 tmp
  tmp=$(mktemp -d)
  (cd "$tmp" && unzip -q -o "$jar")
  (cd "$tmp" && zip -q -0 -r -X "$into/$(basename "$jar")" .)
  rm -rf "$tmp"
}
cp_entries=$(tr ":" "\n" < benchmarks/target/classpath.txt; echo; ls "$root"/benchmarks/target/symmem4j-benchmarks-*.jar)
for jar in $cp_entries; do
  if [[ " $parts " == *" ours "* ]]; then # only our own jars (the dependencies did not change): ours.tar.xz, small
    case "$jar" in */symmem4j-*.jar) mkdir -p "$stage/ours/lib" && cp "$jar" "$stage/ours/lib/" ;; esac
    continue
  fi
  case "$jar" in
    */jmh-*|*/jopt-simple-*) continue ;;   # the JMH harness: not used by the CLIs run here
    *nd4j-native-*-linux-x86_64.jar) [[ " $parts " == *" 1 "* ]] && restore "$jar" "$stage/p1/lib" ;;
    *.jar) [[ " $parts " == *" 2 "* ]] && restore "$jar" "$stage/p2/lib" ;;
  esac
done
mkdir -p "$dest"
if [[ " $parts " == *" 1 "* ]]; then
  (cd "$stage/p1" && tar -cf - jre lib) | xz "${XZ_LEVEL:--9}" -T2 > "$dest/part1.tar.xz"
fi
if [[ " $parts " == *" 1 "* && -n "${SPLIT_PART1:-}" ]]; then # into N chunks that each fit a call beside the tree
  (cd "$dest" && split -n "$SPLIT_PART1" part1.tar.xz part1.tar.xz. && rm part1.tar.xz && echo "$SPLIT_PART1" > part1.chunks)
fi
if [[ " $parts " == *" ours "* ]]; then
  (cd "$stage/ours" && tar -cf - lib) | xz -6 -T2 > "$dest/ours.tar.xz"
fi
if [[ " $parts " == *" 2 "* ]]; then
  (cd "$stage/p2" && tar -cf - lib) | xz "${XZ_LEVEL:--9}" -T2 > "$dest/part2.tar.xz"
fi
cp bench/cpu-scaling/run.sh "$dest/"
ls -l "$dest"
du -sh "$dest"/*.tar.xz*
