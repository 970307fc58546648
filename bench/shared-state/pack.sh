#!/usr/bin/env bash
# Packs the shared-state benchmarks (issue #33) for the CPUs of a lent machine that has no Java and no network and
# takes at most 64 MiB per call, the repository (~25 MB) included. The whole pack (~35 MB) does not fit beside the
# repository, so it comes in two parts (22.7 and 11.8 MB on 2026-11-29), each carried by a call of its own (as
# bench/cpu-scaling/pack.sh's):
#   DEST/a/state-a.tar.xz  a jlinked JDK 25 runtime WITH jdk.compiler (Chronicle Map compiles classes at run time), our
#                          jars, JMH, Agrona, Aeron's client and driver, picocli, SLF4J: every step but `map` and
#                          `chronicle-p99` runs from it alone
#   DEST/b/state-b.tar.xz  Chronicle Map and its libraries (the Chronicle jars, the Java compiler wrapper, JNR, JNA,
#                          ASM, affinity, JavaPoet) and the few other jars of the old single pack
# and run.sh beside each archive. None of DL4J/ND4J is packed. Each part must stay at most 30 MB (checked here), so that
# it fits a call beside the repository. With the device tool, while the machine stays warm between the two calls:
#   1. command='bash .device-state/a/run.sh unpack',                carry=['.device-state/a']
#   2. command='bash .device-state/b/run.sh ring-fill chronicle-p99', carry=['.device-state/b']
# Both unpack into the same folder outside the repository (/tmp/symmem4j-state, run.sh's HOME_DIR); the second call
# runs the steps. Steps without Chronicle Map run in one call: command='bash .device-state/a/run.sh ring-fill',
# carry=['.device-state/a'].
#
#   bench/shared-state/pack.sh [DEST]      (default DEST: .device-state in this checkout, git-ignored)
#   PACK_PARTS=a  (or WITHOUT_CHRONICLE=1)  part A only, for the steps without Chronicle Map
#   PACK_PARTS=b                            part B only (Chronicle Map's jars do not change with our code)
#   SKIP_BUILD=1                            pack the jars already built (after a package of this same tree)
# package, never install: ~/.m2 holds artifacts other checkouts use.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
. bench/jdk25.sh
jdk=$(find_jdk25)
dest=$(realpath -m "${1:-.device-state}")
parts=${PACK_PARTS:-a b}
[ "${WITHOUT_CHRONICLE:-0}" = 1 ] && parts=a
case " $parts " in
  *" a "*|*" b "*) ;;
  *) echo "PACK_PARTS='$parts' expected 'a', 'b' or 'a b' (fix: PACK_PARTS='a b' packs both)" >&2; exit 1 ;;
esac
has() { [[ " $parts " == *" $1 "* ]]; }
limit_bytes=$((30 * 1000 * 1000))

