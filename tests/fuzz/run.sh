#!/bin/sh
# tests/fuzz/run.sh BUILD SECONDS HARNESS... — run each libFuzzer harness for
# SECONDS on a corpus seeded from real inputs (see tests/fuzz/module.mk),
# after replaying tests/fuzz/regress/<harness>/. A crash leaves its input in
# BUILD/fuzz/crash-<harness>-*: add it to tests/fuzz/regress/<harness>/ once
# fixed. Exits 1 if any harness found a crash, else 0.
set -u
b=$1; secs=$2; shift 2
top=$(pwd)
corpus=$b/fuzz/corpus
mkdir -p "$corpus"
fail=0
for h in "$@"; do
  c=$corpus/$h
  mkdir -p "$c"
  case $h in
    fuzz_msg) "$b/fuzz/fuzz_msg_seeds" "$c" || { echo "fuzz: writing the message seeds failed"; exit 1; } ;;
    fuzz_config) cp deploy/examples/*.ini experiments/*.ini "$c"/ 2>/dev/null ;;
    fuzz_model_file) cp models/*.model experiments/*.model "$c"/ 2>/dev/null ;;
    fuzz_ckpt) "$b/fuzz/fuzz_ckpt_seeds" "$c" || { echo "fuzz: writing the checkpoint seeds failed"; exit 1; } ;;
  esac
  if [ -d "tests/fuzz/regress/$h" ] && ls "tests/fuzz/regress/$h"/* >/dev/null 2>&1; then
    if ! "$b/fuzz/$h" "tests/fuzz/regress/$h"/* >"$b/fuzz/$h.regress.log" 2>&1; then
      echo "fuzz: $h: a regression input crashes again:"; tail -n 30 "$b/fuzz/$h.regress.log"; fail=1; continue
    fi
  fi
  n0=$(ls "$c" | wc -l)
  # ASan: a failed allocation returns NULL (the code must cope); libFuzzer's
  # own limits catch runaway memory. Progress lines go to the log.
  ASAN_OPTIONS=allocator_may_return_null=1:detect_leaks=1 \
    "$b/fuzz/$h" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
    -artifact_prefix="$b/fuzz/crash-$h-" "$c" >"$b/fuzz/$h.log" 2>&1
  rc=$?
  runs=$(sed -n 's/^Done \([0-9]*\) runs.*/\1/p' "$b/fuzz/$h.log" | tail -n 1)
  [ -n "$runs" ] || runs=$(grep -o '^#[0-9]*' "$b/fuzz/$h.log" | tail -n 1 | tr -d '#')
  if [ "$rc" != 0 ]; then
    echo "fuzz: $h: FOUND A CRASH after ${runs:-?} inputs (log: $b/fuzz/$h.log):"
    grep -E 'ERROR|SUMMARY|runtime error|#[0-9]+ 0x' "$b/fuzz/$h.log" | head -n 20
    ls "$b/fuzz/crash-$h-"* 2>/dev/null
    fail=1
  else
    echo "fuzz: $h: ${runs:-?} inputs in ${secs}s, no crash (corpus $n0 -> $(ls "$c" | wc -l) files)"
  fi
done
exit $fail
