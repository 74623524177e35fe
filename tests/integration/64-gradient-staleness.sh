#!/bin/sh
# tests/integration/64-gradient-staleness.sh — bounded gradient staleness
# ([ps] gradient_staleness = 2, [ps] quorum = 2). SGD on the MNIST MLP, 3
# workers, each waiting a random 0-40 ms before every push ([worker]
# delay_ms = 20: the step period follows the two fastest workers' pace more
# than the machine's load); worker 3 waits 0-200 ms (delay_ms = 100), so
# the rounds step on the two others' gradients and worker 3's arrive 0 to
# several versions late. Passes when the run finishes every step, worker
# 3's gradients of age 1 and 2 went into rounds (steps.csv's grad_age_mean
# above 0 in some rows, grad_age_max = 2 = s in some), none older
# (grad_age_max never above s), the older ones were discarded and counted
# (the summary's stale gradients), and the final test accuracy is at least
# ACC. gradient_staleness = 0 (the default) keeps the synchronous
# rounds: 55-deterministic.sh checks those bit for bit.
. tests/integration/harness.inc
h_init 64-gradient-staleness
ACC=0.85
STEPS=300
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
[ "$(awk 'NR > 1' "$f" | wc -l)" -eq "$STEPS" ] || h_fail "steps.csv does not have $STEPS rows"
cm=$(h_csv_col "$f" grad_age_mean) || h_fail "$cm"
cx=$(h_csv_col "$f" grad_age_max) || h_fail "$cx"
read -r aged mx mean <<EOF3
$(awk -F, -v m="$cm" -v x="$cx" 'NR > 1 { if ($m > 0) n++; if ($x > mx) mx = $x; s += $m; r++ } END { printf "%d %d %.4f\n", n, mx, s / r }' "$f")
EOF3
[ "$mx" -le 2 ] || h_fail "a step took a gradient $mx versions old (gradient_staleness = 2)"
[ "$aged" -ge 1 ] || h_fail "no step took a late gradient: worker 3's late gradients were not used"
[ "$mx" -eq 2 ] || h_fail "no step took a gradient 2 versions old (the most gradient_staleness = 2 allows): max $mx"
stale=$(sed -n 's/.*stale gradients \([0-9]*\).*/\1/p' "$H_DIR/ps.log" | tail -n 1)
[ -n "$stale" ] && [ "$stale" -ge 1 ] || h_fail "no gradient older than 2 versions was discarded and counted (stale gradients '$stale')"
acc=$(h_csv_last "$H_DIR/out/eval.csv" test_acc)
h_ge "$acc" "$ACC" || h_fail "test accuracy $acc below $ACC"
h_pass "$STEPS steps with gradient_staleness 2 and quorum 2: $aged steps took a late gradient (grad_age_mean $mean over the run, max $mx), $stale older ones discarded; test accuracy $acc"