[ "${SKIP_BUILD:-0}" = 1 ] || mvn -q -B -o -pl benchmarks -am -DskipTests -Dmaven.javadoc.skip=true -Dmaven.source.skip=true package
version=$(sed -n '/<parent>/,/<\/parent>/d; s:^  <version>\(.*\)</version>$:\1:p' pom.xml | head -1)
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/a/lib" "$stage/b/lib"
# the class path's jars the suite needs: part a has JMH and its two libraries, Agrona, Aeron's client, driver and
# annotations, picocli and SLF4J, which every step needs; part b has every other jar that the filter below lets through:
# Chronicle Map and its libraries (Chronicle, JNR, JNA, ASM, ...) and what came with them. Everything of DL4J, ND4J,
# JavaCPP and their natives stays out (hundreds of MB, unused here), and aeron-all above all (benchmarks/pom.xml
# excludes it; should it come back: DL4J's parameter server brings Aeron 1.39, a shaded jar whose Agrona 1.x classes
# would shadow the Agrona 2 measured here)
classpath=$(cat benchmarks/target/classpath.txt)
# Aeron is built against an older Agrona 2.x than the one measured: every Agrona member its classes use must exist
jar_of() { tr ':' '\n' <<< "$classpath" | grep "/$1-[0-9][^/]*\.jar\$" | head -1; }
if has a; then
  "$jdk/bin/java" bench/shared-state/AgronaLinkCheck.java "$(jar_of agrona)" "$(jar_of aeron-client)" "$(jar_of aeron-driver)" \
    || { echo "Aeron's jars use Agrona members the packed Agrona lacks: align aeron.version and agrona.version" >&2; exit 1; }
  # jdk.compiler: Chronicle Map (part B) generates and compiles classes at run time; it has to be in the runtime
  "$jdk/bin/jlink" --add-modules java.base,java.management,jdk.management,java.logging,jdk.unsupported,jdk.incubator.vector,java.sql,java.naming,jdk.jfr,java.instrument,jdk.zipfs,jdk.compiler \
    --strip-debug --no-man-pages --no-header-files --output "$stage/a/jre"
  # javac's symbol files for --release (10 MB, zip-compressed: as much again packed); Chronicle Map compiles for the
  # runtime it runs on and passes no --release
  rm -f "$stage/a/jre/lib/ct.sym"
  for module in parallel state examples benchmarks; do
    cp "$module/target/symmem4j-$module-$version.jar" "$stage/a/lib/"
  done
fi
for jar in $(tr ':' '\n' <<< "$classpath"); do
  case "$(basename "$jar")" in
    symmem4j-*|deeplearning4j-*|nd4j-*|datavec-*|javacpp*|openblas*|opencv*|ffmpeg*|hdf5*|leptonica*|mkl*|\
    protobuf*|flatbuffers*|guava*|jackson*|commons-compress*|xchart*|VectorGraphics2D*|graphics2d*|animated-gif*|\
    micrometer*|prometheus*|javalin*|jetty*|kotlin*|netty*|aeron-all*|fastutil*|freemarker*|httpclient*|httpcore*|\
    joda-time*|threetenbp*|commons-collections4*|*-sources.jar) ;;
    jmh-core-*|jopt-simple-*|commons-math3-*|agrona-*|aeron-*|picocli-*|slf4j-*) if has a; then cp "$jar" "$stage/a/lib/"; fi ;;
    *.jar) if has b; then cp "$jar" "$stage/b/lib/"; fi ;;
  esac
done
commit=$(git rev-parse --short HEAD)
status=0
for part in a b; do
  has $part || continue
  echo "$commit" > "$stage/$part/commit-$part"
  rm -rf "${dest:?}/$part"
  mkdir -p "$dest/$part"
  # xz -9: a 64 MiB window over the runtime's module image; the jars are zip-compressed already
  (cd "$stage/$part" && tar -cf - .) | xz -9 -T2 > "$dest/$part/state-$part.tar.xz"
  cp bench/shared-state/run.sh "$dest/$part/"
  bytes=$(stat -c %s "$dest/$part/state-$part.tar.xz")
  echo "part $part: $(du -sh "$stage/$part" | cut -f1) unpacked, $bytes bytes packed ($(ls "$stage/$part/lib" | wc -l) jars)"
  if [ "$bytes" -gt "$limit_bytes" ]; then
    echo "part $part: $bytes bytes packed, expected at most $limit_bytes so that it fits a call beside the repository" \
      "(fix: move jars from part a to part b in this script's case list, or leave modules out of jlink)" >&2
    status=1
  fi
done
rm -f "$dest/state.tar.xz" "$dest/run.sh" # the single-archive pack of before: its run.sh would not find the parts
echo "packed $dest — with the device tool, while the machine stays warm between the calls:"
if has a; then echo "  1. command='bash $(basename "$dest")/a/run.sh unpack', carry=['$(basename "$dest")/a']"; fi
if has b; then echo "  2. command='bash $(basename "$dest")/b/run.sh ring-fill chronicle-p99', carry=['$(basename "$dest")/b']"; else echo "  or one call: command='bash $(basename "$dest")/a/run.sh ring-fill', carry=['$(basename "$dest")/a']"; fi
exit $status
