#!/bin/sh
# tests/integration/61-conn-closed.sh — a peer whose connection drops is
# noticed at the next heartbeat, not after [ps] worker_timeout_ms or
# job_timeout_ms of silence (both set to far more than the bound checked
# here, so that the test fails without the feature):
#   invertd  killed with SIGKILL while it holds a job (delay_ms keeps the
#            job held): the PS logs "connection closed" and puts the job
#            back in the queue within 10 s;
#   worker   one of two gradient workers killed with SIGKILL mid-run: the
#            PS logs "connection closed" once and the steps go on with the
#            other worker within 10 s (the timeout is 30 s); a new worker
#            with the same id then takes over the shard, as after a timeout.
# The 10 s bound is a generous pass/fail limit, not a timing: the detection
# takes about one heartbeat (1 s here); the figure is printed.
. tests/integration/harness.inc
h_init 61-conn-closed
BOUND_S=10
cat >"$H_DIR/run.ini" <<EOF2
[run]
seed = 3
steps = 1000000
eval_every = 1000000
[model]
file = models/mnist-mlp.model
[data]
batch = 32
train_n = 2000
[cluster]
workers = 2
statsd = 0
invertd = 1
[kfac]
stats = sync
[ps]
heartbeat_ms = 1000
worker_timeout_ms = 30000
job_timeout_ms = 60000
progress_every = 1000
[invertd]
delay_ms = 120000
EOF2

now_ms() { echo $(($(date +%s%N) / 1000000)); }

# until_rows N SECONDS: 0 once steps.csv has N rows, 1 after SECONDS
until_rows() { h_wait_rows "$H_DIR/run/steps.csv" "$1" "$2"; }

port=$(h_port) || exit 1
ep="tcp://127.0.0.1:$port"
h_start ps "$BUILD/kfac-ps" --config "$H_DIR/run.ini" --bind "$ep" --out-dir "$H_DIR/run"
PS_PID=$H_PID
for i in 1 2; do
  h_start "worker$i" "$BUILD/kfac-worker" --config "$H_DIR/run.ini" --cluster.ps "$ep" --worker.id "$i"
  [ "$i" = 2 ] && W2_PID=$H_PID
done
h_start invertd "$BUILD/kfac-invertd" --config "$H_DIR/run.ini" --cluster.ps "$ep"
INV_PID=$H_PID
until_rows 20 120 || h_fail "fewer than 20 steps after 120 s"
kill -0 "$PS_PID" 2>/dev/null || h_fail "kfac-ps exited"

# the inverse daemon, holding a job (held back for delay_ms)
grep -q "invertd#.*connection closed" "$H_DIR/ps.log" && h_fail "connection closed logged before any kill"
t0=$(now_ms)
kill -KILL "$INV_PID"
h_wait "$INV_PID" 10
h_wait_log "$H_DIR/ps.log" "invertd#.* connection closed: its job [0-9]+ .* goes back to the queue" "$BOUND_S" ||
  h_fail "the killed invertd's job was not put back in the queue within $BOUND_S s (job_timeout_ms = 60000)"
inv_ms=$(($(now_ms) - t0))

# a gradient worker
n0=$(h_rows "$H_DIR/run/steps.csv")
t0=$(now_ms)
kill -KILL "$W2_PID"
h_wait "$W2_PID" 10
until_rows $((n0 + 5)) "$BOUND_S" ||
  h_fail "steps stopped at $(h_rows "$H_DIR/run/steps.csv") (killed at $n0): the dead worker was not noticed within $BOUND_S s (worker_timeout_ms = 30000)"
w_ms=$(($(now_ms) - t0))
n=$(grep -c "worker#.*connection closed" "$H_DIR/ps.log")
[ "$n" = 1 ] || h_fail "the dead worker's connection closed was logged $n times, not once"
grep -q "silent for" "$H_DIR/ps.log" && h_fail "a peer was dropped for silence, not for its closed connection"

# the same member again: takes over its shard as after a timeout
h_start worker2b "$BUILD/kfac-worker" --config "$H_DIR/run.ini" --cluster.ps "$ep" --worker.id 2
h_wait_log "$H_DIR/ps.log" "worker id 2 rejoins .* takes over shard" 30 || h_fail "the new worker 2 did not take over its shard"
n1=$(h_rows "$H_DIR/run/steps.csv")
until_rows $((n1 + 5)) 30 || h_fail "no steps after worker 2 came back"
kill -0 "$PS_PID" 2>/dev/null || h_fail "kfac-ps exited"
h_pass "killed invertd's job back in the queue after ${inv_ms} ms, 5 more steps ${w_ms} ms after a worker was killed (timeouts 60 s and 30 s)"
