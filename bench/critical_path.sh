#!/bin/sh
# bench/critical_path.sh — every figure of the critical-path table in
# bench/RESULTS.md from one call on one machine, so that the ratios share
# its load: prints figures, never passes or fails on time.
#
#   bench/critical_path.sh --before DIR [--sgd-lr LR] [--seeds "1 2 3"]
#                          [--out DIR] [--quick]
#
#   --before  folder of an older build's daemons (kfac-ps, kfac-worker,
#             kfac-statsd, kfac-invertd): the "before" arm of the
#             breakdown tables (required)
#   --sgd-lr  SGD's rate in part 3: the best point of the tuned SGD grid of
#             experiments/wide-kfac-vs-sgd.sweep (default 0.02)
#   --seeds   seeds of part 3 (default 1)
#   --out     folder of everything (default runs/critical-path)
#   --quick   a few steps everywhere: checks that the script runs, not a
#             measurement
#
# Parts (each prints its table):
#  1. Breakdown, demo model (deploy/examples/mnist-cnn-kfac.ini): bench/
#     bench_cluster.sh with arms sgd-before and kfac-before (--before's
#     daemons), sgd, kfac (this build: the update split over every core)
#     and kfac-1thread ([ps] update_threads = 1), 250 steps, 2 repeats,
#     interleaved.
#  2. The same on models/mnist-cnn-wide.model (fc 3136 -> 1024,
#     doubly-factored), 150 steps.
#  3. Wall time to 99.0% test accuracy (whole test set, current or Polyak
#     parameters, evaluated every 50 steps) on the wide model: K-FAC against
#     SGD at --sgd-lr, per seed, interleaved; wall seconds of the evaluated
#     step, from eval.csv (the PS's clock: evaluations run beside training
#     on their own threads at nice 10, so they are not left out).
#  4. The update's flops and GFLOP/s against sgemm (build/bench/bench_update),
#     doubly-factored and standard factors, 1 thread and every core.
#  5. Forward+backward images/s against PyTorch (bench/bench_framework.sh;
#     skipped when /usr/bin/python3 has no torch).
set -u
before=
sgd_lr=0.02
seeds=1
out=runs/critical-path
quick=0
while [ $# -gt 0 ]; do
  case $1 in
    --before) before=$2; shift 2 ;;
    --sgd-lr) sgd_lr=$2; shift 2 ;;
    --seeds) seeds=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --quick) quick=1; shift ;;
    -h | --help) sed -n '2,36p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "critical_path.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[ -n "$before" ] || { echo "critical_path.sh: --before DIR is required (an older build's daemons)" >&2; exit 2; }
for r in ps worker statsd invertd; do
  [ -x "$before/kfac-$r" ] || { echo "critical_path.sh: no $before/kfac-$r" >&2; exit 2; }
done
[ -x build/kfac-ps ] && [ -x build/bench/bench_update ] ||
  { echo "critical_path.sh: build first: make && make build-bench" >&2; exit 2; }
mkdir -p "$out" || exit 1

s_demo=250 s_wide=150 max_kfac=800 max_sgd=1500 reps=2
[ "$quick" = 1 ] && { s_demo=25 s_wide=25 max_kfac=10 max_sgd=10 reps=1; }
echo "critical path, $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"

echo
echo "## 1. Breakdown, demo model"
sh bench/bench_cluster.sh --steps "$s_demo" --repeats "$reps" --out "$out/demo" \
  --arm "sgd-before|bin=$before --optimizer.kind sgd" --arm "kfac-before|bin=$before" \
  --arm 'sgd|--optimizer.kind sgd' --arm 'kfac|' --arm 'kfac-1thread|--ps.update_threads 1'

echo
echo "## 2. Breakdown, wide model"
sh bench/bench_cluster.sh --steps "$s_wide" --repeats "$reps" --out "$out/wide" \
  --arm "sgd-before|bin=$before --optimizer.kind sgd" --arm "kfac-before|bin=$before" \
  --arm 'sgd|--optimizer.kind sgd' --arm 'kfac|' --arm 'kfac-1thread|--ps.update_threads 1' \
  -- --model.file models/mnist-cnn-wide.model

