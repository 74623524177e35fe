#!/bin/sh
# tests/integration/20-kfac-cluster.sh — a whole K-FAC cluster on this host:
# deploy/kfac-launch starts kfac-ps, 2 kfac-worker, 1 kfac-statsd and 2
# kfac-invertd; they train the MNIST MLP (first 10000 training examples,
# batch 64 per worker) for 200 steps. Passes when
#   - the launcher and every daemon exit 0 (the run ends by itself),
#   - steps.csv has all 200 steps, each with 2 workers present, and inverses
#     and statistics arrived: at least MIN_INV block inverses installed (an
#     honest run installs 435-448 on 2 CPUs: every one of the 6 blocks about
#     every 3 steps; 1 inverse in 200 steps is a failure) and statistics
#     folded,
#   - the final test accuracy on 2000 test examples (current parameters or
#     their Polyak average) is at least ACC.
# The launcher runs with --nice 0 and the curvature daemons compute at normal
# priority ([statsd]/[invertd] priority): the test is about K-FAC with a
# steady supply of statistics and inverses, not about the scheduling of a
# busy host.
. tests/integration/harness.inc
h_init 20-kfac-cluster
MIN_INV=100  # a quarter of what honest runs install (above)
ACC=0.92   # the MLP reaches ~0.94-0.95 here; plain SGD at this budget ~0.90
port=$(h_port) || exit 1
cat >"$H_DIR/run.ini" <<EOF2
[run]
seed = 1
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
kind = kfac
[cluster]
workers = 2
statsd = 1
invertd = 2
[ps]
progress_every = 50
[statsd]
priority = normal
[invertd]
priority = normal
EOF2
h_start launch env KFAC_BIN="$BUILD" sh deploy/kfac-launch "$H_DIR/run.ini" --port "$port" --nice 0 --quiet
h_wait "$H_PID" 150
st=$H_STATUS
[ "$st" = 0 ] || h_fail "kfac-launch exited with status $st (124: still running after 150 s)"
grep -q "6 of 6 daemons exited cleanly" "$H_DIR/launch.log" || h_fail "not every daemon exited cleanly"
steps="$H_DIR/out/steps.csv"
[ -r "$steps" ] || h_fail "no steps.csv"
rows=$(awk 'NR > 1' "$steps" | wc -l)
[ "$rows" -eq 200 ] || h_fail "steps.csv has $rows steps, expected 200"
wp=$(h_csv_col "$steps" workers_present) || h_fail "$wp"
awk -F, -v c="$wp" 'NR > 1 && $c != 2 { bad = 1 } END { exit bad }' "$steps" || h_fail "a step ran without both workers"
inv=$(h_csv_last "$steps" inverses_installed)
folded=$(h_csv_last "$steps" stats_folded)
h_ge "$inv" "$MIN_INV" || h_fail "${inv:-no} inverses installed in 200 steps, want at least $MIN_INV"
h_ge "$folded" 1 || h_fail "no statistics were folded ($folded)"
acc=$(h_csv_last "$H_DIR/out/eval.csv" test_acc)
pacc=$(h_csv_last "$H_DIR/out/eval.csv" polyak_acc)
best=$(h_max "$acc" "$pacc")
h_ge "$best" "$ACC" || h_fail "final test accuracy $acc (Polyak $pacc) is below $ACC"
h_pass "200 steps, test accuracy $acc (Polyak $pacc) >= $ACC, $inv inverses, $folded statistics batches"
