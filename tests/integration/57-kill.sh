#!/bin/sh
# tests/integration/57-kill.sh — members killed with SIGKILL mid-run and
# started again: the run finishes, and its final test accuracy is within
# 0.3 points of an undisturbed run with the same seed (on the whole test
# set; 2 points for the worker, whose steps without it differ, below). The MNIST MLP, 200 steps, 3 gradient workers with statistics (stats = sync), 1 inverse
# daemon, inverses every 5 steps waited for (the deterministic schedule of
# 55-deterministic.sh), a checkpoint every 50 steps.
#   ps       kfac-ps is killed after step 80 and started again with --resume:
#            it goes on from its checkpoint of step 50 and the surviving
#            clients say Hello again (the workers start their shards at
#            the version they are welcomed at);
#   worker   after step 80 a second worker 2 is started while the first
#            still runs: kfac-ps must answer "in use" (the old one was heard
#            less than 3 heartbeats ago and its connection is open); then
#            the first is killed, and the new one, trying again 1 s later,
#            takes over the shard and the place in the round;
#   invertd  the inverse daemon is killed after step 80 and started again:
#            its job goes back to the queue.
# Each case also checks the log line that says what happened.
. tests/integration/harness.inc
h_init 57-kill
STEPS=200
cat >"$H_DIR/run.ini" <<EOF2
[run]
seed = 5
steps = $STEPS
eval_every = 100
eval_n = 0
[model]
file = models/mnist-mlp.model
[data]
batch = 32
train_n = 10000
[kfac]
stats = sync
fisher = empirical
refresh = every
inverse_every = 5
max_inverse_staleness = 4
[cluster]
workers = 3
statsd = 0
invertd = 1
[ps]
progress_every = 50
heartbeat_ms = 500
[checkpoint]
every = 50
EOF2

# start NAME ROLE PORT [options]: one daemon; sets H_PID
start() {
  name=$1 role=$2 port=$3
  shift 3
  if [ "$role" = ps ]; then
    h_start "$name" "$BUILD/kfac-ps" --config "$H_DIR/run.ini" --bind "tcp://127.0.0.1:$port" "$@"
  else
    h_start "$name" "$BUILD/kfac-$role" --config "$H_DIR/run.ini" --cluster.ps "tcp://127.0.0.1:$port" "$@"
  fi
}

# cluster RUN PORT: the whole cluster of run RUN (out_dir $H_DIR/RUN); sets
# PS_PID, W2_PID (worker id 2), INV_PID
cluster() {
  start "$1-ps" ps "$2" --out-dir "$H_DIR/$1"
  PS_PID=$H_PID
  for i in 1 2 3; do
    start "$1-worker$i" worker "$2" --worker.id "$i"
    [ "$i" = 2 ] && W2_PID=$H_PID
  done
  start "$1-invertd" invertd "$2"
  INV_PID=$H_PID
}

# until_step RUN N: wait (at most 120 s) until RUN's steps.csv has N rows
until_step() {
  h_wait_rows "$H_DIR/$1/steps.csv" "$2" 120 || h_fail "$1: fewer than $2 steps after 120 s"
}

# finish RUN: wait for RUN's kfac-ps (PS_PID) to exit 0; ACC = its final
# test accuracy (h_wait cannot run in a subshell: no $(...) here)
finish() {
  h_wait "$PS_PID" 150
  [ "$H_STATUS" = 0 ] || h_fail "$1: kfac-ps exited with status $H_STATUS (124: still running after 150 s)"
  ACC=$(h_csv_last "$H_DIR/$1/eval.csv" test_acc)
  [ -n "$ACC" ] || h_fail "$1: no final evaluation"
}

# close A B: accuracies within 0.3 points (0.003)
close() { awk -v a="$1" -v b="$2" -v t="${3:-0.003}" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= t + 1e-9) }'; }

port=$(h_port) || exit 1
cluster base "$port"
finish base
acc0=$ACC