echo
echo "## 3. Wall time to 99.0%, wide model (K-FAC vs SGD at lr $sgd_lr)"
echo "load average before: $(cat /proc/loadavg)"
: >"$out/target.txt"
for seed in $seeds; do
  for arm in kfac sgd; do
    d=$out/target/$arm-$seed
    rm -rf "$d"
    if [ "$arm" = kfac ]; then
      set -- --run.steps "$max_kfac"
    else
      set -- --run.steps "$max_sgd" --optimizer.kind sgd --optimizer.lr "$sgd_lr" --cluster.statsd 0 --cluster.invertd 0
    fi
    timeout 1200 deploy/kfac-launch deploy/examples/mnist-cnn-kfac.ini --quiet --model.file models/mnist-cnn-wide.model \
      --run.seed "$seed" --run.out_dir "$d" --run.target_acc 0.99 --run.eval_every 50 --run.eval_n 0 "$@" \
      >"$out/target-$arm-$seed.log" 2>&1 || echo "$arm seed $seed: the launcher failed (see $out/target-$arm-$seed.log)"
    awk -F, -v arm="$arm" -v seed="$seed" '
      NR == 1 { for (i = 1; i <= NF; i++) h[$i] = i; next }
      !hit && ($h["test_acc"] >= 0.99 || $h["polyak_acc"] >= 0.99) { hit = 1; st = $h["step"]; w = $h["wall_s"] }
      { last = $h["step"] }
      END { if (hit) printf "%s %s %d %.1f\n", arm, seed, st, w; else printf "%s %s - - (not reached by step %s)\n", arm, seed, last }
    ' "$d/eval.csv" 2>/dev/null | tee -a "$out/target.txt"
    sps=$(awk -F, 'NR > 21 { n++; if (n == 1) w0 = $2; w1 = $2 } END { if (n > 1 && w1 > w0) printf "%.2f", (n - 1) / (w1 - w0) }' "$d/steps.csv" 2>/dev/null)
    echo "$arm $seed steps/s $sps" >>"$out/target.txt"
  done
done
echo "load average after: $(cat /proc/loadavg)"
awk '
  NF == 4 && $3 != "-" && $3 != "steps/s" { n[$1]++; st[$1] += $3; w[$1] += $4 }
  $3 == "steps/s" { ns[$1]++; s[$1] += $4 }
  END {
    printf "| arm | seeds reached | steps to 99%% (mean) | wall s to 99%% (mean) | steps/s |\n|---|---|---|---|---|\n"
    for (a in ns) printf "| %s | %d of %d | %s | %s | %.2f |\n", a, n[a], ns[a], n[a] ? sprintf("%.0f", st[a] / n[a]) : "-",
                          n[a] ? sprintf("%.1f", w[a] / n[a]) : "-", s[a] / ns[a]
    if (n["kfac"] && n["sgd"])
      printf "\nK-FAC / SGD: %.2fx the steps, %.2fx the wall time\n", (st["kfac"] / n["kfac"]) / (st["sgd"] / n["sgd"]),
             (w["kfac"] / n["kfac"]) / (w["sgd"] / n["sgd"])
  }' "$out/target.txt"

echo
echo "## 4. The update's flop rate"
r4=20
[ "$quick" = 1 ] && r4=2
build/bench/bench_update --reps "$r4"
build/bench/bench_update --reps "$r4" --model experiments/mnist-cnn-wide-auto.model --doubly-min-in 1e30

echo
echo "## 5. Forward+backward against PyTorch"
r5=2
[ "$quick" = 1 ] && r5=1
sh bench/bench_framework.sh --repeats "$r5"
rc=$?
[ $rc = 77 ] && echo "(skipped: no torch)"
exit 0
