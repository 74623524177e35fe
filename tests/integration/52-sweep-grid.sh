#!/bin/sh
# tests/integration/52-sweep-grid.sh — the tuned-baseline protocol of
# tools/kfac-sweep (docs/experiments.md, "Tuned baselines") end to end on a
# tiny in-process study: the MNIST MLP, 20 steps of batch 32 on 2000
# training images, evaluated every 5 steps on 300 test images. Two
# optimizer arms with their own grids: SGD over learning rate x schedule
# (4 points, seed 1) and K-FAC over damping x kl_c0 (2 x 1 points, seeds 1
# and 2), 4 runs each. Passes when every run succeeded; the SGD runs' eval
# rows carry a Polyak average of their own (kfac-train averages SGD's
# iterates too); the per-optimizer best rows (summary.md and best.csv) are
# the points an independent recomputation from runs.csv picks (most runs
# at the target, then the smallest mean steps or wall time); each arm's
# whole grid is a table with one row per point and a column per grid key.
# Then: an unbalanced study (different grid points x seeds) is refused
# with status 2 and a clear message, and accepted with "balance = no";
# optimizer lines mixed with cross lines are refused.
. tests/integration/harness.inc
h_init 52-sweep-grid
bin=$(cd "$BUILD" && pwd)
[ -x "$bin/kfac-train" ] || h_fail "missing $bin/kfac-train"
cat >"$H_DIR/base.ini" <<EOF2
[run]
steps = 20
eval_every = 5
eval_n = 300
[model]
file = models/mnist-mlp.model
[data]
batch = 32
train_n = 2000
[kfac]
inverse_every = 5
EOF2
cat >"$H_DIR/grid.sweep" <<EOF2
title = grid integration test
base = $H_DIR/base.ini
mode = inprocess
seeds = 1
target_acc = 0.6
stop_at_target = no
optimizer sgd = optimizer.kind=sgd optimizer.lr_every=10 optimizer.polyak_decay=0.9
grid sgd optimizer.lr = 0.02 0.05
grid sgd optimizer.lr_schedule = constant cosine
optimizer kfac = optimizer.kind=kfac
grid kfac kfac.damping = 0.01 0.03
grid kfac kfac.kl_c0 = 0.001
seeds kfac = 1 2
EOF2
out=$H_DIR/out
h_start sweep env KFAC_BIN="$bin" sh tools/kfac-sweep "$H_DIR/grid.sweep" --out "$out"
h_wait "$H_PID" 120
[ "$H_STATUS" = 0 ] || h_fail "kfac-sweep exited with status $H_STATUS (124: still running after 120 s)"

# runs.csv: 8 runs, all succeeded, 20 steps each; K-FAC with seeds 1 and 2
[ -r "$out/runs.csv" ] || h_fail "no runs.csv"
bad=$(awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) h[$i] = i; next }
  { n++; if ($h["status"] != "0" || $h["steps"] != 20) print NR ": " $0 }
  END { if (n != 8) print "runs: " n }' "$out/runs.csv")
[ -z "$bad" ] || h_fail "runs.csv not sane: $bad"
for p in sgd_lr=0.02_lr_schedule=constant/1 sgd_lr=0.05_lr_schedule=cosine/1 kfac_damping=0.01_kl_c0=0.001/1 \
  kfac_damping=0.03_kl_c0=0.001/2; do
  [ -r "$out/$p/eval.csv" ] || h_fail "no run folder $out/$p"
done
[ ! -d "$out/sgd_lr=0.02_lr_schedule=constant/2" ] || h_fail "an SGD point ran seed 2 (its arm has seed 1 only)"
grep -q -- '--optimizer.polyak_decay 0.9 --optimizer.lr 0.05 --optimizer.lr_schedule cosine' "$out/rerun.sh" ||
  h_fail "rerun.sh lacks an SGD grid point's overrides"
# SGD's Polyak average is its own (not a copy of the current parameters)
awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) h[$i] = i; next } $h["polyak_acc"] != $h["test_acc"] { d = 1 } END { exit !d }' \
  "$out/sgd_lr=0.05_lr_schedule=constant/1/eval.csv" || h_fail "the SGD run's Polyak column equals its current one"

