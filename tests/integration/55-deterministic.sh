#!/bin/sh
# tests/integration/55-deterministic.sh — where the schedule is
# deterministic the run is too: with statistics from the workers (stats =
# sync) and steps that wait for inverses computed from them, the same
# configuration and seed give the same training loss at every step, bit
# for bit as printed. Two such schedules: every step waits for fresh
# inverses (max_inverse_staleness = 0), and all inverses every 5 steps,
# waited for (refresh = every, inverse_every = 5, max_inverse_staleness =
# 4; a block whose job in flight will satisfy the bound gets no second job,
# else the number of jobs would depend on timing). Three gradient workers,
# so that the order in which their gradients arrive would change a sum
# taken in arrival order (floating-point addition is not associative); the
# PS sums each round in rank order. Each schedule runs twice, 30 steps of
# the MNIST MLP (1 invertd, 2000 training images); passes when the
# train_loss columns of each pair of steps.csv are identical.
. tests/integration/harness.inc
h_init 55-deterministic
STEPS=30
cat >"$H_DIR/run.ini" <<EOF2
[run]
seed = 11
steps = $STEPS
eval_every = 1000
eval_n = 200
[model]
file = models/mnist-mlp.model
[data]
batch = 16
train_n = 2000
[kfac]
stats = sync
[cluster]
workers = 3
statsd = 0
invertd = 1
[ps]
progress_every = 10
EOF2
for sched in sync0 every5; do
  case $sched in
    sync0) extra="--kfac.max_inverse_staleness 0" ;;
    every5) extra="--kfac.max_inverse_staleness 4 --kfac.refresh every --kfac.inverse_every 5" ;;
  esac
  for i in 1 2; do
    port=$(h_port) || exit 1
    # shellcheck disable=SC2086
    h_start "launch-$sched-$i" env KFAC_BIN="$BUILD" sh deploy/kfac-launch "$H_DIR/run.ini" --port "$port" --nice 0 \
      --quiet --run.out_dir "$H_DIR/$sched$i" $extra
    h_wait "$H_PID" 90
    [ "$H_STATUS" = 0 ] || h_fail "$sched run $i: kfac-launch exited with status $H_STATUS (124: still running after 90 s)"
    rows=$(awk 'NR > 1' "$H_DIR/$sched$i/steps.csv" | wc -l)
    [ "$rows" -eq "$STEPS" ] || h_fail "$sched run $i: steps.csv has $rows steps, expected $STEPS"
    f=$H_DIR/$sched$i/steps.csv
    cs=$(h_csv_col "$f" step) || h_fail "$cs"
    cl=$(h_csv_col "$f" train_loss) || h_fail "$cl"
    cw=$(h_csv_col "$f" workers_present) || h_fail "$cw"
    w=$(awk -F, -v c="$cw" 'NR > 1 && $c != 3 { n++ } END { print n + 0 }' "$f")
    [ "$w" = 0 ] || h_fail "$sched run $i: $w steps did not average 3 workers"
    awk -F, -v s="$cs" -v l="$cl" '{ print $s "," $l }' "$f" >"$H_DIR/loss-$sched$i"
  done
  if ! cmp -s "$H_DIR/loss-${sched}1" "$H_DIR/loss-${sched}2"; then
    h_fail "$sched: the two runs differ: $(diff "$H_DIR/loss-${sched}1" "$H_DIR/loss-${sched}2" | head -n 4 | tr '\n' ' ')"
  fi
done
h_pass "two schedules, two runs each of $STEPS steps with 3 workers: identical training loss at every step"
