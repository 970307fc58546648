#!/usr/bin/env bash
# Packs the shared-state benchmarks (issue #33) for the CPUs of a lent machine that has no Java and no network and
# takes at most 64 MiB per call: a jlinked JDK 25 runtime and only the jars the host JMH suite needs (ours, JMH,
# Agrona, Aeron's client and driver, Chronicle Map and its libraries, picocli, SLF4J; none of DL4J/ND4J), as one
# state.tar.xz in DEST (default
# .device-state, git-ignored), with run.sh beside it (it unpacks the archive first). Then, with the device tool:
#   command='bash .device-state/run.sh', carry=['.device-state']
# package, never install: ~/.m2 holds artifacts other checkouts use.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
. bench/jdk25.sh
jdk=$(find_jdk25)
dest=$(realpath -m "${1:-.device-state}")

# SKIP_BUILD=1: pack the jars already built (after a package of this same tree)
[ "${SKIP_BUILD:-0}" = 1 ] || mvn -q -B -o -pl benchmarks -am -DskipTests -Dmaven.javadoc.skip=true -Dmaven.source.skip=true package
version=$(sed -n '/<parent>/,/<\/parent>/d; s:^  <version>\(.*\)</version>$:\1:p' pom.xml | head -1)
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/lib"
# jdk.compiler: Chronicle Map generates and compiles classes at run time; not compressed here, xz does better
# WITHOUT_CHRONICLE=1: a pack of ~24 MB instead of ~40 MB, without Chronicle Map, its libraries and jdk.compiler, for a
# call whose repository leaves less than 40 MB of the 64 MiB a call carries; its run.sh refuses `map` and
# `chronicle-p99` (measured with it: `ring-fill`)
slim=${WITHOUT_CHRONICLE:-0}
modules=java.base,java.management,jdk.management,java.logging,jdk.unsupported,jdk.incubator.vector,java.sql,java.naming,jdk.jfr,java.instrument,jdk.zipfs
[ "$slim" = 1 ] || modules=$modules,jdk.compiler
"$jdk/bin/jlink" --add-modules "$modules" \
  --strip-debug --no-man-pages --no-header-files --output "$stage/jre"
for module in parallel state examples benchmarks; do
  cp "$module/target/symmem4j-$module-$version.jar" "$stage/lib/"
done
# the class path's jars the suite needs: JMH and its two libraries, Agrona, Aeron's client, driver and annotations,
# the Chronicle libraries and theirs, picocli, SLF4J; everything of DL4J, ND4J, JavaCPP and their natives stays out
# (hundreds of MB, unused here), and aeron-all above all (benchmarks/pom.xml excludes it; should it come back: DL4J's
# parameter server brings Aeron 1.39, a shaded jar whose Agrona 1.x classes would shadow the Agrona 2 measured here)
classpath=$(cat benchmarks/target/classpath.txt)
# Aeron is built against an older Agrona 2.x than the one measured: every Agrona member its classes use must exist
jar_of() { tr ':' '\n' <<< "$classpath" | grep "/$1-[0-9][^/]*\.jar\$" | head -1; }
"$jdk/bin/java" bench/shared-state/AgronaLinkCheck.java "$(jar_of agrona)" "$(jar_of aeron-client)" "$(jar_of aeron-driver)" \
  || { echo "Aeron's jars use Agrona members the packed Agrona lacks: align aeron.version and agrona.version" >&2; exit 1; }
for jar in $(tr ':' '\n' <<< "$classpath"); do
  case "$(basename "$jar")" in
    symmem4j-*|deeplearning4j-*|nd4j-*|datavec-*|javacpp*|openblas*|opencv*|ffmpeg*|hdf5*|leptonica*|mkl*|\
    protobuf*|flatbuffers*|guava*|jackson*|commons-compress*|xchart*|VectorGraphics2D*|graphics2d*|animated-gif*|\
    micrometer*|prometheus*|javalin*|jetty*|kotlin*|netty*|aeron-all*|fastutil*|freemarker*|httpclient*|httpcore*|\
    joda-time*|threetenbp*|commons-collections4*|*-sources.jar) ;;
    chronicle*|compiler-*|jnr*|jffi*|javapoet*|affinity*|jna*) [ "$slim" = 1 ] || cp "$jar" "$stage/lib/" ;;
    *.jar) cp "$jar" "$stage/lib/" ;;
  esac
done
git rev-parse --short HEAD > "$stage/commit"
rm -rf "$dest"
mkdir -p "$dest"
(cd "$stage" && tar -cf - jre lib commit) | xz -6 -T2 > "$dest/state.tar.xz"
cp bench/shared-state/run.sh "$dest/"
du -sh "$stage/jre" "$stage/lib" "$dest/state.tar.xz"
echo "packed $dest — run it with the device tool: command='bash $(basename "$dest")/run.sh', carry=['$(basename "$dest")']"
