#!/bin/sh
# tests/integration/06-config-doc.sh — docs/configuration.md's reference
# tables are the programs' own --help: tools/config-doc.sh regenerates them
# and this test fails on any difference (a key added, renamed or
# re-described without the page), naming the fix.
set -u
BUILD=${BUILD:-build}
t0=$(date +%s)
out=$(mktemp "${TMPDIR:-/tmp}/kfac-config-doc-test.XXXXXX") || exit 1
trap 'rm -f "$out" "$out.page"' EXIT
sh tools/config-doc.sh "$BUILD" >"$out" || { echo "06-config-doc: FAIL: tools/config-doc.sh failed"; exit 1; }
awk '/^## Reference/ { ref = 1 } ref && /^### \[/ { go = 1 } go { print }' docs/configuration.md >"$out.page"
[ "$(grep -c '^| `' "$out")" -ge 50 ] || { echo "06-config-doc: FAIL: fewer than 50 keys generated"; exit 1; }
if ! diff -u "$out.page" "$out" >&2; then
  echo "06-config-doc: FAIL: docs/configuration.md's reference differs from the programs' --help (above: - page, + programs); run: sh tools/config-doc.sh $BUILD --write"
  exit 1
fi
echo "06-config-doc: ok: $(grep -c '^| `' "$out") keys in docs/configuration.md match the programs' --help ($(($(date +%s) - t0))s)"
