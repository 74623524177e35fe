#!/bin/sh
# tests/integration/60-launcher-late-death.sh — a daemon that dies after
# the start-up window is reported, and the run goes on without it.
# deploy/kfac-launch (KFAC_LAUNCH_STARTUP_S = 2) runs SGD on the MNIST MLP
# with 3 paced workers; once the window is over and the run trains, worker
# 3 is killed with SIGKILL. Passes when the launcher names it with its
# status (137) and its log's last lines, does not stop the cluster (no
# "failed at start-up"), kfac-ps finishes every step with the other two,
# and the launcher then exits 1 with 3 of 4 daemons clean.
. tests/integration/harness.inc
h_init 60-launcher-late-death
STEPS=150
port=$(h_port) || exit 1
cat >"$H_DIR/run.ini" <<EOF2
[run]
seed = 8
steps = $STEPS
eval_every = 100000
eval_n = 500
out_dir = $H_DIR/out
[model]
file = models/mnist-mlp.model
[data]
batch = 32
train_n = 2000
[optimizer]
kind = sgd
[cluster]
workers = 3
statsd = 0
invertd = 0
[worker]
delay_ms = 20
[ps]
heartbeat_ms = 200
EOF2
t0=$(date +%s)
h_start launch env KFAC_BIN="$BUILD" KFAC_LAUNCH_STARTUP_S=2 sh deploy/kfac-launch "$H_DIR/run.ini" --port "$port" \
  --quiet
launch=$H_PID
psl=$H_DIR/out/logs/ps.log
# the launcher's worker-3 says Hello with id 3 (kfac-ps numbers its peers
# in the order they came: worker#N is not the id)
h_wait_log "$psl" "\(pid [0-9]+ on [^)]*\) joined \(asked for id 3;" 60 || h_fail "worker 3 did not join"
w3=$(sed -n 's/.*(pid \([0-9]*\) on [^)]*) joined (asked for id 3;.*/\1/p' "$psl" | head -n 1)
[ -n "$w3" ] || h_fail "no pid of worker 3 in kfac-ps's log"
h_wait_rows "$H_DIR/out/steps.csv" 10 60 "$launch" || h_fail "the run did not reach step 10"
# past the start-up window of 2 s, with a second's margin
while [ $(($(date +%s) - t0)) -le 3 ]; do sleep 0.2; done
n_kill=$(h_rows "$H_DIR/out/steps.csv")
[ "$n_kill" -lt $((STEPS - 20)) ] || h_fail "the run was nearly over (step $n_kill) before worker 3 could be killed"
kill -KILL "$w3" || h_fail "cannot kill worker 3 (pid $w3)"
h_wait "$launch" 120
st=$H_STATUS
[ "$st" = 1 ] || h_fail "kfac-launch exited with status $st, want 1 (124: still running after 120 s)"
log=$H_DIR/launch.log
grep -q "worker-3 exited with status 137" "$log" || h_fail "the launcher did not name worker 3 and its status: $(tail -n 5 "$log")"
grep -q "failed at start-up" "$log" && h_fail "the launcher took a death after the start-up window for a start-up failure"
grep -q "3 of 4 daemons exited cleanly" "$log" || h_fail "the summary does not say 3 of 4 daemons exited cleanly: $(grep 'exited cleanly' "$log")"
[ "$(h_rows "$H_DIR/out/steps.csv")" -eq "$STEPS" ] || h_fail "steps.csv has $(h_rows "$H_DIR/out/steps.csv") steps, expected $STEPS"
h_pass "worker 3 killed at step $n_kill, after the start-up window: named with status 137, the run finished its $STEPS steps with the other two, kfac-launch exited 1"
