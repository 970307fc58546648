#!/usr/bin/env bash
# Packs the fault soaks (it-tests' tests tagged `soak`) for the CPUs of a lent machine, which has no Java,
# no Maven and no network and takes at most 64 MiB per call: a jlinked JDK 25 runtime, it-tests' test class
# path (our modules' classes, their jars), the benchmarks' classes (the store-starvation and metrics-stall
# CLIs need nothing beyond that class path) and JUnit's console launcher, in one tar.xz, plus run.sh.
# On the machine, `bash .device-soak/run.sh SOAK...` unpacks it and runs the named soaks or CLIs (see run.sh).
#
#   bench/fault-soak/pack.sh [DEST]     (default DEST: .device-soak in this checkout; add it to .git/info/exclude)
#
# Builds inside this checkout (never `install`: ~/.m2 holds artifacts other checkouts use).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
. bench/jdk25.sh
jdk=$(find_jdk25)
export JAVA25_HOME=$jdk
dest=$(realpath -m "${1:-.device-soak}")
junit_platform=1.11.4

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
# it-tests is the last module of its own -am reactor, so its class path is the file's final content
mvn -q -B -pl benchmarks -am compile
mvn -q -B -pl it-tests -am test-compile dependency:build-classpath -Dmdep.includeScope=test \
  -Dmdep.outputFile="$stage/cp.txt"
mvn -q -B dependency:copy -Dartifact=org.junit.platform:junit-platform-console:$junit_platform \
  -DoutputDirectory="$stage/p/lib" >/dev/null
mvn -q -B dependency:copy -Dartifact=org.junit.platform:junit-platform-launcher:$junit_platform \
  -DoutputDirectory="$stage/p/lib" >/dev/null
mvn -q -B dependency:copy -Dartifact=org.junit.platform:junit-platform-reporting:$junit_platform \
  -DoutputDirectory="$stage/p/lib" >/dev/null

mkdir -p "$stage/p/classes"
cp_rel=()
# the module's own test classes first: dependency:build-classpath lists only what it depends on
for entry in "$root/it-tests/target/test-classes" "$root/benchmarks/target/classes" $(tr ':' '\n' < "$stage/cp.txt"); do
  if [ -d "$entry" ]; then   # a reactor module's target/classes or target/test-classes
    module=$(basename "$(dirname "$(dirname "$entry")")")
    name="$module-$(basename "$entry")"
    cp -r "$entry" "$stage/p/classes/$name"
    cp_rel+=("classes/$name")
  elif [ -f "$entry" ]; then
    # DL4J and ND4J (with their helpers) only reach it-tests' DL4J tests, not the soaks: left out to fit 64 MiB
    case "$(basename "$entry")" in
      deeplearning4j-*|nd4j-*|fastutil-*|guava-*|jackson-*|protobuf-*|commons-*|jna-*|oshi-*|javacpp-*|flatbuffers-*|gson-*|neoitertools-*|threetenbp-*|resources-*|byteunits-*) continue ;;
    esac
    cp "$entry" "$stage/p/lib/"
    cp_rel+=("lib/$(basename "$entry")")
  fi
done
for j in "$stage"/p/lib/junit-platform-{console,launcher,reporting}-$junit_platform.jar; do
  cp_rel+=("lib/$(basename "$j")")
done
(IFS=:; echo "${cp_rel[*]}") > "$stage/p/classpath.txt"

"$jdk/bin/jlink" --add-modules java.base,java.logging,java.management,java.net.http,java.xml,jdk.httpserver,jdk.management,jdk.unsupported,jdk.incubator.vector \
  --strip-debug --no-man-pages --no-header-files --output "$stage/p/jre"

mkdir -p "$dest"
(cd "$stage/p" && tar -cf - jre lib classes classpath.txt) | xz -6 -T2 > "$dest/soak.tar.xz"
cp bench/fault-soak/run.sh "$dest/"
echo "commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo ' (with uncommitted changes)')" > "$dest/COMMIT"
ls -l "$dest"
