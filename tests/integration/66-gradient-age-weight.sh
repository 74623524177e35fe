#!/bin/sh
# tests/integration/66-gradient-age-weight.sh — [ps] gradient_age_weight =
# inverse: a gradient a versions old enters the round's mean with weight
# 1 / (1 + a) (its examples times that, the mean still divided by the
# examples). The setting of 64-gradient-staleness.sh (SGD on the MNIST
# MLP, 3 workers, quorum 2, gradient_staleness 2, worker 3 slower), for
# STEPS steps. All pushes carry the same number of examples, so a round's
# grad_weight_mean (steps.csv) is the mean of its gradients' weights.
# Passes when every row is consistent with its ages:
#  - grad_age_max = 0 (all fresh): weight exactly 1;
#  - grad_age_max = m > 0: weight below 1, at least 1 / (1 + m) and at
#    most (n - 1 + 1 / (1 + m)) / n with n = workers_present (one gradient
#    m old, the others possibly fresh);
# some rows have late gradients, and the test accuracy is at least ACC.
. tests/integration/harness.inc
h_init 66-gradient-age-weight
ACC=0.8
STEPS=200
port=$(h_port) || exit 1
ep="tcp://127.0.0.1:$port"
cat >"$H_DIR/run.ini" <<EOF2
[run]
seed = 4
steps = $STEPS
eval_every = 100000
eval_n = 2000
out_dir = $H_DIR/out
[model]
file = models/mnist-mlp.model
[optimizer]
kind = sgd
[data]
batch = 32
train_n = 5000
[cluster]
ps = $ep
workers = 3
[ps]
bind = $ep
gradient_staleness = 2
gradient_age_weight = inverse
quorum = 2
progress_every = 100
[worker]
delay_ms = 20
EOF2
h_start ps "$BUILD/kfac-ps" --config "$H_DIR/run.ini"
ps_pid=$H_PID
h_start worker1 "$BUILD/kfac-worker" --config "$H_DIR/run.ini" --worker.id 1
h_start worker2 "$BUILD/kfac-worker" --config "$H_DIR/run.ini" --worker.id 2
h_start worker3 "$BUILD/kfac-worker" --config "$H_DIR/run.ini" --worker.id 3 --worker.delay_ms 100
h_wait "$ps_pid" 180
[ "$H_STATUS" = 0 ] || h_fail "kfac-ps exited with status $H_STATUS (124: still running after 180 s)"
f=$H_DIR/out/steps.csv
[ "$(h_rows "$f")" -eq "$STEPS" ] || h_fail "steps.csv does not have $STEPS rows"
h_csv_need "$f" grad_age_max grad_weight_mean workers_present step
read -r aged fresh bad why <<EOF3
$(awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) h[$i] = i; next }
  { m = $h["grad_age_max"] + 0; w = $h["grad_weight_mean"] + 0; n = $h["workers_present"] + 0
    if (m == 0) { fresh++; ok = w == 1 }
    else { aged++; lo = 1 / (1 + m); hi = (n - 1 + lo) / n; ok = w < 1 && w >= lo * (1 - 1e-5) && w <= hi * (1 + 1e-5) }
    if (!ok) { bad++; if (!why) why = sprintf("step_%s:_age_max_%d,_%d_gradients,_weight_%s", $h["step"], m, n, w) } }
  END { printf "%d %d %d %s\n", aged, fresh, bad, why ? why : "-" }' "$f")
EOF3
[ "$bad" = 0 ] || h_fail "$bad rows' grad_weight_mean does not fit their gradients' ages (first: $why)"
[ "$aged" -ge 1 ] || h_fail "no step took a late gradient: nothing was weighted"
[ "$fresh" -ge 1 ] || h_fail "no step had only fresh gradients"
wm=$(awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "grad_weight_mean") c = i; next } { s += $c; n++ } END { printf "%.4f", s / n }' "$f")
acc=$(h_csv_last "$H_DIR/out/eval.csv" test_acc)
h_ge "$acc" "$ACC" || h_fail "test accuracy $acc below $ACC"
h_pass "$STEPS steps, $aged with late gradients weighted by 1/(1 + age) (mean weight $wm over the run), $fresh all fresh at weight 1; test accuracy $acc"
