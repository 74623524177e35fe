#!/bin/sh
# tests/integration/59-kill-statsd.sh — a second kfac-statsd with the id of
# one that still runs is told to wait ("in use"); the first is then killed
# with SIGKILL mid-run, and kfac-ps gives the new one the old one's place;
# statistics are folded again after the restart and the run finishes. The MNIST MLP, 400 steps, 2 gradient workers, 1 kfac-statsd
# (stats = async), 1 inverse daemon, killed after step 80.
#
# Statistics from kfac-statsd arrive whenever they are computed, so two
# undisturbed runs with the same seed differ: on a 2-core VM, on this
# configuration, the final test accuracy (whole test set) of undisturbed
# runs differed by up to 0.7 points and the Polyak average's by up to 0.5.
# The 0.3-point bound of 57-kill.sh (deterministic schedule) cannot hold
# here; the check is against that spread: the Polyak accuracy within 1
# point of an undisturbed run's, and both at least ACC.
. tests/integration/harness.inc
h_init 59-kill-statsd
ACC=0.90
cat >"$H_DIR/run.ini" <<EOF2
[run]
seed = 5
steps = 400
eval_every = 100
eval_n = 0
[model]
file = models/mnist-mlp.model
[data]
batch = 32
train_n = 10000
[cluster]
workers = 2
statsd = 1
invertd = 1
[ps]
progress_every = 50
heartbeat_ms = 500
# The restart is what is tested, not the curvature's share of a busy host:
# at the default priority (yield) a kfac-statsd beside a CPU load waits for
# the floor before it computes, and the 400 steps may be over before the
# new one has folded 10 batches; and the two runs' curvature, starved by
# different amounts, would spread their accuracy beyond the 1-point bound.
[statsd]
priority = normal
[invertd]
priority = normal
EOF2

# cluster RUN: the whole cluster (out_dir $H_DIR/RUN); PS_PID, ST_PID, PORT
cluster() {
  PORT=$(h_port) || exit 1
  ep="tcp://127.0.0.1:$PORT"
  h_start "$1-ps" "$BUILD/kfac-ps" --config "$H_DIR/run.ini" --bind "$ep" --out-dir "$H_DIR/$1"
  PS_PID=$H_PID
  for i in 1 2; do
    h_start "$1-worker$i" "$BUILD/kfac-worker" --config "$H_DIR/run.ini" --cluster.ps "$ep" --worker.id "$i"
  done
  h_start "$1-invertd" "$BUILD/kfac-invertd" --config "$H_DIR/run.ini" --cluster.ps "$ep"
  h_start "$1-statsd" "$BUILD/kfac-statsd" --config "$H_DIR/run.ini" --cluster.ps "$ep" --statsd.id 1
  ST_PID=$H_PID
}

cluster base
h_wait "$PS_PID" 120
[ "$H_STATUS" = 0 ] || h_fail "base: kfac-ps exited with status $H_STATUS"
pa0=$(h_csv_last "$H_DIR/base/eval.csv" polyak_acc)

cluster kill
h_wait_rows "$H_DIR/kill/steps.csv" 80 120 || h_fail "kill: fewer than 80 steps after 120 s"
# started while the first still runs (heard lately, its connection open):
# kfac-ps must tell it to wait
h_start kill-statsd2 "$BUILD/kfac-statsd" --config "$H_DIR/run.ini" --cluster.ps "tcp://127.0.0.1:$PORT" --statsd.id 1
h_wait_log "$H_DIR/kill-statsd2.log" "cannot take this kfac-statsd now: statsd id 1 is in use" 60 ||
  h_fail "a second kfac-statsd with id 1, started while the first still ran, was not told to wait"
kill -KILL "$ST_PID"
h_wait "$ST_PID" 10
folded=$(h_csv_last "$H_DIR/kill/steps.csv" stats_folded)
h_wait "$PS_PID" 120
[ "$H_STATUS" = 0 ] || h_fail "kill: kfac-ps exited with status $H_STATUS"
grep -q "statsd id 1 rejoins .* takes over shard 0" "$H_DIR/kill-ps.log" || h_fail "the new kfac-statsd did not take over"
after=$(h_csv_last "$H_DIR/kill/steps.csv" stats_folded)
# more than 10 folds after the restart: a statistics worker pushes once per
# parameter version (kfac-ps sends it the next version only)
[ "$after" -gt "$((folded + 10))" ] || h_fail "statistics folded: $folded at the kill, $after at the end: the new statsd did not work"
[ "$(h_rows "$H_DIR/kill/steps.csv")" -eq 400 ] || h_fail "kill: not 400 steps"
pa1=$(h_csv_last "$H_DIR/kill/eval.csv" polyak_acc)
h_ge "$pa0" "$ACC" && h_ge "$pa1" "$ACC" || h_fail "Polyak accuracy $pa1 (undisturbed $pa0) below $ACC"
awk -v a="$pa0" -v b="$pa1" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 0.01) }' ||
  h_fail "Polyak accuracy $pa1 is more than 1 point from the undisturbed run's $pa0"
h_pass "kfac-statsd killed at step 80 and replaced: $folded statistics folded before, $after at the end; Polyak accuracy $pa1 (undisturbed $pa0)"
