#!/bin/sh
# tests/integration/22-step-breakdown.sh — the step-period columns of
# steps.csv (ps/metrics.h) add up. A K-FAC cluster (kfac-ps, 2 kfac-worker,
# 1 kfac-statsd, 1 kfac-invertd) trains the MNIST MLP for 120 steps with an
# evaluation of the whole test set every 40 steps; a step waits for
# inverses at most 100 versions old ([kfac] max_inverse_staleness), so that
# statistics are folded however slowly kfac-statsd starts beside other load
# (without it, 120 steps once ran past it). Passes when, besides a
# clean exit and 120 rows:
#   - wait_ms, curv_ms, update_ms, publish_ms are >= 0, curv_ms <= wait_ms
#     and eval_busy is 0 or 1 in every row;
#   - for every row after the first, the time between two rows' wall_s
#     equals the previous row's publish_ms plus this row's wait_ms and
#     update_ms within TOL_MS (wall_s is taken between update and publish
#     and printed to 1 ms, so each difference carries up to 1 ms of
#     rounding);
#   - the rows before the first evaluation have eval_busy = 0, and the row
#     after each evaluation is queued has eval_busy = 1 (the evaluation of
#     10000 images cannot end before the loop thread reads its state);
#   - statistics were folded (stats_folded grows) and kfac-ps's summary
#     says its curvature thread was busy (the folds, cuts and checks run
#     there, docs/architecture.md section 8; curv_ms holds only what is
#     left of them on the loop thread, the exchange of installed inverses
#     and the bookkeeping of what comes back, and may round to 0);
#   - kfac-ps ran the update's products on the 3 threads of [ps]
#     update_threads (its log says so), and the run above, with them, still
#     trained: the last 20 steps' mean training loss is below the first
#     20 steps'.
. tests/integration/harness.inc
h_init 22-step-breakdown
TOL_MS=3
port=$(h_port) || exit 1
cat >"$H_DIR/run.ini" <<EOF2
[run]
seed = 3
steps = 120
eval_every = 40
eval_n = 0
out_dir = $H_DIR/out
[model]
file = models/mnist-mlp.model
[data]
batch = 64
train_n = 10000
[optimizer]
kind = kfac
[kfac]
max_inverse_staleness = 100
[cluster]
workers = 2
statsd = 1
invertd = 1
[ps]
progress_every = 50
update_threads = 3
EOF2
h_start launch env KFAC_BIN="$BUILD" sh deploy/kfac-launch "$H_DIR/run.ini" --port "$port" --nice 0 --quiet
h_wait "$H_PID" 150
st=$H_STATUS
[ "$st" = 0 ] || h_fail "kfac-launch exited with status $st (124: still running after 150 s)"
steps="$H_DIR/out/steps.csv"
rows=$(awk 'NR > 1' "$steps" | wc -l)
[ "$rows" -eq 120 ] || h_fail "steps.csv has $rows steps, expected 120"
h_csv_need "$steps" step wall_s wait_ms curv_ms update_ms publish_ms eval_busy stats_folded
msg=$(awk -F, -v tol="$TOL_MS" '
  NR == 1 { for (i = 1; i <= NF; i++) h[$i] = i; next }
  {
    s = $h["step"]; w = $h["wait_ms"]; c = $h["curv_ms"]; u = $h["update_ms"]; p = $h["publish_ms"]; e = $h["eval_busy"]
    if (w < 0 || c < 0 || u < 0 || p < 0) { print "step " s ": a negative time"; exit 1 }
    if (c > w + 0.001) { print "step " s ": curv_ms " c " > wait_ms " w; exit 1 }
    if (e != 0 && e != 1) { print "step " s ": eval_busy " e; exit 1 }
    if (s <= 40 && e != 0) { print "step " s ": eval_busy before the first evaluation"; exit 1 }
    if ((s == 41 || s == 81) && e != 1) { print "step " s ": eval_busy 0 right after an evaluation was queued"; exit 1 }
    if ($h["stats_folded"] > 0) curv++
    if (NR > 2) {
      gap = ($h["wall_s"] - prev_wall) * 1000; parts = prev_pub + w + u
      d = gap - parts; if (d < 0) d = -d
      if (d > tol) { printf "step %d: wall_s advanced %.1f ms, publish+wait+update = %.1f ms\n", s, gap, parts; exit 1 }
    }
    prev_wall = $h["wall_s"]; prev_pub = p
  }
  END { if (!curv) { print "no statistics were folded"; exit 1 } }' "$steps") || h_fail "$msg"
grep -q "update: on 3 threads" "$H_DIR/out/logs/ps.log" ||
  h_fail "kfac-ps did not start the 3 update threads of [ps] update_threads: $(grep 'update:' "$H_DIR/out/logs/ps.log")"
busy=$(sed -n 's/.*done:.*, curvature thread \([0-9.]*\) s busy.*/\1/p' "$H_DIR/out/logs/ps.log" | tail -n 1)
awk -v b="$busy" 'BEGIN { exit !(b ~ /^[0-9.]+$/ && b + 0 > 0) }' ||
  h_fail "kfac-ps's summary does not say its curvature thread was busy: '$(grep 'done:' "$H_DIR/out/logs/ps.log" | tail -n 1)'"
msg=$(awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) h[$i] = i; next }
  $h["step"] <= 20 { a += $h["train_loss"]; na++ } $h["step"] > 100 { b += $h["train_loss"]; nb++ }
  END { if (!(b / nb < a / na)) { printf "training loss did not fall: %.4f first 20 steps, %.4f last 20\n", a / na, b / nb; exit 1 } }' "$steps") ||
  h_fail "$msg"
h_pass "120 rows: the period columns add up to the wall clock within $TOL_MS ms; eval_busy marks the evaluations; the update ran on 3 threads and the loss fell; the curvature thread was busy ${busy}s"
