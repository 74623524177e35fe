#!/bin/sh
# tests/integration/56-ckpt-unwritable.sh — a checkpoint that cannot be
# written does not stop the run. kfac-ps (SGD on the MNIST MLP, 2 workers,
# 80 steps, a checkpoint every 10) starts with a checkpoint folder it can
# write; after step 15 the folder is replaced by a plain file of the same
# name, so that every later checkpoint fails (as a full or read-only disk
# would make it). Passes when the checkpoints before were written, each
# later one is logged as an error with its step and the reason ("not
# written"), no later checkpoint file exists, and the run still finishes
# its 80 steps with exit 0.
. tests/integration/harness.inc
h_init 56-ckpt-unwritable
STEPS=80
port=$(h_port) || exit 1
ep="tcp://127.0.0.1:$port"
ck=$H_DIR/ckpt
cat >"$H_DIR/run.ini" <<EOF2
[run]
seed = 4
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
ps = $ep
workers = 2
statsd = 0
invertd = 0
[ps]
bind = $ep
progress_every = 10
[checkpoint]
dir = $ck
every = 10
keep = 100
EOF2
h_start ps "$BUILD/kfac-ps" --config "$H_DIR/run.ini"
ps_pid=$H_PID
# paced, so that the folder is replaced well before step 20 however fast
# this machine steps
for i in 1 2; do h_start "worker$i" "$BUILD/kfac-worker" --config "$H_DIR/run.ini" --worker.id "$i" --worker.delay_ms 20; done
h_wait_log "$H_DIR/ps.log" "checkpoint at step 10 " 60 || h_fail "no checkpoint at step 10"
h_wait_rows "$H_DIR/out/steps.csv" 15 60 "$ps_pid" || h_fail "fewer than 15 steps"
n_before=$(h_rows "$H_DIR/out/steps.csv")
[ "$n_before" -lt 20 ] || h_fail "step $n_before before the folder could be replaced (the test needs it before step 20)"
rm -rf "$ck" && : >"$ck" || h_fail "cannot replace $ck by a file"
h_wait "$ps_pid" 120
[ "$H_STATUS" = 0 ] || h_fail "kfac-ps exited with status $H_STATUS after its checkpoints failed (124: still running after 120 s)"
[ "$(h_rows "$H_DIR/out/steps.csv")" -eq "$STEPS" ] || h_fail "steps.csv has $(h_rows "$H_DIR/out/steps.csv") steps, expected $STEPS"
grep -q "checkpoint at step 10 (every 10 steps): .*ckpt-0*10.kfc" "$H_DIR/ps.log" || h_fail "the checkpoint of step 10 was not written"
for s in 20 40 80; do
  grep -q "ERROR .*checkpoint at step $s (every 10 steps) not written: ." "$H_DIR/ps.log" ||
    h_fail "the failed checkpoint of step $s was not logged as an error with its reason: $(grep "checkpoint at step $s" "$H_DIR/ps.log")"
done
[ -f "$ck" ] && [ ! -s "$ck" ] || h_fail "$ck is no longer the empty file that replaced the folder"
failed=$(grep -c "checkpoint at step [0-9]* (every 10 steps) not written" "$H_DIR/ps.log")
h_pass "checkpoint folder replaced by a file at step $n_before: $failed checkpoints logged as not written, the run finished its $STEPS steps with exit 0"
