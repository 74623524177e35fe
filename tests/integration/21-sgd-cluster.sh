#!/bin/sh
# tests/integration/21-sgd-cluster.sh — the same cluster with optimizer sgd
# and no kfac-statsd / kfac-invertd: deploy/kfac-launch starts kfac-ps and 2
# kfac-worker, which train the MNIST MLP (first 10000 training examples,
# batch 64 per worker) for 200 steps. Passes when the launcher and the
# daemons exit 0, steps.csv has 200 steps with 2 workers and no inverse, and
# the final test accuracy on 2000 test examples is at least ACC, for the
# current parameters and for their Polyak average, which SGD keeps as K-FAC
# does (its loss differs from the current one's: it is another point); the
# summary line and manifest.json name that accuracy.
. tests/integration/harness.inc
h_init 21-sgd-cluster
ACC=0.90   # SGD (lr 0.05, momentum 0.9) reaches ~0.93 at this budget
port=$(h_port) || exit 1
cat >"$H_DIR/run.ini" <<EOF2
[run]
seed = 2
steps = 200
eval_every = 100
eval_n = 2000
out_dir = $H_DIR/out
[model]
file = models/mnist-mlp.model
[data]
batch = 64
train_n = 10000
[optimizer]
kind = sgd
lr = 0.05
momentum = 0.9
[cluster]
workers = 2
statsd = 0
invertd = 0
[ps]
progress_every = 50
EOF2
h_start launch env KFAC_BIN="$BUILD" sh deploy/kfac-launch "$H_DIR/run.ini" --port "$port" --quiet
h_wait "$H_PID" 120
st=$H_STATUS
[ "$st" = 0 ] || h_fail "kfac-launch exited with status $st (124: still running after 120 s)"
grep -q "3 of 3 daemons exited cleanly" "$H_DIR/launch.log" || h_fail "expected kfac-ps and 2 workers to exit cleanly"
steps="$H_DIR/out/steps.csv"
rows=$(awk 'NR > 1' "$steps" | wc -l)
[ "$rows" -eq 200 ] || h_fail "steps.csv has $rows steps, expected 200"
wp=$(h_csv_col "$steps" workers_present) || h_fail "$wp"
awk -F, -v c="$wp" 'NR > 1 && $c != 2 { bad = 1 } END { exit bad }' "$steps" || h_fail "a step ran without both workers"
# every step's count, from a column that must be there (a missing column
# is a failure, not zero inverses)
ic=$(h_csv_col "$steps" inverses_installed) || h_fail "$ic"
inv=$(awk -F, -v c="$ic" 'NR > 1 && $c != "0" { v = $c } END { print v }' "$steps")
[ -z "$inv" ] || h_fail "sgd installed $inv inverses"
acc=$(h_csv_last "$H_DIR/out/eval.csv" test_acc)
h_ge "$acc" "$ACC" || h_fail "final test accuracy $acc is below $ACC"
pacc=$(h_csv_last "$H_DIR/out/eval.csv" polyak_acc)
h_ge "$pacc" "$ACC" || h_fail "final Polyak test accuracy $pacc is below $ACC"
loss=$(h_csv_last "$H_DIR/out/eval.csv" test_loss)
ploss=$(h_csv_last "$H_DIR/out/eval.csv" polyak_loss)
[ "$loss" != "$ploss" ] || h_fail "the Polyak loss equals the current one ($loss): sgd keeps no Polyak average"
# The final evaluation outlives the evaluation thread: the summary line
# and the weights' manifest, both written after it stopped, carry it.
pct=$(awk -v a="$acc" 'BEGIN { printf "%.2f", 100 * a }')
grep -q "^done: 200 steps in .*, test acc $pct% " "$H_DIR/out/logs/ps.log" ||
  h_fail "kfac-ps's summary line does not name the final test accuracy $pct%: $(grep '^done:' "$H_DIR/out/logs/ps.log")"
grep -q "\"test_acc\": $acc[,}]" "$H_DIR/out/manifest.json" ||
  h_fail "manifest.json does not hold the final test accuracy $acc"
h_pass "200 sgd steps, test accuracy $acc (polyak $pacc) >= $ACC; the summary line and the manifest carry it"
