#!/bin/sh
# tests/integration/50-staleness-bound.sh — [kfac] max_inverse_staleness = 0
# is the synchronous baseline: every step waits for statistics of its own
# version and the inverses computed from them. A K-FAC cluster (kfac-ps, 2
# workers, 1 statsd, 2 invertd) runs 60 steps of the MNIST MLP; passes when
# every row of steps.csv has inv_age_max <= 0 (no inverse older than the
# bound was used in any step) and inverses were installed.
. tests/integration/harness.inc
h_init 50-staleness-bound
STEPS=60
port=$(h_port) || exit 1
cat >"$H_DIR/run.ini" <<EOF2
[run]
seed = 4
steps = $STEPS
eval_every = 1000
eval_n = 500
out_dir = $H_DIR/out
[model]
file = models/mnist-mlp.model
[data]
batch = 32
train_n = 4000
[kfac]
max_inverse_staleness = 0
[cluster]
workers = 2
statsd = 1
invertd = 2
[ps]
progress_every = 10
EOF2
h_start launch env KFAC_BIN="$BUILD" sh deploy/kfac-launch "$H_DIR/run.ini" --port "$port" --nice 0 --quiet
h_wait "$H_PID" 150
st=$H_STATUS
[ "$st" = 0 ] || h_fail "kfac-launch exited with status $st (124: still running after 150 s)"
steps="$H_DIR/out/steps.csv"
rows=$(awk 'NR > 1' "$steps" | wc -l)
[ "$rows" -eq "$STEPS" ] || h_fail "steps.csv has $rows steps, expected $STEPS"
col=$(h_csv_col "$steps" inv_age_max) || h_fail "$col"
cs=$(h_csv_col "$steps" step) || h_fail "$cs"
bad=$(awk -F, -v c="$col" 'NR > 1 && $c + 0 > 0 { n++ } END { print n + 0 }' "$steps")
[ "$bad" = 0 ] || h_fail "$bad steps used inverses older than 0 versions: $(awk -F, -v c="$col" -v s="$cs" 'NR > 1 && $c + 0 > 0 { print "step " $s " age " $c; exit }' "$steps")"
inv=$(h_csv_last "$steps" inverses_installed)
h_ge "$inv" 1 || h_fail "no inverse was installed"
h_pass "$STEPS steps, inv_age_max 0 in every step, $inv inverses installed"
