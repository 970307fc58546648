#!/usr/bin/env bash
# Checks that a new user can add symmem4j to a fresh Maven project from the README alone:
#   1. installs this checkout into the local repository (~/.m2), as the README says (`mvn install
#      -DskipTests`); note that this replaces the 0.1.0-SNAPSHOT artifacts other checkouts of this
#      machine may use. --no-install skips it (artifacts already installed);
#   2. creates an empty project in a temporary directory from the README's blocks, taken verbatim
#      from the lines after the markers `<!-- fresh-project-check: pom.xml -->` and
#      `<!-- fresh-project-check: src/main/java/FirstSteps.java -->`;
#   3. compiles it with Maven on the JDK 25 (as the README says, Maven itself must run on it);
#   4. runs it with the README's JVM flags (the block after `<!-- fresh-project-check: jvm flags -->`)
#      and checks that it exits 0, prints 5 epochs with a falling error, and that the JVM printed
#      none of the warnings the flags exist to silence; then runs it once more without any flag and
#      reports which warnings appear, which is what the README's flag table claims.
# Prints a markdown report on stdout; exits non-zero at the first failed check.
#
#   bench/fresh-project-check.sh [--no-install] [--online]
#
# Offline by default (mvn -o); --online lets Maven download what the local repository lacks.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
. bench/jdk25.sh
jdk=$(find_jdk25)

install=1
offline=-o
for arg in "$@"; do
  case "$arg" in
    --no-install) install=0 ;;
    --online) offline= ;;
    *) echo "unknown argument $arg (expected --no-install, --online)" >&2; exit 2 ;;
  esac
done

fail() {
  echo "FAILED: $*" >&2
  if [ -n "${bare_pid:-}" ]; then kill "$bare_pid" 2>/dev/null || true; fi
  exit 1
}

# The fenced block that follows the marker line in README.md, without its fences.
readme_block() {
  awk -v marker="<!-- fresh-project-check: $1 -->" '
    $0 == marker { found = 1; next }
    found == 1 && /^```/ { found = 2; next }
    found == 2 && /^```/ { exit }
    found == 2 { print }
  ' README.md
}

if [ "$install" = 1 ]; then
  mvn -q -B $offline install -DskipTests >/tmp/fresh-project-install.log 2>&1 \
    || { tail -40 /tmp/fresh-project-install.log >&2; fail "mvn install -DskipTests in $root (log above)"; }
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/symmem4j-fresh-project.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/src/main/java"
readme_block pom.xml >"$work/pom.xml"
readme_block src/main/java/FirstSteps.java >"$work/src/main/java/FirstSteps.java"
flags=$(readme_block "jvm flags")
[ -s "$work/pom.xml" ] || fail "README.md has no block after <!-- fresh-project-check: pom.xml -->"
[ -s "$work/src/main/java/FirstSteps.java" ] || fail "README.md has no block after <!-- fresh-project-check: src/main/java/FirstSteps.java -->"
[ -n "$flags" ] || fail "README.md has no block after <!-- fresh-project-check: jvm flags -->"

(cd "$work" && JAVA_HOME="$jdk" mvn -q -B $offline compile \
    org.apache.maven.plugins:maven-dependency-plugin:3.8.1:build-classpath -Dmdep.outputFile=cp.txt \
    >build.log 2>&1) || { tail -40 "$work/build.log" >&2; fail "the README's project does not build (log above)"; }
cp="$work/target/classes:$(cat "$work/cp.txt")"

# The run without flags (only reported, below) goes beside the checked one: the two JVMs' start-up and
# ND4J's native loading overlap.
(cd "$work" && "$jdk/bin/java" -cp "$cp" FirstSteps >bare.out 2>bare.err; echo $? >bare.rc) &
bare_pid=$!
# shellcheck disable=SC2086  # the flags are words
(cd "$work" && "$jdk/bin/java" $flags -cp "$cp" FirstSteps >run.out 2>run.err) \
  || { wait "$bare_pid" || true; cat "$work/run.out" "$work/run.err" >&2; fail "FirstSteps exited non-zero with the README's flags"; }
epochs=$(grep -c '^epoch ' "$work/run.out" || true)
[ "$epochs" = 5 ] || { cat "$work/run.out" >&2; fail "expected 5 epoch lines, found $epochs"; }
first=$(awk '/^epoch /{print $4; exit}' "$work/run.out")
last=$(awk '/^epoch /{v=$4} END{print v}' "$work/run.out")
awk -v a="$first" -v b="$last" 'BEGIN{exit !(b < a)}' || fail "mse did not fall: first=$first last=$last"
unwanted='restricted method|sun\.misc\.Unsafe|native access'
if grep -Ei "$unwanted" "$work/run.err" >/dev/null; then
  cat "$work/run.err" >&2
  fail "the JVM warned about native or Unsafe access although the README's flags were given"
fi

wait "$bare_pid" || true
bare_rc=$(cat "$work/bare.rc")

echo "# Fresh-project check"
echo
echo "- date: $(date -u +%Y-%m-%dT%H:%MZ)"
echo "- commit: $(git rev-parse --short HEAD)$([ -n "$(git status --porcelain -- . ':!bench/results')" ] && echo ' (plus uncommitted changes)')"
echo "- JDK: $("$jdk/bin/java" -version 2>&1 | head -1)"
echo "- Maven: $(JAVA_HOME="$jdk" mvn -v 2>/dev/null | head -1 | sed 's/\x1b\[[0-9;]*m//g')"
echo "- installed from this checkout first: $([ "$install" = 1 ] && echo yes || echo 'no (--no-install)')"
echo "- project: the README's pom.xml and FirstSteps.java, verbatim; $(wc -l <"$work/cp.txt" >/dev/null; tr ':' '\n' <"$work/cp.txt" | wc -l) jars on the class path"
echo
echo "## With the README's flags: passed"
echo
echo "\`java $flags -cp ... FirstSteps\`: exit 0, 5 epochs, mse $first -> $last, no native-access or Unsafe warning."
echo
echo '```'
cat "$work/run.out"
echo '```'
echo
echo "stderr:"
echo
echo '```'
cat "$work/run.err"
echo '```'
echo
echo "## Without any flag (what the README's flag table describes)"
echo
echo "exit code $bare_rc; stdout:"
echo
echo '```'
cat "$work/bare.out"
echo '```'
echo
echo "stderr (JVM warnings and log lines):"
echo
echo '```'
cat "$work/bare.err"
echo '```'
