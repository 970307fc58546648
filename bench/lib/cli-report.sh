# Sourced by the scripts that run one benchmark CLI into a markdown report (after bench/lib/preamble.sh, which sets
# jdk, cp and commit): cli_report REPORT TITLE SCRIPT MAIN [ARGS...] writes REPORT with the title, date, commit,
# command, the load before and after, the machine (nproc, lscpu) and the CLI's output, ND4J's start-up banner left out.
cli_report() {
  local report=$1 title=$2 script=$3 main=$4
  shift 4
  {
    echo "# $title"
    echo
    echo "Date: $(date -u '+%Y-%m-%d %H:%M UTC'); commit $commit; command: $script $*; load before: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo
    echo '```'
    nproc
    lscpu | head
    echo '```'
    echo
    "$jdk/bin/java" --enable-native-access=ALL-UNNAMED --add-modules=jdk.incubator.vector \
      --sun-misc-unsafe-memory-access=allow -cp "$cp" "$main" "$@" \
      2>/dev/null | grep -v '^ \|^[A-Z_]*:\|^HAVE_\|^STD version'
    echo
    echo "Load after: $(cut -d' ' -f1-3 /proc/loadavg)"
  } > "$report"
  echo "wrote $report" >&2
}
