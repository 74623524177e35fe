#!/bin/sh
# tests/integration/58-robust-aggregate.sh — a hostile worker inside the
# rules: it pushes 100 x the parameters it was sent (finite, n_examples 1),
# the push that captured the median norm rule when it was the only defence.
# 3 honest workers train the MNIST MLP with [ps] aggregate = median; the
# norm rule is off (grad_norm_max_ratio = 0), and so is the reference
# gradient (heldout_n = 0), so that the median and the per-layer clipping
# are what stands between the attacker and the run.
# A clean run of the same configuration (3 honest workers) is the yardstick.
# Passes when both runs finish every step, the attacked run's final test
# accuracy is within 2 points of the clean run's and at least ACC, the
# steps were combined by the median (robust steps counted in the summary),
# and the attacker's gradients were clipped with log lines naming it.
. tests/integration/harness.inc
h_init 58-robust-aggregate
ACC=0.88
STEPS=200
[ -x "$BUILD/kfac-poke" ] || h_fail "missing $BUILD/kfac-poke"
cat >"$H_DIR/run.ini" <<EOF2
[run]
seed = 8
steps = $STEPS
eval_every = 100000
eval_n = 0
[model]
file = models/mnist-mlp.model
[data]
batch = 32
train_n = 10000
[kfac]
stats = sync
[cluster]
workers = 3
statsd = 0
invertd = 1
[ps]
aggregate = median
grad_norm_max_ratio = 0
# and without kfac-ps's reference gradient, which refuses a member that
# pushes 100 x the parameters every round after 10 rounds (ps/drift.h):
# the median and the clipping alone are what this test measures
heldout_n = 0
progress_every = 50
[invertd]
priority = normal
EOF2
# run NAME: kfac-ps, 3 workers, 1 invertd; with ATTACK=1 a hostile member
# joins after step 20 and pushes until the end
run() {
  port=$(h_port) || exit 1
  ep="tcp://127.0.0.1:$port"
  cfg="--config $H_DIR/run.ini --cluster.ps $ep"
  h_start "$1-ps" "$BUILD/kfac-ps" --config "$H_DIR/run.ini" --bind "$ep" --out-dir "$H_DIR/$1"
  ps_pid=$H_PID
  for i in 1 2 3; do h_start "$1-worker$i" "$BUILD/kfac-worker" $cfg --worker.id "$i"; done
  h_start "$1-invertd" "$BUILD/kfac-invertd" $cfg
  if [ "$ATTACK" = 1 ]; then
    h_wait_rows "$H_DIR/$1/steps.csv" 20 60 || h_fail "$1: fewer than 20 steps after 60 s"
    h_start "$1-poke" "$BUILD/kfac-poke" --endpoint "$ep" --member_id 9 --member_kind scaled --count "$STEPS" \
      --wait_ms 3000 --seed 5
  fi
  h_wait "$ps_pid" 240
  [ "$H_STATUS" = 0 ] || h_fail "$1: kfac-ps exited with status $H_STATUS"
  [ "$(awk 'NR > 1' "$H_DIR/$1/steps.csv" | wc -l)" -eq "$STEPS" ] || h_fail "$1: not $STEPS steps"
}
ATTACK=0 run clean
ATTACK=1 run attack
a0=$(h_csv_last "$H_DIR/clean/eval.csv" test_acc)
a1=$(h_csv_last "$H_DIR/attack/eval.csv" test_acc)
grep -q "member 9: [1-9][0-9]* scaled gradients pushed" "$H_DIR/attack-poke.log" || h_fail "the hostile member pushed nothing"
pushed=$(sed -n 's/member 9: \([0-9]*\) scaled.*/\1/p' "$H_DIR/attack-poke.log")
robust=$(sed -n 's/.*robust steps \([0-9]*\).*/\1/p' "$H_DIR/attack-ps.log" | tail -n 1)
[ -n "$robust" ] && [ "$robust" -ge "$STEPS" ] || h_fail "the summary does not count $STEPS robust steps (got '$robust')"
w4=$(awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "workers_present") c = i } NR > 1 && $c == 4 { n++ } END { print n + 0 }' "$H_DIR/attack/steps.csv")
[ "$w4" -ge 20 ] || h_fail "only $w4 steps combined the hostile member's gradient with the 3 honest ones"
grep -q "worker#[0-9]* (pid [0-9]* on [^)]*): layer .*gradient norm .* clipped" "$H_DIR/attack-ps.log" ||
  h_fail "no log line names the hostile member's clipped gradients"
h_ge "$a1" "$ACC" || h_fail "attacked run: test accuracy $a1 below $ACC (clean run: $a0)"
awk -v a="$a0" -v b="$a1" 'BEGIN { exit !(a - b <= 0.02) }' || h_fail "attacked run: test accuracy $a1 is more than 2 points below the clean run's $a0"
h_pass "a member pushing 100 x the parameters ($pushed pushes, in $w4 steps with the 3 honest workers): test accuracy $a1 against $a0 clean; $robust steps by the median; its layers clipped and named in the log"
