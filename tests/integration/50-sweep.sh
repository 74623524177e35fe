#!/bin/sh
# tests/integration/50-sweep.sh — the experiment runner (tools/kfac-sweep)
# end to end on a tiny sweep: two points of a 20-step MNIST MLP K-FAC
# cluster (1 worker, 1 statsd, 1 invertd, 2000 training and 300 test
# images), one seed: "async" (inverses never waited for) and "sync"
# (max_inverse_staleness = 0, every inverse held back 10 ms by
# kfac-invertd). Passes when both runs succeeded and the runner produced
# what a study needs, with sane content: runs.csv (one row per run, 20
# steps, positive iterations per second, the target step among the
# evaluations, the sync run with inverses of age 0 only), summary.csv and
# summary.md (both points, reached 1/1, steps to the target <= the steps
# run, positive iterations per second), rerun.sh (one exact command per
# run, with the point's overrides), the plot data, and the overview figure
# as a real PNG and an SVG naming both points. Then
# --report rebuilds the same summary from the run folders, --publish copies
# the tables and the overview's data (plot/), from which tools/kfac-figures
# redraws the overview, and a bad sweep file is a usage error (status 2)
# naming the line. Before the runs the sweep prints how many there are, and
# a progress line before each ("run 2/2: sync seed 3 (elapsed 12s, eta 9s)").
# Which point is faster is not checked: timings belong in bench/. CSV
# columns are read by name. Without gnuplot the figures cannot be made:
# everything else is checked, then the test reports itself skipped (77).
. tests/integration/harness.inc
h_init 50-sweep
have_gnuplot=1
command -v gnuplot >/dev/null 2>&1 || have_gnuplot=0
bin=$(cd "$BUILD" && pwd)
cat >"$H_DIR/base.ini" <<EOF2
[run]
steps = 20
eval_every = 10
eval_n = 300
[model]
file = models/mnist-mlp.model
[data]
batch = 32
train_n = 2000
[kfac]
damping = 0.03
[cluster]
workers = 1
statsd = 1
invertd = 1
[ps]
bind = tcp://127.0.0.1:0
progress_every = 10
EOF2
cat >"$H_DIR/tiny.sweep" <<EOF2
# two points, one seed
title = integration test sweep
base = $H_DIR/base.ini
seeds = 3
target_acc = 0.5
stop_at_target = no
# the curvature daemons at normal priority: at idle priority, beside a CPU load, the sync point waits for
# inverses that never come (they got no CPU time: more than 240 s beside two busy loops, 11 s alone)
set invertd.priority = normal
set statsd.priority = normal
point async = kfac.max_inverse_staleness=-1
point sync = kfac.max_inverse_staleness=0 invertd.delay_ms=10
EOF2
out=$H_DIR/out
h_start sweep env KFAC_BIN="$bin" sh tools/kfac-sweep "$H_DIR/tiny.sweep" --out "$out"
h_wait "$H_PID" 240
[ "$H_STATUS" = 0 ] || h_fail "kfac-sweep exited with status $H_STATUS (124: still running after 240 s)"
# before the runs: how many there are (no publication of this sweep: no estimate); before each: a progress line
grep -q '^kfac-sweep: 2 runs to do; no estimate' "$H_DIR/sweep.log" || h_fail "no 'kfac-sweep: 2 runs to do; no estimate' line before the runs"
grep -q '^kfac-sweep: run 1/2: async seed 3 (elapsed [0-9]*s, eta unknown)$' "$H_DIR/sweep.log" &&
  grep -q '^kfac-sweep: run 2/2: sync seed 3 (elapsed [0-9m]*s, eta [0-9m]*s)$' "$H_DIR/sweep.log" ||
  h_fail "no progress line 'run 1/2: async seed 3 (elapsed ..., eta unknown)' and 'run 2/2: sync seed 3 (elapsed ..., eta ...)'"

