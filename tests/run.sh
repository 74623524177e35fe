#!/bin/sh
# tests/run.sh BIN... — run every unit-test binary, then every integration
# script in tests/integration/ (sorted), with a summary. Each integration
# script gets $BUILD (where the binaries are).
# tests/run.sh --only TEST... — run just these, unit-test binaries and
# integration scripts (*.sh) alike, with the same summary:
#   BUILD=build sh tests/run.sh --only build/tests/base/test_config tests/integration/15-launcher-args.sh
#
# Exit status of a test program or script: 0 passed, 77 skipped (it cannot
# run here, e.g. no GPU; it prints a line "... skipped: <reason>"),
# anything else failed. A skip is counted as a skip, never as a pass.
# Prints "skipped: <reason>" per skipped program as it goes, and at the end
# the slowest programs with their seconds (all of them in
# $BUILD/test-times.txt), the failed and the skipped
# programs on a line each (with each failed program's first failure line:
# a report that shows only the tail still says why), then
# "N passed, N failed, N skipped" alone on the last line (what test-report
# readers look for).
# Exits non-zero only when something failed.
set -u
BUILD=${BUILD:-build}
export BUILD
# Check's per-test timeouts (tcase_set_timeout) guard against a hang; they
# were sized on a quiet machine, and the CPU-bound unit tests (gradient
# checks, K-FAC against SGD) took more than three times as long beside a
# two-core CPU load. The multiplier keeps them a guard there too.
CK_TIMEOUT_MULTIPLIER=${CK_TIMEOUT_MULTIPLIER:-4}
export CK_TIMEOUT_MULTIPLIER
pass=0; fail=0; skip=0; failed=""; skipped=""; why_failed=""
log=$(mktemp "${TMPDIR:-/tmp}/kfac-run.XXXXXX") || exit 1
times=$(mktemp "${TMPDIR:-/tmp}/kfac-times.XXXXXX") || exit 1
trap 'rm -f "$log" "$times"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# run NAME CMD...: run one test program and count the outcome. Its output
# goes to $log first (shown when it ends, and searched for the skip reason):
# a pipe to tee would hang on a daemon a failed test left behind.
run() {
  name=$1
  shift
  echo "== $name"
  t0=$(date +%s)
  "$@" >"$log" 2>&1
  st=$?
  t1=$(date +%s)
  cat "$log"
  echo "$((t1 - t0)) $name" >>"$times"
  case $st in
    0) pass=$((pass + 1)) ;;
    77)
      skip=$((skip + 1)); skipped="$skipped $name"
      why=$(grep -o 'skipped: .*' "$log" | tail -n 1)
      line="$name: ${why:-skipped: (no reason given)}"
      [ "$(tail -n 1 "$log")" = "$line" ] || echo "$line" ;;
    *)
      fail=$((fail + 1)); failed="$failed $name"; echo "$name: FAILED (status $st)"
      # the first failure line: an integration script's "FAIL:", Check's
      # ":F:" or ":E:", else the program's last line
      why=$(grep -m 1 -E 'FAIL:|:[FE]:' "$log" || tail -n 1 "$log")
      why_failed="$why_failed
  $name: $(printf '%s' "$why" | cut -c1-400)" ;;
  esac
}

only=0
[ "${1:-}" = --only ] && { only=1; shift; }
for t in "$@"; do
  case $t in
    *.sh) run "$t" sh "$t" ;;
    *) run "$t" "$t" ;;
  esac
done
if [ "$only" = 0 ]; then
  for t in tests/integration/*.sh; do
    [ -f "$t" ] || continue
    run "$t" sh "$t"
  done
fi
echo "slowest (s): $(sort -rn "$times" | head -n 8 | awk '{ printf "%s%s %s", (NR > 1 ? ", " : ""), $2, $1 }')"
# Every program's seconds, slowest first, for whoever trims the suite.
sort -rn "$times" >"$BUILD/test-times.txt" 2>/dev/null &&
  echo "all times: $BUILD/test-times.txt ($(awk '{ s += $1 } END { print s }' "$times") s in all)"
[ -n "$failed" ] && echo "failed:$failed$why_failed"
[ -n "$skipped" ] && echo "skipped:$skipped"
echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" = 0 ]
