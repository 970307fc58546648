#!/usr/bin/env bash
# Prints the path of a JDK >= 25 home: $JAVA25_HOME, then $JAVA_HOME, then /usr/lib/jvm/*.
# Sourced by the bench scripts; the Maven build finds the same JDK through maven-toolchains-plugin.
find_jdk25() {
  local c v
  for c in "${JAVA25_HOME:-}" "${JAVA_HOME:-}" /usr/lib/jvm/*; do
    [ -n "$c" ] && [ -x "$c/bin/java" ] || continue
    v=$("$c/bin/java" -XshowSettings:properties -version 2>&1 | sed -n 's/^ *java.specification.version = //p')
    if [ -n "$v" ] && [ "${v%%.*}" -ge 25 ] 2>/dev/null; then
      echo "$c"
      return 0
    fi
  done
  echo "no JDK >= 25 found (set JAVA25_HOME)" >&2
  return 1
}