# runs.csv: two runs, status 0, 20 steps, it/s > 0, target reached at an evaluation step
[ -r "$out/runs.csv" ] || h_fail "no runs.csv"
rows=$(awk 'NR > 1' "$out/runs.csv" | wc -l)
[ "$rows" -eq 2 ] || h_fail "runs.csv has $rows runs, expected 2"
h_csv_need "$out/runs.csv" point status steps its seed target_step final_acc examples_per_step inverses inv_age_max \
  inv_age_mean
bad=$(awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) h[$i] = i; next }
  !($h["status"] == "0" && $h["steps"] == 20 && $h["its"] + 0 > 0 && $h["seed"] == 3 &&
    $h["target_step"] != "" && $h["target_step"] % 10 == 0 && $h["target_step"] <= 20 &&
    $h["final_acc"] + 0 > 0.5 && $h["final_acc"] + 0 <= 1 && $h["examples_per_step"] == 32) { print NR ": " $0 }' "$out/runs.csv")
[ -z "$bad" ] || h_fail "runs.csv rows not sane: $bad"
for p in async sync; do
  [ -r "$out/$p/3/steps.csv" ] && [ -r "$out/$p/3/eval.csv" ] && [ -r "$out/$p/3/logs/ps.log" ] ||
    h_fail "the run folder $out/$p/3 lacks steps.csv, eval.csv or logs/ps.log"
done
grep -q 'delay 10 ms' "$out/sync/3/logs/invertd-1.log" || h_fail "the sync point's --invertd.delay_ms 10 did not reach kfac-invertd"
awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) h[$i] = i; next }
  $h["point"] == 2 && !($h["inverses"] >= 6 && $h["inv_age_max"] == "0" && $h["inv_age_mean"] == "0.000") { exit 1 }' \
  "$out/runs.csv" || h_fail "the sync run's inverse columns are not sane: $(sed -n 3p "$out/runs.csv")"

# summary.csv / summary.md: both points, reached 1 of 1, steps to target within the run
h_csv_need "$out/summary.csv" runs ok reached target_step_mean its_mean label
awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) h[$i] = i; next }
  { n++; if ($h["runs"] != 1 || $h["ok"] != 1 || $h["reached"] != 1 || $h["target_step_mean"] + 0 < 10 ||
        $h["target_step_mean"] + 0 > 20 || $h["its_mean"] + 0 <= 0) bad = bad " " $h["label"] }
  $h["label"] == "async" { a = 1 } $h["label"] == "sync" { y = 1 }
  END { if (n != 2 || bad != "" || !a || !y) { print "points " n ", bad:" bad; exit 1 } }' "$out/summary.csv" ||
  h_fail "summary.csv not sane: $(cat "$out/summary.csv")"
grep -q '^| 1 | async | 1/1 ([01] current) |' "$out/summary.md" && grep -q '^| 2 | sync | 1/1 ([01] current) |' "$out/summary.md" ||
  h_fail "summary.md lacks the two points: $(cat "$out/summary.md")"

# rerun.sh: one command per run, each with its point's override
grep -q "$(pwd)/" "$out/rerun.sh" && h_fail "rerun.sh names this checkout's absolute path $(pwd): it must run from any checkout"
n=$(grep -c 'deploy/kfac-launch .*--run.seed 3 ' "$out/rerun.sh")
[ "$n" -eq 2 ] || h_fail "rerun.sh has $n run commands, expected 2"
grep -q -- '--kfac.max_inverse_staleness 0 --invertd.delay_ms 10  # sync, seed 3' "$out/rerun.sh" ||
  h_fail "rerun.sh lacks the sync point's overrides"

# plots: a PNG (magic bytes, not tiny) and an SVG naming both points (with
# gnuplot); curve data
size=0
if [ "$have_gnuplot" = 1 ]; then
  png=$out/overview.png
  [ -r "$png" ] || h_fail "no overview.png ($(cat "$out/plot/gnuplot.log" 2>/dev/null))"
  magic=$(od -An -c -N4 "$png" | tr -d ' ')
  [ "$magic" = '211PNG' ] || h_fail "overview.png is not a PNG (starts with '$magic')"
  size=$(wc -c <"$png")
  [ "$size" -gt 20000 ] || h_fail "overview.png is only $size bytes"
  grep -q '<svg' "$out/overview.svg" && grep -q '1: async' "$out/overview.svg" && grep -q '2: sync' "$out/overview.svg" ||
    h_fail "overview.svg is missing or does not name both points"
