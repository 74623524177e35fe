#!/bin/sh
# tests/integration/53-sweep-noinverse.sh — a K-FAC run that installed no
# inverse is K-FAC in name only, and the sweep says so: two points of a
# 150-step MNIST MLP K-FAC cluster with statistics from the worker
# ([kfac] stats = sync), "with" (1 kfac-invertd) and "without" ([cluster]
# invertd = 0). Passes when the summary notes that K-FAC was
# effectively off in the "without" point's run (and only there), and the
# figure's label of that point (plot/meta.gp) carries the mark while the
# other's does not. Needs no gnuplot (the labels are checked in the plot
# data).
. tests/integration/harness.inc
h_init 53-sweep-noinverse
bin=$(cd "$BUILD" && pwd)
cat >"$H_DIR/base.ini" <<EOF2
[run]
steps = 150
eval_every = 50
eval_n = 300
[model]
file = models/mnist-mlp.model
[data]
batch = 32
train_n = 2000
[kfac]
stats = sync
[cluster]
workers = 1
statsd = 0
invertd = 1
[ps]
bind = tcp://127.0.0.1:0
EOF2
cat >"$H_DIR/s.sweep" <<EOF2
title = no-inverse labels
base = $H_DIR/base.ini
seeds = 1
point with = cluster.invertd=1
point without = cluster.invertd=0
EOF2
out=$H_DIR/out
h_start sweep env KFAC_BIN="$bin" sh tools/kfac-sweep "$H_DIR/s.sweep" --out "$out"
h_wait "$H_PID" 90
[ "$H_STATUS" = 0 ] || h_fail "kfac-sweep exited with status $H_STATUS (124: still running after 90 s)"
inv_with=$(h_csv_last "$out/with/1/steps.csv" inverses_installed)
h_ge "$inv_with" 1 || h_fail "the 'with' run installed no inverse ($inv_with): the test cannot tell the points apart"
grep -q "^Point 2: K-FAC effectively off in 1 of 1 runs" "$out/summary.md" ||
  h_fail "summary.md does not note point 2 (without): $(tail -n 5 "$out/summary.md")"
grep -q "^Point 1: K-FAC effectively off" "$out/summary.md" && h_fail "summary.md marks point 1, which installed inverses"
grep -q '^L\[2\] = "2: without \[no inverse installed: K-FAC off\]"$' "$out/plot/meta.gp" ||
  h_fail "the figure's label of point 2 lacks the mark: $(grep '^L' "$out/plot/meta.gp")"
grep -q '^L\[1\] = "1: with"$' "$out/plot/meta.gp" || h_fail "point 1's label changed: $(grep '^L' "$out/plot/meta.gp")"
h_pass "the point whose run installed no inverse is labelled in the summary and the figure, the other is not"
