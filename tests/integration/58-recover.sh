#!/bin/sh
# tests/integration/58-recover.sh — a round in which every worker's
# gradient is refused does not stop the run. [ps] grad_norm_max_ratio =
# 1.02 refuses an honest gradient whenever its norm is 2% above the median
# of the last 32, so that, with 2 workers, some rounds have every gradient
# refused (before: each worker then waited for a version that never came,
# and the run sat there). kfac-ps must go back to its last good parameters
# (ps/recover.h), reset the norm history, publish a new version without a
# step and go on: the run finishes with exit 0, the recoveries are logged
# and counted (summary and metrics), and steps.csv has one row per real
# step (the steps less the recoveries). The metrics are read with curl,
# which the test needs (tools/deps.sh installs it).
. tests/integration/harness.inc
h_init 58-recover
command -v curl >/dev/null 2>&1 || h_fail "curl is missing (tools/deps.sh installs it): it reads the metrics endpoint"
STEPS=120
port=$(h_port) || exit 1
mport=$(h_port) || exit 1
ep="tcp://127.0.0.1:$port"
cat >"$H_DIR/run.ini" <<EOF2
[run]
seed = 6
steps = $STEPS
eval_every = 100000
eval_n = 1000
out_dir = $H_DIR/out
[model]
file = models/mnist-mlp.model
[data]
batch = 32
train_n = 5000
[kfac]
stats = sync
[cluster]
ps = $ep
workers = 2
statsd = 0
[ps]
bind = $ep
grad_norm_max_ratio = 1.02
metrics = 127.0.0.1:$mport
progress_every = 40
[invertd]
priority = normal
EOF2
h_start ps "$BUILD/kfac-ps" --config "$H_DIR/run.ini"
ps_pid=$H_PID
h_start worker1 "$BUILD/kfac-worker" --config "$H_DIR/run.ini" --worker.id 1
h_start worker2 "$BUILD/kfac-worker" --config "$H_DIR/run.ini" --worker.id 2
h_start invertd "$BUILD/kfac-invertd" --config "$H_DIR/run.ini"
# the metrics while it runs: kfac_recoveries_total once it is above 0
m=""
n=0
while kill -0 "$ps_pid" 2>/dev/null && [ $n -lt 600 ]; do
  n=$((n + 1))
  v=$(curl -s "http://127.0.0.1:$mport/metrics" | sed -n 's/^kfac_recoveries_total \([0-9]*\)$/\1/p')
  if [ -n "$v" ] && [ "$v" -gt 0 ]; then m=$v; break; fi
  sleep 0.2
done
h_wait "$ps_pid" 120
[ "$H_STATUS" = 0 ] || h_fail "kfac-ps exited with status $H_STATUS (124: still running after 120 s)"
rec=$(sed -n 's/.*recoveries \([0-9]*\) (every gradient of a round refused).*/\1/p' "$H_DIR/ps.log" | tail -n 1)
[ -n "$rec" ] && [ "$rec" -ge 1 ] || h_fail "no recovery counted in the summary line (the test needs rounds with every gradient refused)"
grep -q "every worker's gradient was refused (.* as norm outliers): publishing the parameters of step [0-9]*" "$H_DIR/ps.log" ||
  h_fail "no log line says the PS went back to the last good parameters"
rows=$(awk 'NR > 1' "$H_DIR/out/steps.csv" | wc -l)
[ "$rows" -eq $((STEPS - rec)) ] || h_fail "steps.csv has $rows rows, want $STEPS steps less $rec recoveries"
[ -n "$m" ] || h_fail "the metrics never showed kfac_recoveries_total above 0"
h_pass "$STEPS steps with [ps] grad_norm_max_ratio = 1.02: $rec rounds had every gradient refused and were recovered (back to the last good parameters, kfac_recoveries_total $m); $rows steps taken"
