#!/bin/sh
# tests/integration/40-poke-fast.sh — kfac-poke's fast worker
# (--member_kind fast-worker, tools/poke/fast.c). kfac-ps trains the MNIST
# MLP with K-FAC for 300 steps beside a real kfac-statsd and kfac-invertd,
# its two gradient workers being two fast members that answer every Params
# with a stored gradient. Once step 100 is in, one of them gets SIGTERM.
# Passes when: that one says Bye and exits 0 within 5 s ("stopped:
# SIGTERM"), kfac-ps takes it as a member that left and goes on with the
# other, every one of the 300 steps is written, kfac-ps exits 0, the other
# member exits 0 on Shutdown having pushed a gradient of every version
# 0-300 with no Error, and kfac-ps rejected nothing. Every wait is bounded;
# only the processes started here are stopped (the harness, by PID).
. tests/integration/harness.inc
h_init 40-poke-fast
[ -x "$BUILD/kfac-poke" ] || h_fail "missing $BUILD/kfac-poke"
port=$(h_port) || exit 1
ep=tcp://127.0.0.1:$port
cat >"$H_DIR/run.ini" <<EOF2
[run]
seed = 3
steps = 300
eval_every = 1000
eval_n = 200
target_acc = 0
out_dir = $H_DIR/out
[model]
file = models/mnist-mlp.model
[data]
batch = 64
train_n = 2000
[optimizer]
kind = kfac
[kfac]
stats = async
[cluster]
ps = $ep
workers = 2
statsd = 1
invertd = 1
[ps]
bind = $ep
progress_every = 50
# a stored gradient pushed every round is a direction kfac-ps's
# reference check may refuse once the model moves away from it
# (ps/drift.h): off, as for any fast member
heldout_n = 0
EOF2
h_start ps "$BUILD/kfac-ps" --config "$H_DIR/run.ini"
ps=$H_PID
h_wait_log "$H_DIR/ps.log" "listening on" 30 || h_fail "kfac-ps does not listen"
h_start statsd "$BUILD/kfac-statsd" --config "$H_DIR/run.ini" --statsd.id 1
h_start invertd "$BUILD/kfac-invertd" --config "$H_DIR/run.ini" --invertd.id 1
h_start fast-1 "$BUILD/kfac-poke" --endpoint "$ep" --member_id 1 --member_kind fast-worker --seed 1 \
  --count 1000000 --wait_ms 30000
m1=$H_PID
h_start fast-2 "$BUILD/kfac-poke" --endpoint "$ep" --member_id 2 --member_kind fast-worker --seed 2 \
  --count 1000000 --wait_ms 30000
m2=$H_PID
h_wait_steps 100 60
kill -TERM "$m2"
h_wait "$m2" 5
[ "$H_STATUS" = 0 ] || h_fail "the fast member exited with status $H_STATUS after SIGTERM (124: still running)"
grep -q "stopped: SIGTERM" "$H_DIR/fast-2.log" || h_fail "the fast member did not say it stopped on SIGTERM"
h_wait_log "$H_DIR/ps.log" "worker#[0-9]+ .*left: SIGTERM" 10 || h_fail "kfac-ps did not take the member's Bye"
h_wait "$ps" 90
[ "$H_STATUS" = 0 ] || h_fail "kfac-ps exited with status $H_STATUS (124: still running after 90 s)"
rows=$(awk 'NR > 1' "$H_DIR/out/steps.csv" | wc -l)
[ "$rows" -eq 300 ] || h_fail "steps.csv has $rows steps, expected 300"
c=$(h_csv_col "$H_DIR/out/steps.csv" workers_present) || h_fail "$c"
two=$(awk -F, -v c="$c" 'NR > 1 && $c == 2' "$H_DIR/out/steps.csv" | wc -l)
[ "$two" -ge 100 ] || h_fail "only $two steps had both fast members"
h_wait "$m1" 15
[ "$H_STATUS" = 0 ] || h_fail "the other fast member exited with status $H_STATUS (124: still running)"
grep -q "gradients pushed (versions 0-300), .* 0 errors; stopped: Shutdown" "$H_DIR/fast-1.log" ||
  h_fail "the other fast member did not push every version 0-300 without error until Shutdown"
grep -q "rejected 0" "$H_DIR/ps.log" || h_fail "kfac-ps rejected some of the fast members' messages"
h_pass "300 K-FAC steps with 2 fast members ($two with both), one stopped by SIGTERM at step 100+; $(grep -o '[0-9.]* steps/s' "$H_DIR/ps.log" | tail -n 1)"
