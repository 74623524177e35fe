#!/bin/sh
# tests/integration/65-adaptive-damping.sh — [kfac] damping_rule = adaptive
# (the Levenberg-Marquardt rule) and [kfac] inverse_age_damping together. A
# K-FAC cluster (kfac-ps, 2 workers, 1 statsd, 1 invertd whose inverses are
# held back 50 ms, so they age) runs STEPS steps of the MNIST MLP with
# damping 0.01 in [0.001, 1], decisions every 5 steps. A step waits for
# inverses at most 30 versions old ([kfac] max_inverse_staleness), so
# inverses are installed however slowly the daemons run beside other load
# (without it, 150 steps ran past a busy statsd with one install). Passes
# when:
#  - steps.csv's damping column starts at [kfac] damping, stays within the
#    bounds, and changes: every change is one decision's factor
#    0.95^5 (or its inverse) or stops at a bound;
#  - the summary counts decisions, some of which moved the damping;
#  - inverses cut with one damping were installed while the damping moved
#    (none refused: each result is checked against its own job's damping);
#  - the KL bound was divided by 1 + 0.05 * the inverse age (mean above 1);
#  - the run's test accuracy is at least ACC.
. tests/integration/harness.inc
h_init 65-adaptive-damping
STEPS=150
ACC=0.75
port=$(h_port) || exit 1
cat >"$H_DIR/run.ini" <<EOF2
[run]
seed = 4
steps = $STEPS
eval_every = 1000
eval_n = 1000
out_dir = $H_DIR/out
[model]
file = models/mnist-mlp.model
[data]
batch = 32
train_n = 4000
[kfac]
damping = 0.01
damping_rule = adaptive
damping_min = 0.001
damping_max = 1
damping_interval = 5
damping_decay = 0.95
inverse_age_damping = 0.05
max_inverse_staleness = 30
[cluster]
workers = 2
statsd = 1
invertd = 1
[ps]
progress_every = 50
[invertd]
delay_ms = 50
EOF2
h_start launch env KFAC_BIN="$BUILD" sh deploy/kfac-launch "$H_DIR/run.ini" --port "$port" --nice 0 --quiet
h_wait "$H_PID" 150
[ "$H_STATUS" = 0 ] || h_fail "kfac-launch exited with status $H_STATUS (124: still running after 150 s)"
f=$H_DIR/out/steps.csv
[ "$(h_rows "$f")" -eq "$STEPS" ] || h_fail "steps.csv has $(h_rows "$f") rows, expected $STEPS"
cd_=$(h_csv_col "$f" damping) || h_fail "$cd_"
# every change of the damping: a decision's factor, or a bound reached
read -r first n_changes bad out_of <<EOF3
$(awk -F, -v c="$cd_" 'NR == 2 { first = $c; prev = $c }
  NR > 1 { d = $c + 0
    if (d < 0.001 * (1 - 1e-5) || d > 1 * (1 + 1e-5)) out++
    if (d != prev) { n++; r = d / prev; w = 0.95 ^ 5
      ok = (r > w * (1 - 1e-4) && r < w * (1 + 1e-4)) || (r > (1 / w) * (1 - 1e-4) && r < (1 / w) * (1 + 1e-4)) ||
           (d > 0.001 * (1 - 1e-5) && d < 0.001 * (1 + 1e-5)) || (d > 1 - 1e-5 && d < 1 + 1e-5)
      if (!ok) { bad++; if (!why) why = sprintf("%s -> %s", prev, d) } }
    prev = d }
  END { printf "%s %d %d %d\n", first, n, bad, out }' "$f")
EOF3
awk -v a="$first" 'BEGIN { exit !(a > 0.00999 && a < 0.01001) }' || h_fail "the first step's damping is $first, not [kfac] damping = 0.01"
[ "$out_of" = 0 ] || h_fail "$out_of steps had a damping outside [0.001, 1]"
[ "$bad" = 0 ] || h_fail "$bad changes of the damping were not a decision's factor 0.95^5 (or its inverse) nor a bound"
[ "$n_changes" -ge 2 ] || h_fail "the damping changed $n_changes times in $STEPS steps (a decision every 5 steps)"
sum=$(grep -E 'done: ' "$H_DIR/out/logs/ps.log" | tail -n 1)
dec=$(printf '%s\n' "$sum" | sed -n 's/.*adaptive damping [^ ]* (\([0-9]*\) decisions: \([0-9]*\) up, \([0-9]*\) down.*/\1 \2 \3/p')
[ -n "$dec" ] || h_fail "the summary has no adaptive damping part: $sum"
set -- $dec
[ "$1" -ge 10 ] || h_fail "only $1 decisions in $STEPS steps at interval 5"
[ $(($2 + $3)) -ge "$n_changes" ] || h_fail "the summary's $2 up and $3 down decisions do not account for $n_changes changes"
inv=$(h_csv_last "$f" inverses_installed)
h_ge "$inv" 3 || h_fail "only $inv inverses installed"
case $sum in *"inverses refused"*) h_fail "inverses were refused while the damping moved: $sum" ;; esac
div=$(printf '%s\n' "$sum" | sed -n 's/.*KL bound divided by inverse age: mean \([0-9.e+-]*\), max.*/\1/p')
[ -n "$div" ] || h_fail "the summary has no inverse-age part: $sum"
awk -v d="$div" 'BEGIN { exit !(d > 1.01) }' || h_fail "the KL bound was divided by a mean of $div: the inverses' age had no effect"
acc=$(h_csv_last "$H_DIR/out/eval.csv" test_acc)
h_ge "$acc" "$ACC" || h_fail "test accuracy $acc below $ACC"
h_pass "$STEPS steps: damping from $first through $n_changes changes to $(h_csv_last "$f" damping) ($1 decisions, $2 up, $3 down), $inv inverses installed, KL bound divided by $div on average, test accuracy $acc"