fi
# progress against measured staleness: the sync point reached the target
# with inverse age 0; the async point has a row when it installed an
# inverse before the target (not always in 20 steps), and then, its age
# being above 0, the inverse-age figures are drawn
grep -q '^2 0.0000 ' "$out/plot/age-inverse.dat" ||
  h_fail "plot/age-inverse.dat has no row for the sync point at age 0: $(cat "$out/plot/age-inverse.dat")"
ages=$(awk '$2 > 0 { n++ } END { print n + 0 }' "$out/plot/age-inverse.dat")
if [ "$have_gnuplot" = 1 ] && [ "$ages" -ge 1 ]; then
  for f in steps-vs-inverse-age.png steps-vs-age.png; do
    [ "$(od -An -c -N4 "$out/$f" 2>/dev/null | tr -d ' ')" = '211PNG' ] ||
      h_fail "no $f ($(cat "$out/plot/age-gnuplot.log" 2>/dev/null))"
  done
fi
steps_rows=$(wc -l <"$out/plot/steps-1.dat")
[ "$steps_rows" -eq 20 ] || h_fail "plot/steps-1.dat has $steps_rows rows, expected 20"

# --report rebuilds the same summary; a bad sweep file is a usage error
cp "$out/summary.csv" "$H_DIR/summary.before"
KFAC_BIN="$bin" sh tools/kfac-sweep "$H_DIR/tiny.sweep" --out "$out" --report >/dev/null 2>&1 ||
  h_fail "kfac-sweep --report failed"
cmp -s "$out/summary.csv" "$H_DIR/summary.before" || h_fail "--report gave another summary.csv"
# --publish: the tables, and the overview's data in plot/, from which tools/kfac-figures redraws the overview
pub=$H_DIR/pub/tiny
KFAC_BIN="$bin" sh tools/kfac-sweep "$H_DIR/tiny.sweep" --out "$out" --report --publish "$pub" >/dev/null 2>&1 ||
  h_fail "kfac-sweep --report --publish failed"
for f in runs.csv summary.csv summary.md rerun.sh plot/meta.gp plot/steps-1.dat plot/eval-2.dat plot/trade-1.dat; do
  [ -s "$pub/$f" ] || h_fail "--publish left out $f"
done
cmp -s "$pub/plot/steps-1.dat" "$out/plot/steps-1.dat" || h_fail "published plot/steps-1.dat differs from the sweep's (20 rows: none to thin)"
if [ "$have_gnuplot" = 1 ]; then
  sh tools/kfac-figures --docs "$H_DIR/pub" --out "$H_DIR/figs" >"$H_DIR/figures.log" 2>&1 ||
    h_fail "tools/kfac-figures failed on the publication: $(cat "$H_DIR/figures.log")"
  [ "$(od -An -c -N4 "$H_DIR/figs/tiny/overview.png" 2>/dev/null | tr -d ' ')" = '211PNG' ] &&
    grep -q '2: sync' "$H_DIR/figs/tiny/overview.svg" ||
    h_fail "tools/kfac-figures did not redraw the overview from the published plot/"
fi
printf 'base = %s\ncross kfac.damping 0.1\n' "$H_DIR/base.ini" >"$H_DIR/bad.sweep"
KFAC_BIN="$bin" sh tools/kfac-sweep "$H_DIR/bad.sweep" --out "$H_DIR/bad" >"$H_DIR/bad.log" 2>&1
st=$?
[ "$st" = 2 ] && grep -q 'bad.sweep:2: expected KEY = VALUE' "$H_DIR/bad.log" ||
  h_fail "a bad sweep file gave status $st: $(cat "$H_DIR/bad.log")"
[ "$have_gnuplot" = 1 ] ||
  h_skip "gnuplot is not installed, so overview.png/.svg were not checked (all else passed; tools/deps.sh installs gnuplot-nox)"
h_pass "2 points swept: runs.csv, summary, rerun.sh, overview.png ($size bytes) and .svg"
