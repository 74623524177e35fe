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
#
# Each program runs under coreutils' timeout, in a process group of its own,
# for at most $KFAC_TEST_TIMEOUT_S seconds (default 1200: the slowest
# program, 58-hostile-suite, took 441 s beside two busy loops on 2 CPUs,
# bench/RESULTS.md). One that runs past it gets SIGTERM, SIGKILL 15 s
# later, counts as failed and is named "timed out" in the summary. When a
# program ends, whatever it left running in its group (a daemon of a failed
# test) is killed and named, so it cannot hold a port for the next one.
set -u
BUILD=${BUILD:-build}
export BUILD
# Check's per-test timeouts (tcase_set_timeout) guard against a hang; they
# were sized on a quiet machine, and the CPU-bound unit tests (gradient
# checks, K-FAC against SGD) took more than three times as long beside a
# two-core CPU load. The multiplier keeps them a guard there too.
CK_TIMEOUT_MULTIPLIER=${CK_TIMEOUT_MULTIPLIER:-4}
export CK_TIMEOUT_MULTIPLIER
limit=${KFAC_TEST_TIMEOUT_S:-1200}
case $limit in
  ''|*[!0-9]*|0) echo "tests/run.sh: KFAC_TEST_TIMEOUT_S must be a positive number of seconds, not '$limit'" >&2; exit 2 ;;
esac
command -v timeout >/dev/null || { echo "tests/run.sh: needs timeout (coreutils)" >&2; exit 2; }
pass=0; fail=0; skip=0; failed=""; skipped=""; why_failed=""
log=$(mktemp "${TMPDIR:-/tmp}/kfac-run.XXXXXX") || exit 1
times=$(mktemp "${TMPDIR:-/tmp}/kfac-times.XXXXXX") || exit 1
child=""
trap 'rm -f "$log" "$times"' EXIT
# timeout passes a signal it gets on to its group: an interrupted run
# leaves no test program behind.
trap '[ -n "$child" ] && kill -TERM "$child" 2>/dev/null; exit 130' INT
trap '[ -n "$child" ] && kill -TERM "$child" 2>/dev/null; exit 143' TERM

# run NAME CMD...: run one test program and count the outcome. Its output
# goes to $log first (shown when it ends, and searched for the skip reason):
# a pipe to tee would hang on a daemon a failed test left behind.
run() {
  name=$1
  shift
  echo "== $name"
  t0=$(date +%s)
  # timeout makes itself the leader of a new process group (its pid is the
  # group's id), and on expiry signals the whole group.
  timeout -k 15 "$limit" "$@" >"$log" 2>&1 </dev/null &
  child=$!
  wait "$child"
  st=$?
  t1=$(date +%s)
  if kill -0 "-$child" 2>/dev/null; then
    kill -KILL "-$child" 2>/dev/null
    echo "$name: left processes running; killed them" >>"$log"
  fi
  child=""
  cat "$log"
  timed_out=""
  case $st in 124|137) [ $((t1 - t0)) -ge "$limit" ] && timed_out=1 ;; esac
  echo "$((t1 - t0)) $name" >>"$times"
  if [ -n "$timed_out" ]; then
    fail=$((fail + 1)); failed="$failed $name"
    echo "$name: FAILED (timed out after $limit s)"
    why_failed="$why_failed
  $name: timed out after $limit s (KFAC_TEST_TIMEOUT_S)"
    return
  fi
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
