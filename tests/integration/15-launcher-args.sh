#!/bin/sh
# tests/integration/15-launcher-args.sh — deploy/kfac-launch turns one
# command line into the right command line for every daemon (--dry-run
# prints them, nothing is started):
#   - a shared key goes to every daemon, qualified (--batch -> --data.batch);
#   - a daemon's own key goes only to that daemon (--delay-ms -> only the
#     inverse daemons get --invertd.delay_ms), so no daemon sees an option it
#     would reject;
#   - a key only in daemons' own sections goes to each (--threads);
#   - the counts come from the configuration and the overrides (--workers 3
#     gives 3 workers with ids 1..3), --port N points everybody at port N;
#   - an unknown option, --id and a bad --port are usage errors (exit 2).
. tests/integration/harness.inc
h_init 15-launcher-args
cfg=deploy/examples/mnist-cnn-kfac.ini
out="$H_DIR/cmds"
KFAC_BIN="$BUILD" sh deploy/kfac-launch "$cfg" --dry-run --port 23456 --workers 3 --statsd 1 --invertd 2 \
  --batch 32 --delay-ms 5 --threads 2 --kfac.damping=0.01 >"$out" 2>"$H_DIR/err.log" ||
  h_fail "--dry-run failed: $(cat "$H_DIR/err.log")"
[ "$(grep -c '' "$out")" = 7 ] || h_fail "expected 7 daemons (1 ps, 3 workers, 1 statsd, 2 invertd), got: $(cat "$out")"
[ "$(grep -c 'kfac-worker ' "$out")" = 3 ] || h_fail "expected 3 workers"
for i in 1 2 3; do grep "kfac-worker " "$out" | grep -q -- "--worker.id=$i" || h_fail "no worker with id $i"; done
grep -q -- "--data.batch=32" "$out" || h_fail "--batch did not become --data.batch"
[ "$(grep -c -- '--data.batch=32' "$out")" = 7 ] || h_fail "--data.batch did not reach every daemon"
[ "$(grep -c -- '--kfac.damping=0.01' "$out")" = 7 ] || h_fail "--kfac.damping did not reach every daemon"
[ "$(grep -c -- '--invertd.delay_ms=5' "$out")" = 2 ] || h_fail "--delay-ms should reach exactly the 2 inverse daemons"
grep -v "kfac-invertd " "$out" | grep -q -- "delay_ms" && h_fail "a daemon other than kfac-invertd got delay_ms"
grep "kfac-ps " "$out" | grep -q -- "--ps.threads=2" || h_fail "kfac-ps did not get --ps.threads"
grep "kfac-worker " "$out" | grep -q -- "--worker.threads=2" || h_fail "the workers did not get --worker.threads"
grep "kfac-ps " "$out" | grep -q -- "--ps.bind=tcp://127.0.0.1:23456" || h_fail "kfac-ps does not bind port 23456"
[ "$(grep -c -- '--cluster.ps=tcp://127.0.0.1:23456' "$out")" = 7 ] || h_fail "not every daemon points at port 23456"
grep "kfac-statsd " "$out" | grep -q "^nice -n 10 " || h_fail "kfac-statsd does not run at nice 10"

for bad in "--bogus 1" "--id 3" "--port 70000" "--nice 40"; do
  # shellcheck disable=SC2086
  KFAC_BIN="$BUILD" sh deploy/kfac-launch "$cfg" --dry-run $bad >/dev/null 2>&1
  st=$?
  [ "$st" = 2 ] || h_fail "'$bad' exited with $st, expected 2 (usage error)"
done
KFAC_BIN="$BUILD" sh deploy/kfac-launch /nonexistent.ini --dry-run >/dev/null 2>&1
[ $? = 2 ] || h_fail "a missing configuration file is not a usage error"
h_pass "overrides routed to the daemons that read them; usage errors exit 2"
