#!/bin/sh
# tools/config-doc.sh [BUILD] — the reference tables of docs/configuration.md
# ("## Reference" to the end of the file), generated from the programs' own
# --help, so that the page cannot drift from the option table.
#
#   sh tools/config-doc.sh build > /tmp/ref.md       # print them
#   sh tools/config-doc.sh build --write             # replace them in docs/configuration.md
#
# Every key of kfac-ps, kfac-worker, kfac-statsd, kfac-invertd and
# kfac-train appears once, in the order the programs list them, one table
# per section. tests/integration/06-config-doc.sh fails when the page and
# the programs disagree. Exit: 0, 1 a program is missing or failed, 2 usage.
set -u
build=${1:-build}
write=0
[ "${2:-}" = --write ] && write=1
[ $# -le 2 ] || { echo "usage: tools/config-doc.sh [BUILD] [--write]" >&2; exit 2; }
page=docs/configuration.md
tmp=$(mktemp "${TMPDIR:-/tmp}/kfac-config-doc.XXXXXX") || exit 1
trap 'rm -f "$tmp" "$tmp.all" "$tmp.page"' EXIT
: >"$tmp.all"
for p in kfac-ps kfac-worker kfac-statsd kfac-invertd kfac-train; do
  [ -x "$build/$p" ] || { echo "config-doc: $build/$p is missing (make first)" >&2; exit 1; }
  "$build/$p" --help >>"$tmp.all" 2>&1 || { echo "config-doc: $build/$p --help failed" >&2; exit 1; }
done
# "  --sec.key=TYPE  (INFO, default DEF)" then "      meaning"; first
# appearance wins; sections in the order they first appear.
awk '
  function flush() { }
  /^  --[a-z_]+\.[a-z_0-9]+=/ {
    line = $0
    sub(/^  --/, "", line)
    key = line; sub(/=.*/, "", key)
    info = line; sub(/^[^(]*\(/, "", info); sub(/\)[ \t]*$/, "", info)
    def = info
    if (match(info, /, default .*$/)) { def = substr(info, RSTART + 10); info = substr(info, 1, RSTART - 1) }
    else if (match(info, /^default /)) { def = substr(info, 9); info = "" }
    else def = ""
    getline mean
    sub(/^[ \t]+/, "", mean)
    if (key in seen) next
    seen[key] = 1
    sec = key; sub(/\..*/, "", sec)
    if (!(sec in nsec)) { order[++ns] = sec; nsec[sec] = 0 }
    n = ++nsec[sec]
    gsub(/\|/, "\\|", info); gsub(/\|/, "\\|", mean)
    if (def == "" || def == "\"\"") def = "\"\""
    row[sec, n] = "| `" key "` | " info " | `" def "` | " mean " |"
  }
  END {
    for (i = 1; i <= ns; i++) {
      s = order[i]
      printf "### [%s]\n\n| key | type and range | default | meaning |\n|---|---|---|---|\n", s
      for (j = 1; j <= nsec[s]; j++) print row[s, j]
      if (i < ns) print ""
    }
  }' "$tmp.all" >"$tmp"
[ -s "$tmp" ] || { echo "config-doc: no options found in the --help output" >&2; exit 1; }
if [ "$write" = 0 ]; then cat "$tmp"; exit 0; fi
# Keep the page up to its first "### [" line after "## Reference", then the tables.
awk '/^## Reference/ { ref = 1 } ref && /^### \[/ { exit } { print }' "$page" >"$tmp.page"
cat "$tmp" >>"$tmp.page"
cp "$tmp.page" "$page"
