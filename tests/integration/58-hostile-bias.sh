#!/bin/sh
# tests/integration/58-hostile-bias.sh — "a little is enough" (Baruch et al.
# 2019) against the demo model (models/mnist-cnn.model, the K-FAC settings
# of deploy/examples/mnist-cnn-kfac.ini: 2 workers, [ps] aggregate = mean,
# 1 kfac-statsd, 1 kfac-invertd, $STEPS steps, seed 1). A hostile worker
# (kfac-poke --member_kind bias) joins after step $JOIN and pushes, every
# round, -0.02 x the parameters it was sent with a batch's n_examples: a
# gradient inside every norm bound, in the same direction each time. Three
# runs:
#   clean      no attacker, kfac-ps's defaults
#   undefended the attacker, [ps] heldout_n = 0 (no reference gradient):
#              the attack must bite: the raw parameters' test loss at step
#              $STEPS at least $BITE times the clean run's, and nothing
#              counts the attacker (no rejected GradPush)
#   defended   the attacker, kfac-ps's defaults: kfac-ps's own reference
#              gradient on held-out training examples (ps/heldout.h) and
#              each worker's history against it (ps/drift.h)
# Passes when the defended run counts the attacker
# (kfac_grads_drift_refused_total >= 1, the attacker's pushes refused from
# its PS_DRIFT_MIN_PUSHES-th on), names it in kfac-ps's log (its pid), never
# refuses an honest worker's gradient that way, and ends within $SLACK of
# the clean run's Polyak accuracy and $SLACK_RAW of its raw accuracy, with a
# raw test loss at most $LOSS_RATIO times the clean one. It prints the
# figures of the three runs and kfac-ps's peak resident memory in the
# defended one (docs/security.md's table has a run of them).
# KFAC_KEEP=1 keeps the logs.
. tests/integration/harness.inc
h_init 58-hostile-bias
STEPS=200
JOIN=20
BITE=2           # the undefended run's test loss must be at least this many times the clean one's
LOSS_RATIO=1.5   # the defended run's test loss at most this many times the clean one's
SLACK=0.01       # Polyak accuracy below the clean run's that still passes
SLACK_RAW=0.02   # the same for the raw parameters
[ -x "$BUILD/kfac-poke" ] || h_fail "missing $BUILD/kfac-poke"
command -v curl >/dev/null 2>&1 || h_skip "curl is missing (Debian package curl): the metrics are read with it"

