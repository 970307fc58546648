#!/usr/bin/env bash
# Packs the restart soak (bench/restart-soak.sh, examples' RestartSoak: 2-rank DL4J jobs under
# `symmem4j-run --max-restarts 1`, kill -9 at random steps) for the CPUs of a lent machine, which has no Java, no
# Maven, no git and no network and takes at most 64 MiB per call. As bench/cpu-scaling/pack.sh, in two parts that
# each fit one call, every jar re-stored without compression (zip -0) so that xz sees raw class files and natives:
#   part1.tar.xz  a jlinked JDK 25 runtime and ND4J's native jar
#   part2.tar.xz  every other jar of examples' test class path, our modules' classes, classpath.txt
# plus run-restart.sh and bench/restart-soak.sh. On the machine (carry the DEST folder; commands run from the sent
# checkout's root): `bash DEST/run-restart.sh unpack-part1` in the first call, then, with part2 in place of part1
# and the machine still warm, `bash DEST/run-restart.sh soak [trials] [seed] [minutes] [watchdog] [parallel]`.
# With both parts in one carry: `run-restart.sh all ...`.
#
#   bench/fault-soak/pack-restart.sh [DEST]   (default DEST: .device-restart in this checkout; git-ignore it locally)
#
# Builds inside this checkout with test-compile (never `install`: ~/.m2 holds artifacts other checkouts use).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
. bench/jdk25.sh
jdk=$(find_jdk25)
export JAVA25_HOME=$jdk
dest=$(realpath -m "${1:-.device-restart}")
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
# examples is the last module of its own -am reactor, so its class path is the file's final content
mvn -q -B -o -pl examples -am test-compile dependency:build-classpath -Dmdep.includeScope=test \
  -Dmdep.outputFile="$stage/cp.txt"
mkdir -p "$stage/p1/lib" "$stage/p2/lib" "$stage/p2/classes"
"$jdk/bin/jlink" --add-modules java.base,java.desktop,java.sql,java.management,java.logging,java.xml,jdk.management,jdk.unsupported,jdk.incubator.vector,jdk.jfr \
  --strip-debug --no-man-pages --no-header-files --output "$stage/p1/jre"

restore() { # $1 jar, $2 destination folder: the same entries, stored
  local jar=$1 into=$2 tmp
  tmp=$(mktemp -d)
  (cd "$tmp" && unzip -q -o "$jar")
  (cd "$tmp" && zip -q -0 -r -X "$into/$(basename "$jar")" .)
  rm -rf "$tmp"
}
cp_rel=()
# the module's own classes first: dependency:build-classpath lists only what it depends on
for entry in "$root/examples/target/test-classes" "$root/examples/target/classes" $(tr ':' '\n' < "$stage/cp.txt"); do
  if [ -d "$entry" ]; then   # a reactor module's target/classes or target/test-classes
    name="$(basename "$(dirname "$(dirname "$entry")")")-$(basename "$entry")"
    cp -r "$entry" "$stage/p2/classes/$name"
    cp_rel+=("classes/$name")
  elif [ -f "$entry" ]; then
    case "$(basename "$entry")" in
      *nd4j-native-*-linux-x86_64.jar) restore "$entry" "$stage/p1/lib" ;;
      *.jar) restore "$entry" "$stage/p2/lib" ;;
      *) continue ;;
    esac
    cp_rel+=("lib/$(basename "$entry")")
  fi
done
(IFS=:; echo "${cp_rel[*]}") > "$stage/p2/classpath.txt"
echo "$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ':!bench/results' || echo ' (plus uncommitted changes)')" \
  > "$stage/p2/COMMIT"
mkdir -p "$dest"
(cd "$stage/p1" && tar -cf - jre lib) | xz -9 -T2 > "$dest/part1.tar.xz"
(cd "$stage/p2" && tar -cf - lib classes classpath.txt COMMIT) | xz -9 -T2 > "$dest/part2.tar.xz"
cp bench/fault-soak/run-restart.sh bench/restart-soak.sh "$dest/"
ls -l "$dest"
du -sh "$dest"/part*.tar.xz
