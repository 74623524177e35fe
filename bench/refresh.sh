#!/bin/sh
# bench/refresh.sh — [kfac] refresh = adaptive against refresh = every on
# the MNIST CNN (models/mnist-cnn.model), a local cluster as in `make demo`
# (kfac-ps, 2 kfac-worker, 1 kfac-statsd, 2 kfac-invertd, all at nice 0):
# statistics computed per step, kfac-statsd's CPU time, and steps to a test
# accuracy target (current parameters or their Polyak average, whichever
# gets there first; evaluations on the whole test set every EVAL steps, so
# the step count has that resolution).
#
#   sh bench/refresh.sh                        # seeds 1 2, target 0.985
#   SEEDS="1 2 3" TARGET=0.985 STATSD_BATCH=512 sh bench/refresh.sh
#
# The points (POINTS, space-separated NAME:OVERRIDES with commas for spaces):
#   every      refresh = every, inverse_every = 20 (statsd computes all
#              layers continuously)
#   adaptive   refresh = adaptive, refresh_alpha = 0.1 (SP-NGD)
#   adaptive08 refresh = adaptive, refresh_alpha = 0.8
# Runs are interleaved (seed by seed, every point in turn) so that the load
# of a shared machine falls on all points alike; wall times are printed as
# ratios to the `every` run of the same seed only. "reached>after" is the
# first evaluation at or above the target and the evaluation before it (the
# PS skips evaluations while two are queued, so on a loaded machine the
# bracket can be wider than EVAL). Prints one line per run
# and a Markdown table of the means; the run folders stay in $OUT.
# Needs a build (make) and the MNIST files in data/. Never pass/fail.
set -u
BUILD=${BUILD:-build}
SEEDS=${SEEDS:-"1 2"}
TARGET=${TARGET:-0.985}
EVAL=${EVAL:-50}
STEPS=${STEPS:-1200}
STATSD_BATCH=${STATSD_BATCH:-0}
OUT=${OUT:-/tmp/kfac-bench-refresh}
POINTS=${POINTS:-"every:--kfac.refresh,every,--kfac.inverse_every,20 adaptive:--kfac.refresh,adaptive,--kfac.refresh_alpha,0.1 adaptive08:--kfac.refresh,adaptive,--kfac.refresh_alpha,0.8"}
for b in kfac-ps kfac-worker kfac-statsd kfac-invertd; do
  [ -x "$BUILD/$b" ] || { echo "bench/refresh.sh: missing $BUILD/$b (run make)"; exit 1; }
done
mkdir -p "$OUT"
echo "bench/refresh.sh: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "target $TARGET, evaluations every $EVAL steps on the 10000 test images, at most $STEPS steps, statsd batch $STATSD_BATCH (0: data batch 64), seeds $SEEDS"
printf '%-11s %4s %7s %8s %8s %9s %11s %8s %9s %7s\n' point seed 'reached>after' steps batches layerst layerst/stp statsdCPU wall_s wall/ev
ROWS="$OUT/rows.txt"
: >"$ROWS"
for seed in $SEEDS; do
  ev_wall=""
  for pt in $POINTS; do
    name=${pt%%:*}
    over=$(echo "${pt#*:}" | tr ',' ' ')
    dir="$OUT/$name-s$seed"
    rm -rf "$dir"
    t0=$(date +%s.%N)
    # shellcheck disable=SC2086
    env KFAC_BIN="$BUILD" sh deploy/kfac-launch deploy/examples/mnist-cnn-kfac.ini --nice 0 --quiet \
      --run.seed "$seed" --run.target_acc "$TARGET" --run.steps "$STEPS" --run.eval_every "$EVAL" \
      --run.out_dir "$dir" --statsd.batch "$STATSD_BATCH" $over >"$dir.launch.log" 2>&1
    rc=$?
    t1=$(date +%s.%N)
    wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
    # the first evaluation at or above the target, and the one before it
    # (the PS skips evaluations while two are queued, so the gap varies)
    reached=$(awk -F, -v t="$TARGET" 'NR > 1 && ($4 + 0 >= t || $6 + 0 >= t) { print $1; exit }' "$dir/eval.csv" 2>/dev/null)
    before=$(awk -F, -v t="$TARGET" 'NR > 1 { if ($4 + 0 >= t || $6 + 0 >= t) exit; b = $1 } END { print b + 0 }' "$dir/eval.csv" 2>/dev/null)
    [ -n "$reached" ] || reached=none
    steps=$(awk -F, 'NR > 1 { s = $1 } END { print s + 0 }' "$dir/steps.csv" 2>/dev/null)
    sd=$(grep -h "layer statistics: " "$dir"/logs/statsd*.log 2>/dev/null | tail -n 1)
    batches=$(echo "$sd" | sed -n 's/.* computed in \([0-9]*\) batches.*/\1/p')
    lstats=$(echo "$sd" | sed -n 's/.*layer statistics: \([0-9]*\) computed.*/\1/p')
    cpu=$(grep -h "process CPU time: " "$dir"/logs/statsd*.log 2>/dev/null | tail -n 1 |
      sed -n 's/.*time: \([0-9.]*\) s user, \([0-9.]*\) s system.*/\1 \2/p' | awk '{ printf "%.2f", $1 + $2 }')
    [ -n "$ev_wall" ] || ev_wall=$wall
    ratio=$(awk -v a="$wall" -v b="$ev_wall" 'BEGIN { printf "%.2f", a / b }')
    per=$(awk -v a="${lstats:-0}" -v s="$steps" 'BEGIN { printf "%.2f", (s > 0) ? a / s : 0 }')
    printf '%-11s %4s %7s %8s %8s %9s %11s %8s %9s %7s%s\n' "$name" "$seed" "$reached>$before" "$steps" "${batches:-?}" \
      "${lstats:-?}" "$per" "${cpu:-?}" "$wall" "$ratio" "$([ $rc = 0 ] || echo "  (launcher exit $rc)")"
    echo "$name $seed $reached $steps ${batches:-0} ${lstats:-0} $per ${cpu:-0} $ratio" >>"$ROWS"
    grep -h "adaptive refresh: " "$dir"/logs/ps*.log 2>/dev/null | tail -n 1 | sed 's/.*adaptive refresh: /    ps: /' | cut -c1-400
  done
done
echo
echo "| point | runs | steps to $TARGET | steps run | statsd batches | layer statistics | per step | statsd CPU s | wall / every |"
echo "|---|---|---|---|---|---|---|---|---|"
for pt in $POINTS; do
  name=${pt%%:*}
  awk -v p="$name" '$1 == p { n++; if ($3 != "none") { r++; st += $3 } else miss++; s += $4; b += $5; l += $6; q += $7; c += $8; w += $9 }
    END { if (!n) exit; printf "| %s | %d | %s | %.0f | %.0f | %.0f | %.2f | %.1f | %.2f |\n", p, n,
          r ? sprintf("%.0f%s", st / r, miss ? sprintf(" (%d missed)", miss) : "") : "none", s / n, b / n, l / n, q / n, c / n, w / n }' "$ROWS"
done
