#!/usr/bin/env bash
# Writes build-info.properties (version, commit) for org.symmem4j.parallel.BuildInfo, the source of the
# symmem4j_build_info gauge and of the doctor's header. Outside a git checkout (a source tarball) the
# commit is "unknown"; a tree with uncommitted changes gets "-dirty" appended.
# usage: build-info.sh VERSION OUTPUT_DIR
set -euo pipefail
version="$1"
out="$2"
here="$(cd "$(dirname "$0")" && pwd)"
commit=unknown
if command -v git >/dev/null 2>&1 && git -C "$here" rev-parse --git-dir >/dev/null 2>&1; then
  commit="$(git -C "$here" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)"
  if [ "$commit" != unknown ] && ! git -C "$here" diff --quiet HEAD -- 2>/dev/null; then
    commit="$commit-dirty"
  fi
fi
mkdir -p "$out"
printf 'version=%s\ncommit=%s\n' "$version" "$commit" > "$out/build-info.properties"
