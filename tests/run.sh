#!/bin/sh
# tests/run.sh BIN... — run every unit-test binary, then every integration
# script in tests/integration/ (sorted), with a summary. Exits non-zero if any
# failed. Each integration script gets $BUILD (where the binaries are).
set -u
BUILD=${BUILD:-build}
export BUILD
fail=0; n=0; failed=""
for t in "$@"; do
  n=$((n + 1))
  echo "== $t"
  if ! "$t"; then fail=$((fail + 1)); failed="$failed $t"; fi
done
for t in tests/integration/*.sh; do
  [ -f "$t" ] || continue
  n=$((n + 1))
  echo "== $t"
  if ! sh "$t"; then fail=$((fail + 1)); failed="$failed $t"; fi
done
echo "== $n test programs, $fail failed${failed:+:$failed}"
[ "$fail" = 0 ]