# run NAME ATTACK(0/1) [kfac-ps options...]: one run in $H_DIR/NAME; sets
# ACC, PACC, LOSS (step $STEPS), METRICS (file), POKE_PID, W_PIDS, HWM
# (kfac-ps's peak resident memory, kB).
run() {
  name=$1
  attack=$2
  shift 2
  D=$H_DIR/$name
  mkdir -p "$D"
  port=$(h_port) || exit 1
  mport=$(h_port) || exit 1
  ep="tcp://127.0.0.1:$port"
  met="127.0.0.1:$mport"
  cat >"$D/run.ini" <<EOF2
[run]
seed = 1
steps = $STEPS
eval_every = $STEPS
eval_n = 0
out_dir = $D/out
[model]
file = models/mnist-cnn.model
[data]
batch = 64
[optimizer]
kind = kfac
momentum = 0.9
[kfac]
damping = 0.03
stat_decay = 0.95
step_rule = kl
kl_c0 = 0.001
kl_zeta = 0.5
kl_decay_every = 150
polyak_decay = 0.99
fisher = true
stats = async
[statsd]
priority = normal
[invertd]
priority = normal
[cluster]
ps = $ep
workers = 2
statsd = 1
invertd = 1
[ps]
bind = $ep
metrics = $met
progress_every = 100
EOF2
  h_start "$name-ps" "$BUILD/kfac-ps" --config "$D/run.ini" "$@"
  ps_pid=$H_PID
  # kfac-ps's peak resident memory (VmHWM), kept while it runs
  (while kill -0 "$ps_pid" 2>/dev/null; do
     v=$(h_kb "$ps_pid" VmHWM) && [ -n "$v" ] && echo "$v" >"$D/hwm"
     sleep 0.2
   done) &
  H_PIDS="$H_PIDS $!"
  h_start "$name-worker1" "$BUILD/kfac-worker" --config "$D/run.ini" --worker.id 1
  W_PIDS=$H_PID
  h_start "$name-worker2" "$BUILD/kfac-worker" --config "$D/run.ini" --worker.id 2
  W_PIDS="$W_PIDS $H_PID"
  h_start "$name-statsd" "$BUILD/kfac-statsd" --config "$D/run.ini"
  h_start "$name-invertd" "$BUILD/kfac-invertd" --config "$D/run.ini"
  POKE_PID=""
  if [ "$attack" = 1 ]; then
    h_wait_rows "$D/out/steps.csv" "$JOIN" 120 "$ps_pid" || h_fail "$name: fewer than $JOIN steps after 120 s"
    h_start "$name-bias" "$BUILD/kfac-poke" --endpoint "$ep" --member_id 9 --member_kind bias --bias 0.02 \
      --bias_examples 64 --count 100000 --wait_ms 30000
    POKE_PID=$H_PID
  fi
  # the metrics once the run is near its end (the endpoint closes with it)
  h_wait_rows "$D/out/steps.csv" $((STEPS - 2)) 600 "$ps_pid" || h_fail "$name: fewer than $((STEPS - 2)) steps after 600 s"
  METRICS=$D/metrics.txt
  t=0
  until curl -fsS --max-time 5 "http://$met/metrics" >"$METRICS" 2>/dev/null; do
    t=$((t + 1))
    [ $t -lt 20 ] && kill -0 "$ps_pid" 2>/dev/null || h_fail "$name: the metrics endpoint $met did not answer"
    sleep 0.5
  done
  h_wait "$ps_pid" 240
  [ "$H_STATUS" = 0 ] || h_fail "$name: kfac-ps exited with status $H_STATUS (124: still running after 240 s)"
  if [ -n "$POKE_PID" ]; then
    h_wait "$POKE_PID" 60
    [ "$H_STATUS" = 0 ] || h_fail "$name: the attacker exited with status $H_STATUS (not welcomed?)"
  fi
  h_csv_need "$D/out/eval.csv" step test_acc polyak_acc test_loss
  row=$(awk -F, -v s="$STEPS" 'NR == 1 { for (i = 1; i <= NF; i++) h[$i] = i; next }
    $h["step"] == s { print $h["test_acc"], $h["polyak_acc"], $h["test_loss"] }' "$D/out/eval.csv")
  [ -n "$row" ] || h_fail "$name: no evaluation at step $STEPS in eval.csv"
  set -- $row
  ACC=$1 PACC=$2 LOSS=$3
  HWM=$(cat "$D/hwm" 2>/dev/null)
}

# metric NAME: one line of the metrics (exact name and labels).
metric() { awk -v m="$1" '$1 == m { print $2 }' "$METRICS"; }

run clean 0
C_ACC=$ACC C_PACC=$PACC C_LOSS=$LOSS
echo "58-hostile-bias: clean: test accuracy $ACC (Polyak $PACC), test loss $LOSS at step $STEPS"

run undefended 1 --ps.heldout_n 0
U_ACC=$ACC U_PACC=$PACC U_LOSS=$LOSS
u_rej=$(metric 'kfac_rejected_messages_total{type="grad_push"}')
echo "58-hostile-bias: undefended: test accuracy $ACC (Polyak $PACC), test loss $LOSS at step $STEPS; rejected GradPush ${u_rej:-?}"
grep -q "gradients pushed" "$H_DIR/undefended-bias.log" || h_fail "undefended: the attacker pushed nothing"
[ "${u_rej:-0}" = 0 ] || h_fail "undefended: $u_rej GradPush rejected: the attack is meant to pass every other rule"
h_ge "$U_LOSS" "$(awk -v l="$C_LOSS" -v b="$BITE" 'BEGIN { print l * b }')" ||
  h_fail "undefended: test loss $U_LOSS is less than $BITE x the clean $C_LOSS: the attack did not bite, so this test shows nothing"

run defended 1 --ps.heldout_n 256
D_ACC=$ACC D_PACC=$PACC D_LOSS=$LOSS
n=$(metric kfac_grads_drift_refused_total)
echo "58-hostile-bias: defended: test accuracy $ACC (Polyak $PACC), test loss $LOSS at step $STEPS; kfac_grads_drift_refused_total ${n:-?}"
[ "${n:-0}" -ge 1 ] || h_fail "defended: kfac_grads_drift_refused_total is '${n:-}', expected at least 1"
log=$H_DIR/defended-ps.log
grep -Eq "rejected grad_push from worker#[0-9]* \(pid $POKE_PID .*keep a direction of their own" "$log" ||
  h_fail "defended: kfac-ps's log never named the attacker (pid $POKE_PID)"
for w in $W_PIDS; do
  grep -Eq "\(pid $w .*keep a direction of their own" "$log" && h_fail "defended: an honest worker (pid $w) was refused"
done
named=$(grep -E "\(pid $POKE_PID .*keep a direction of their own" "$log" | head -n 1 | sed 's/^[^ ]* [A-Z]* *//' | cut -c1-220)
echo "58-hostile-bias: named: $named"
h_ge "$D_PACC" "$(awk -v a="$C_PACC" -v s="$SLACK" 'BEGIN { print a - s }')" ||
  h_fail "defended: Polyak accuracy $D_PACC is more than $SLACK below the clean $C_PACC"
h_ge "$D_ACC" "$(awk -v a="$C_ACC" -v s="$SLACK_RAW" 'BEGIN { print a - s }')" ||
  h_fail "defended: accuracy $D_ACC is more than $SLACK_RAW below the clean $C_ACC"
h_ge "$(awk -v l="$C_LOSS" -v r="$LOSS_RATIO" 'BEGIN { print l * r }')" "$D_LOSS" ||
  h_fail "defended: test loss $D_LOSS is more than $LOSS_RATIO x the clean $C_LOSS"
h_pass "bias -0.02 x the parameters from step $JOIN: undefended test loss $U_LOSS (accuracy $U_ACC, Polyak $U_PACC) against the clean $C_LOSS ($C_ACC, $C_PACC); defended $D_LOSS ($D_ACC, $D_PACC), $n pushes refused, the attacker named; kfac-ps's peak resident memory $HWM kB"