# kfac-ps
port=$(h_port) || exit 1
cluster ps "$port"
until_step ps 80
kill -KILL "$PS_PID"
h_wait "$PS_PID" 10
start ps-ps2 ps "$port" --out-dir "$H_DIR/ps" --resume
PS_PID=$H_PID
finish ps
acc1=$ACC
grep -q "resumed from .*ckpt-0000000050.kfc: step 50" "$H_DIR/ps-ps2.log" || h_fail "ps: kfac-ps did not resume from step 50"
grep -q "saying hello again\|does not know this" "$H_DIR/ps-worker1.log" || h_fail "ps: worker 1 did not say hello to the new kfac-ps"
close "$acc0" "$acc1" || h_fail "ps: final accuracy $acc1, undisturbed $acc0: more than 0.3 points apart"

# a gradient worker
port=$(h_port) || exit 1
cluster worker "$port"
until_step worker 80
shard=$(sed -n 's/.*welcomed by kfac-ps.*rank \([0-9]*\)\/.*/\1/p' "$H_DIR/worker-worker2.log" | head -n 1)
# Started while the first worker 2 still runs, the new one must be told to
# wait (a restart after the kill is told so only when its Hello beats the
# closed connection's discovery, which kfac-ps now probes at once).
start worker-worker2b worker "$port" --worker.id 2
h_wait_log "$H_DIR/worker-worker2b.log" "cannot take this kfac-worker now: worker id 2 is in use .*trying again in" 60 ||
  h_fail "worker: a second worker 2, started while the first still ran, was not told to wait"
kill -KILL "$W2_PID"
h_wait "$W2_PID" 10
finish worker
acc2=$ACC
grep -q "worker id 2 rejoins .* takes over shard $shard " "$H_DIR/worker-ps.log" ||
  h_fail "worker: the restarted worker 2 did not get shard $shard back"
# kfac-ps notices the killed worker's closed connection at its next
# heartbeat and, as it should, goes on with the other two until the new
# process takes the record over (it retries after 1 s, 2 s, ...): those
# steps average 2 of 3 batches, so this run is not the undisturbed one
# step for step. Checked here: worker 2 was back before the last 40 steps,
# and the final accuracy is within 2 points (the kfac-ps and invertd cases,
# which repeat the undisturbed steps, keep 0.3). The gap is the new
# worker's 1 s retry, so its length in steps is the step rate: 3-4 steps
# on a busy machine ended 0.30-0.53 points from the undisturbed run, 20
# steps at 19 steps/s 1.03 points.
wp=$(h_csv_col "$H_DIR/worker/steps.csv" workers_present) || h_fail "$wp"
short=$(awk -F, -v c="$wp" 'NR > 1 && $c < 3 { n++ } END { print n + 0 }' "$H_DIR/worker/steps.csv")
last_short=$(awk -F, -v c="$wp" 'NR > 1 && $c < 3 { s = $1 } END { print s + 0 }' "$H_DIR/worker/steps.csv")
[ "$last_short" -le $((STEPS - 40)) ] || h_fail "worker: worker 2 was still missing at step $last_short of $STEPS"
close "$acc0" "$acc2" 0.02 || h_fail "worker: final accuracy $acc2, undisturbed $acc0: more than 2 points apart ($short steps without worker 2)"

# the inverse daemon
port=$(h_port) || exit 1
cluster invertd "$port"
until_step invertd 80
kill -KILL "$INV_PID"
h_wait "$INV_PID" 10
start invertd-invertd2 invertd "$port"
finish invertd
acc3=$ACC
[ "$(h_rows "$H_DIR/invertd/steps.csv")" -eq "$STEPS" ] || h_fail "invertd: not $STEPS steps"
close "$acc0" "$acc3" || h_fail "invertd: final accuracy $acc3, undisturbed $acc0: more than 0.3 points apart"

h_pass "final test accuracy undisturbed $acc0; kfac-ps killed and resumed $acc1, a worker killed and restarted $acc2 ($short steps without it), the invertd killed and restarted $acc3"
