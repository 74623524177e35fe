#!/bin/sh
# tests/integration/70-fuzz.sh — a short coverage-guided fuzzing run of the
# network decoder and validators, the run-file parser, the model-file
# parser and the checkpoint reader (tests/fuzz/, `make fuzz-run`): KFAC_FUZZ_SECONDS (default 3) per
# harness under ASan + UBSan, after replaying every saved crash input. Fails
# on any crash, leak or undefined behaviour. Skipped (exit 77) where clang
# or its libFuzzer runtime is missing: the fuzzers need clang.
set -u
t0=$(date +%s)
if ! command -v clang >/dev/null 2>&1; then
  echo "70-fuzz: skipped: clang is not installed (apt-get install clang)"; exit 77
fi
probe=$(mktemp -d "${TMPDIR:-/tmp}/kfac-fuzzprobe.XXXXXX") || exit 1
trap 'rm -rf "$probe"' EXIT
printf '#include <stddef.h>\n#include <stdint.h>\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }\n' >"$probe/p.c"
if ! clang -fsanitize=fuzzer,address,undefined -o "$probe/p" "$probe/p.c" >"$probe/log" 2>&1; then
  echo "70-fuzz: skipped: clang cannot link a libFuzzer program here: $(head -n 1 "$probe/log")"; exit 77
fi
secs=${KFAC_FUZZ_SECONDS:-3}
if ! make --no-print-directory fuzz >"$probe/build.log" 2>&1; then
  echo "70-fuzz: FAIL: make fuzz did not build:"; tail -n 20 "$probe/build.log"; exit 1
fi
out=$(make --no-print-directory fuzz-run FUZZ_SECONDS="$secs" 2>&1)
rc=$?
echo "$out" | grep '^fuzz:' | sed 's/^/70-fuzz: /'
[ $rc = 0 ] || { echo "70-fuzz: FAIL: see the lines above"; exit 1; }
n=$(echo "$out" | grep -c 'no crash')
[ "$n" = 4 ] || { echo "70-fuzz: FAIL: expected 4 harnesses to report, got $n"; exit 1; }
echo "70-fuzz: ok: 4 harnesses, ${secs}s each, no crash ($(($(date +%s) - t0))s)"