# the best points, recomputed from runs.csv: per arm (from the point label),
# the largest fraction of runs at the target, then the smallest mean over
# those runs; ties to the earlier point
expect=$(awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) h[$i] = i; next }
  { p = $1; n[p]++; if (!(p in order)) order[p] = ++np; pt[np] = p
    if ($h["target_step"] != "") { r[p]++; st[p] += $h["target_step"]; wl[p] += $h["target_wall_s"] } }
  END {
    while ((getline l < lab) > 0) { split(l, f, "\t"); split(f[2], w, " "); arm[f[1]] = w[1] }
    split("wall steps", crit, " ")
    for (a = 1; a <= 2; a++) { an = a == 1 ? "sgd" : "kfac"
      for (c = 1; c <= 2; c++) { b = ""
        for (i = 1; i <= np; i++) { p = pt[i]; if (arm[p] != an || !r[p]) continue
          m = (c == 1 ? wl[p] : st[p]) / r[p]; fr = r[p] / n[p]
          if (b == "" || fr > bf || (fr == bf && m < bm)) { b = p; bf = fr; bm = m } }
        print an "," crit[c] "," b } } }' lab="$out/points.tsv" "$out/runs.csv")
got=$(awk -F, 'NR > 1 { print $1 "," $2 "," $3 }' "$out/best.csv")
[ "$got" = "$expect" ] || h_fail "best.csv picks
$got
but runs.csv gives
$expect"
md=$out/summary.md
grep -q '^## Tuned baselines' "$md" || h_fail "summary.md has no Tuned baselines section"
for row in $expect; do
  a=${row%%,*}; rest=${row#*,}; by=${rest%%,*}; p=${rest#*,}
  [ "$by" = wall ] && by="wall time"
  grep -q "^| $a | $by | $p | $a " "$md" || h_fail "summary.md lacks the best row '$a by $by: point $p': $(cat "$md")"
done

# each arm's whole grid: a header with its keys and one row per point
grep -q '^### Grid: sgd' "$md" && grep -q '^| # | lr | lr_schedule | reached |' "$md" ||
  h_fail "summary.md lacks the SGD grid table"
grep -q '^### Grid: kfac' "$md" && grep -q '^| # | damping | kl_c0 | reached |' "$md" ||
  h_fail "summary.md lacks the K-FAC grid table"
for r in '| 1 | 0.02 | constant |' '| 2 | 0.02 | cosine |' '| 3 | 0.05 | constant |' '| 4 | 0.05 | cosine |' \
  '| 5 | 0.01 | 0.001 | [0-2]/2 |' '| 6 | 0.03 | 0.001 | [0-2]/2 |'; do
  grep -q "^$r" "$md" || h_fail "summary.md's grid tables lack the row '$r'"
done
n=$(awk '/^### Grid: sgd/ { g = 1; next } /^### / { g = 0 } g && /^\| [0-9]/ { n++ } END { print n + 0 }' "$md")
[ "$n" = 4 ] || h_fail "the SGD grid table has $n rows, expected 4"

# balance: 4 SGD runs against 2 K-FAC runs is refused, unless allowed
grep -v '^seeds kfac' "$H_DIR/grid.sweep" >"$H_DIR/unbalanced.sweep"
KFAC_BIN="$bin" sh tools/kfac-sweep "$H_DIR/unbalanced.sweep" --out "$H_DIR/u" --dry-run >"$H_DIR/u.log" 2>&1
st=$?
[ "$st" = 2 ] && grep -q 'different numbers of runs (sgd 4 points x 1 seed = 4, kfac 2 points x 1 seed = 2)' "$H_DIR/u.log" &&
  grep -q 'balance = no' "$H_DIR/u.log" || h_fail "an unbalanced study gave status $st: $(cat "$H_DIR/u.log")"
echo 'balance = no' >>"$H_DIR/unbalanced.sweep"
n=$(KFAC_BIN="$bin" sh tools/kfac-sweep "$H_DIR/unbalanced.sweep" --out "$H_DIR/u" --dry-run 2>"$H_DIR/u.log" | grep -c kfac-train)
[ "$n" = 6 ] || h_fail "balance = no: $n commands, expected 6 ($(cat "$H_DIR/u.log"))"
{ cat "$H_DIR/grid.sweep"; echo 'cross run.steps = 10 20'; } >"$H_DIR/mixed.sweep"
KFAC_BIN="$bin" sh tools/kfac-sweep "$H_DIR/mixed.sweep" --out "$H_DIR/m" --dry-run >"$H_DIR/m.log" 2>&1
st=$?
[ "$st" = 2 ] && grep -q 'cannot be mixed' "$H_DIR/m.log" || h_fail "optimizer with cross lines gave status $st: $(cat "$H_DIR/m.log")"
h_pass "2 optimizer grids (4 SGD points x 1 seed, 2 K-FAC points x 2 seeds): best rows, grid tables, balance check"
