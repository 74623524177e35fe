#!/bin/sh
# tests/integration/60-launcher-stop.sh — stopping deploy/kfac-launch stops
# the cluster. A long K-FAC run (kfac-ps, 2 workers, 1 statsd, 2 invertd)
# is interrupted with SIGTERM once it trains (SIGINT is what Ctrl-C sends;
# a background job of a non-interactive shell ignores SIGINT, so the test
# uses the launcher's other stop signal, which takes the same path). Passes
# when the launcher exits 143 within 30 s, every daemon logged a clean stop
# and none is left running.
. tests/integration/harness.inc
h_init 60-launcher-stop
port=$(h_port) || exit 1
cat >"$H_DIR/run.ini" <<EOF2
[run]
steps = 100000
eval_every = 100000
eval_n = 500
out_dir = $H_DIR/out
[model]
file = models/mnist-mlp.model
[data]
batch = 32
train_n = 2000
[cluster]
workers = 2
statsd = 1
invertd = 2
[ps]
progress_every = 10
EOF2
h_start launch env KFAC_BIN="$BUILD" sh deploy/kfac-launch "$H_DIR/run.ini" --port "$port" --quiet
launch=$H_PID
h_wait_log "$H_DIR/out/logs/ps.log" "step +10/" 90 || h_fail "training did not start"
# Every daemon is up (statsd and invertd run at nice 10 and may come last).
t=0
while [ "$(grep -c " joined " "$H_DIR/out/logs/ps.log")" -lt 5 ]; do
  [ $t -lt 300 ] || h_fail "not all 5 clients joined within 60 s"
  sleep 0.2
  t=$((t + 1))
done
kill -TERM "$launch"
h_wait "$launch" 30
st=$H_STATUS
[ "$st" = 143 ] || h_fail "kfac-launch exited with status $st after SIGTERM (expected 143; 124: still running)"
for f in "$H_DIR"/out/logs/*.log; do
  grep -Eq "stopping|exiting|Shutdown|shutting down" "$f" || h_fail "${f##*/} shows no clean stop"
done
left=$(pgrep -f "$H_DIR/run.ini" || true)
[ -z "$left" ] && h_pass "SIGTERM stopped all 6 daemons cleanly"
h_fail "daemons still running after the launcher exited: $left"
