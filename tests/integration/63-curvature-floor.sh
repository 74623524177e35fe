#!/bin/sh
# tests/integration/63-curvature-floor.sh — the curvature daemons keep
# working on a host busy with other work. The whole cluster (kfac-ps, one
# kfac-worker, kfac-statsd, kfac-invertd) and two busy loops share CPU 0
# (taskset), so the load is the same on any number of cores; the worker is
# paced ([worker] delay_ms) so that the run lasts about as long on any
# machine. At the
# default [statsd]/[invertd] priority (yield) the compute threads start at
# SCHED_IDLE, which alone gets next to nothing beside the loops; the floor
# (common/net/daemon.h) must notice the starved job, lift the threads to
# nice 10 and say so in both daemons (kfac-statsd always has work; every
# inverse job of kfac-invertd, tens of ms of CPU for the 785 x 785 block,
# takes seconds at SCHED_IDLE's share beside the loops, two ticks of the
# floor), and the run must fold statistics and install inverses. With KFAC_FLOOR_CONTROL=1 a second run at priority = idle, the
# same otherwise, is the control: its counts are reported, not checked
# (SCHED_IDLE's share is small, not nil), so it is left out of make check.
. tests/integration/harness.inc
h_init 63-curvature-floor
command -v taskset >/dev/null 2>&1 || h_skip "taskset (util-linux) is not installed"
taskset -c 0 true 2>/dev/null || h_skip "taskset -c 0 is refused here"
STEPS=400
cat >"$H_DIR/run.ini" <<EOF2
[run]
seed = 4
steps = $STEPS
eval_every = 100000
eval_n = 1000
[model]
file = models/mnist-mlp.model
[data]
batch = 32
train_n = 5000
[cluster]
workers = 1
[ps]
progress_every = 50
heartbeat_ms = 500
EOF2
for i in 1 2; do
  h_start "busy$i" timeout 300 taskset -c 0 sh -c 'while :; do :; done'
done
# run ARM PRIORITY: one cluster on CPU 0; sets FOLDED and INSTALLED
run() {
  port=$(h_port) || exit 1
  ep="tcp://127.0.0.1:$port"
  cfg="--config $H_DIR/run.ini --cluster.ps $ep"
  h_start "$1-ps" taskset -c 0 "$BUILD/kfac-ps" --config "$H_DIR/run.ini" --bind "$ep" --out-dir "$H_DIR/$1"
  ps_pid=$H_PID
  # paced (a random 0-40 ms before each push), so that the run lasts long
  # enough for the floor to act however fast this machine steps
  h_start "$1-worker" taskset -c 0 "$BUILD/kfac-worker" $cfg --id 1 --worker.delay_ms 20
  h_start "$1-statsd" taskset -c 0 "$BUILD/kfac-statsd" $cfg --id 1 --statsd.priority "$2"
  h_start "$1-invertd" taskset -c 0 "$BUILD/kfac-invertd" $cfg --id 1 --invertd.priority "$2"
  h_wait "$ps_pid" 200
  [ "$H_STATUS" = 0 ] || h_fail "$1: kfac-ps exited with status $H_STATUS"
  [ "$(awk 'NR > 1' "$H_DIR/$1/steps.csv" | wc -l)" -eq "$STEPS" ] || h_fail "$1: not $STEPS steps"
  FOLDED=$(h_csv_last "$H_DIR/$1/steps.csv" stats_folded)
  INSTALLED=$(sed -n 's/.*inverses installed \([0-9]*\).*/\1/p' "$H_DIR/$1-ps.log" | tail -n 1)
  [ -n "$INSTALLED" ] || h_fail "$1: no summary line with the inverses installed"
}
run floor yield
f_folded=$FOLDED
f_installed=$INSTALLED
for d in statsd invertd; do
  grep -q "compute thread is starved: .* lifted [0-9]* thread.* to nice 10" "$H_DIR/floor-$d.log" ||
    h_fail "kfac-$d at priority yield beside the busy loops: no line saying the floor lifted its compute thread"
done
[ "$f_folded" -ge 10 ] || h_fail "priority yield: $f_folded statistics batches folded in $STEPS steps (want >= 10)"
[ "$f_installed" -ge 6 ] || h_fail "priority yield: $f_installed inverses installed in $STEPS steps (want >= 6: every block once)"
control="control run not made (KFAC_FLOOR_CONTROL=1 makes it)"
if [ "${KFAC_FLOOR_CONTROL:-0}" = 1 ]; then
  run idle idle
  control="priority idle (control): $FOLDED folded, $INSTALLED installed"
fi
h_pass "beside two busy loops on the same CPU, priority yield: $f_folded statistics folded, $f_installed inverses installed, the floor acted in kfac-statsd and kfac-invertd; $control"
