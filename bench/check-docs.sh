#!/usr/bin/env bash
# Checks the documentation, as CI does (.ci/run, after `mvn -B verify`):
#   1. every relative link and image of README.md, CONTRIBUTING.md and docs/**/*.md resolves, #anchors
#      included, and every page is in mkdocs.yml's nav (bench/check-docs.py; Python 3, no packages);
#   2. the site builds with MkDocs in strict mode (any warning fails) into target/docs-site/: Debian's `mkdocs`
#      and `mkdocs-material` (apt-get install mkdocs mkdocs-material), as .ci/run installs them.
# The java blocks of the same files are compiled by DocsSnippetsTest (examples), part of `mvn verify`;
# --snippets runs that test here too (it builds what it needs with Maven, offline).
# --javadoc first copies each library module's javadoc (built by `mvn -Prelease package` into
# <module>/target/reports/apidocs) to docs/api/<module>/ (git-ignored), so the site serves it under api/.
#
#   bench/check-docs.sh [--javadoc] [--snippets]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

javadoc=0
snippets=0
for arg in "$@"; do
  case "$arg" in
    --javadoc) javadoc=1 ;;
    --snippets) snippets=1 ;;
    *) echo "check-docs: unknown argument $arg (expected --javadoc, --snippets)" >&2; exit 2 ;;
  esac
done

python3 bench/check-docs.py

if [ "$javadoc" = 1 ]; then
  rm -rf docs/api
  mkdir -p docs/api
  copied=0
  for module in parallel gradsync pipeline dl4j-symmem-plugin prometheus launcher; do
    for dir in "$module/target/reports/apidocs" "$module/target/apidocs"; do
      if [ -f "$dir/index.html" ]; then
        cp -r "$dir" "docs/api/$module"
        copied=$((copied + 1))
        break
      fi
    done
  done
  [ "$copied" -gt 0 ] || { echo "check-docs: no javadoc under <module>/target/reports/apidocs: run 'mvn -Prelease -DskipTests package' first (the javadoc is built by the release profile)" >&2; exit 1; }
  echo "check-docs: javadoc of $copied modules copied to docs/api/"
fi

if ! command -v mkdocs >/dev/null 2>&1; then
  echo "check-docs: mkdocs is missing: apt-get install mkdocs mkdocs-material (Debian), then run again" >&2
  exit 1
fi
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! mkdocs build --strict --clean >"$log" 2>&1; then
  grep -v -e DeprecationWarning -e '^  ' "$log" >&2 || true
  echo "check-docs: the site does not build (mkdocs build --strict; warnings above)" >&2
  exit 1
fi
echo "check-docs: the site builds (mkdocs build --strict: $(find target/docs-site -name '*.html' | wc -l) pages in target/docs-site/)"

if [ "$snippets" = 1 ]; then
  . bench/jdk25.sh
  JAVA25_HOME=$(find_jdk25)
  export JAVA25_HOME
  mvn -q -B -o -pl examples -am test -Dtest=DocsSnippetsTest -Dsurefire.failIfNoSpecifiedTests=false
  echo "check-docs: every java block compiles (DocsSnippetsTest)"
fi
