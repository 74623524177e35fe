#!/bin/sh
# tests/integration/62-getparams-flood.sh — replies far larger than their
# requests: a welcomed worker (tools/kfac-poke --member_kind flood) sends
# 20,000 GetParams without reading one reply, while 2 honest workers train
# the wide model (models/mnist-cnn-wide.model, fc 3136 -> 1024: 3.27 million
# parameters) with SGD. Every reply is the whole Params message (13.1 MB;
# 0.86 MB on the MNIST CNN, where the copies were measured);
# before, each was a copy of its own, so one connection could make kfac-ps
# hold up to ZeroMQ's high-water mark of 1000 copies (949 MB measured);
# then one shared, reference-counted buffer per version, but a flood still
# pinned one buffer per version its unread replies spanned, and cost kfac-ps
# a send per request. Now (docs/security.md, "Bounded replies") a client
# has at most one Params queued (more requests are held until it is written
# out), its pipe holds at most 16 messages ([ps] PS_SNDHWM), and GetParams
# and JobRequest are limited to 20 a second per client (burst 40; more get
# Error INTERNAL, counted, logged once a second).
# Passes when kfac-ps's peak resident memory during the flood (VmHWM after
# resetting it through /proc/PID/clear_refs; where that cannot be reset,
# the peak since start) stays within its resident size before the flood
# plus FLOOD_PARAMS = 6 messages of the Params' size (below), kfac-ps
# counted the requests over the rate limit and the Params held back (done
# line) and logged the refusal, and the run finishes all steps.
. tests/integration/harness.inc
h_init 62-getparams-flood
# The bound, counted as 58-hostile-suite counts it (where 4 Params was found
# too tight beside two busy loops): kfac-ps keeps at most one Params per
# client in ZeroMQ's hands (ps_round_send_params), so each of the 2 honest
# workers and the flooder may pin one buffer of an older version (on a
# loaded host the honest ones read late and do), besides the 2 current
# ones; plus one GradPush, the largest message an honest member sends (the
# size of a Params), which may land in fresh pages during the flood. A
# flood that filled the pipe ([ps] PS_SNDHWM, 16) would pin 16; one that
# queued a Params per request, 20,000.
FLOOD_PARAMS=6
[ -x "$BUILD/kfac-poke" ] || h_fail "missing $BUILD/kfac-poke"
port=$(h_port) || exit 1
ep="tcp://127.0.0.1:$port"
cat >"$H_DIR/run.ini" <<EOF2
[run]
seed = 6
steps = 60
eval_every = 1000
eval_n = 1000
out_dir = $H_DIR/out
[model]
file = models/mnist-cnn-wide.model
[data]
batch = 32
train_n = 5000
[optimizer]
kind = sgd
lr = 0.05
[cluster]
ps = $ep
workers = 2
statsd = 0
invertd = 0
[ps]
bind = $ep
EOF2
h_start ps "$BUILD/kfac-ps" --config "$H_DIR/run.ini"
PS_PID=$H_PID
h_start worker1 "$BUILD/kfac-worker" --config "$H_DIR/run.ini" --worker.id 1
h_start worker2 "$BUILD/kfac-worker" --config "$H_DIR/run.ini" --worker.id 2
h_wait_steps 20
rss0=$(h_kb "$PS_PID" VmRSS)
reset=1
echo 5 >"/proc/$PS_PID/clear_refs" 2>/dev/null || reset=0
hwm0=$(h_kb "$PS_PID" VmHWM)
h_start poke-flood "$BUILD/kfac-poke" --endpoint "$ep" --member_id 51 --member_kind flood --count 20000 --wait_ms 3000
h_wait "$H_PID" 60
[ "$H_STATUS" = 0 ] || h_fail "the flooding member exited with status $H_STATUS (not welcomed?)"
grep -q "20000 GetParams sent" "$H_DIR/poke-flood.log" || h_fail "the flood was not sent: $(tail -n 2 "$H_DIR/poke-flood.log")"
hwm1=$(h_kb "$PS_PID" VmHWM)
h_wait "$PS_PID" 120
[ "$H_STATUS" = 0 ] || h_fail "kfac-ps exited with status $H_STATUS (124: still running after 120 s)"
rows=$(awk 'NR > 1' "$H_DIR/out/steps.csv" | wc -l)
[ "$rows" -eq 60 ] || h_fail "steps.csv has $rows steps, expected 60"
n_params=$(sed -n 's/.*kfac-ps: model [^:]*: \([0-9]*\) parameters.*/\1/p' "$H_DIR/ps.log" | head -n 1)
[ -n "$n_params" ] || h_fail "kfac-ps did not log its model's parameter count"
params_kb=$(( (n_params * 4 + 1023) / 1024 + 1 ))   # the Params message: 4 bytes a parameter, and a little
bound=$(( rss0 + FLOOD_PARAMS * params_kb ))
[ "$reset" = 1 ] || bound=$(( bound > hwm0 ? bound : hwm0 ))
[ "$hwm1" -le "$bound" ] ||
  h_fail "kfac-ps's peak resident memory grew to $hwm1 kB during the flood: more than $rss0 kB before it plus $FLOOD_PARAMS Params messages ($bound kB)"
log=$H_DIR/ps.log
grep -Eq "done: 60 steps.*requests over the rate limit [1-9][0-9]*, Params held back [1-9][0-9]*" "$log" ||
  h_fail "the done line does not count the flood: $(grep 'done:' "$log")"
grep -q "rejected get_params from worker#[0-9]* .*more than 20 GetParams and JobRequest a second" "$log" ||
  h_fail "kfac-ps did not log the requests over the rate limit"
n=$(grep -c "more than 20 GetParams and JobRequest a second" "$log")
[ "$n" -le 20 ] || h_fail "the rate-limit refusal was logged $n times (at most one a second)"
limited=$(sed -n 's/.*requests over the rate limit \([0-9]*\).*/\1/p' "$log" | tail -n 1)
held=$(sed -n 's/.*Params held back \([0-9]*\).*/\1/p' "$log" | tail -n 1)
h_pass "wide model ($n_params parameters): peak resident memory $hwm1 kB during 20,000 unread GetParams, $rss0 kB before (+$((hwm1 - rss0)) kB; bound $bound kB, $FLOOD_PARAMS Params; peak reset: $reset); $limited requests over the rate limit, $held Params held back"
