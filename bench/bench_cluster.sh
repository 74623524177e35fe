#!/bin/sh
# bench/bench_cluster.sh — where a cluster step's time goes: runs the local
# cluster of a run file (deploy/kfac-launch) once per arm, interleaved
# (A B A B ...), and summarises each run's steps.csv into one table: steps/s,
# the step period split into waiting for gradients, curvature work on the
# PS's loop, update math and publishing, the share of steps during which an
# evaluation ran, and the inverse and statistics ages. Prints figures; never
# passes or fails on time.
#
#   bench/bench_cluster.sh [--config FILE] [--steps N] [--repeats R] [--skip N]
#                          [--out DIR] [--arm 'LABEL|--key value ...'] ... [-- --key value ...]
#
#   --config   run file (default deploy/examples/mnist-cnn-kfac.ini)
#   --steps    steps per run (default 400)
#   --repeats  runs per arm (default 2)
#   --skip     first steps left out of every figure (warm-up; default 20)
#   --out      folder of the runs (default runs/bench-cluster); each run in
#              OUT/LABEL-REPEAT, its daemons' logs in OUT/LABEL-REPEAT/logs
#   --arm      a label and the launcher options of one arm; repeatable.
#              Default: 'sgd|--optimizer.kind sgd' and 'kfac|'. Options
#              may start with bin=DIR: that arm's daemons come from DIR
#              (KFAC_BIN), e.g. an older build for a before/after table
#              (binaries without the step-period columns show "-" there),
#              and env=NAME=VALUE (repeatable): environment of that arm's
#              daemons, e.g. env=KFAC_DENSE_GRADS=1 (docs/protocol.md).
#   --table    no runs: print the table of OUT/summary again (same --arm list)
#   after --   options given to every run (e.g. --model.file models/mnist-cnn-wide.model)
#
# Every run: no periodic evaluation ([run] eval_every = steps + 1, so only
# the final one, after the last step), target_acc 0, kfac-launch --quiet.
# Columns of the table (means over the steps after --skip, then over the
# repeats; one line per run and one per arm):
#   steps/s     (rows - 1) / (wall_s of the last row - wall_s of the first row)
#   ms/step     1000 / steps/s
#   wait        wait_ms: the PS waiting for the round's gradients
#   curv        curv_ms: folds and installs on the PS's loop (part of wait)
#   update      update_ms: averaging and update math on the PS
#   publish     publish_ms: Params to the workers, evaluation queueing
#   eval%       share of steps with eval_busy = 1
#   inv_age     mean of inv_age_mean (versions); stats_age: of stats_age_mean
#   vs first    steps/s of the arm over that of the first arm
# The machine (CPU model, logical CPUs) and the load average before and
# after are printed: on a shared machine, compare only arms of one call.
set -u

config=deploy/examples/mnist-cnn-kfac.ini
steps=400
repeats=2
skip=20
out=runs/bench-cluster
arms=""
table_only=0
nl='
'
while [ $# -gt 0 ]; do
  case $1 in
    --config) config=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    --skip) skip=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --arm) arms="$arms$2$nl"; shift 2 ;;
    --table) table_only=1; shift ;;
    --) shift; break ;;
    -h | --help) sed -n '2,36p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench_cluster.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[ -n "$arms" ] || arms="sgd|--optimizer.kind sgd${nl}kfac|${nl}"
[ -r "$config" ] || { echo "bench_cluster.sh: cannot read the run file $config" >&2; exit 2; }
case $steps$repeats$skip in *[!0-9]*) echo "bench_cluster.sh: --steps, --repeats and --skip take whole numbers" >&2; exit 2 ;; esac
[ "$steps" -gt "$((skip + 1))" ] || { echo "bench_cluster.sh: --steps must exceed --skip + 1" >&2; exit 2; }
[ -x "${KFAC_BIN:-build}/kfac-ps" ] || { echo "bench_cluster.sh: no ${KFAC_BIN:-build}/kfac-ps: build first (make), or set KFAC_BIN" >&2; exit 2; }
mkdir -p "$out" || exit 1

model=$(awk -F: '/^model name/ { sub(/^ /, "", $2); print $2; exit }' /proc/cpuinfo)
echo "machine: $model, $(grep -c ^processor /proc/cpuinfo) logical CPUs"
echo "load average before: $(cat /proc/loadavg)"
echo "run file: $config, $steps steps, $repeats repeats, first $skip steps skipped; common options: $*"

# One run: LABEL REPEAT OPTIONS... ; the summary line goes to $out/summary.
run_one() {
  label=$1 rep=$2
  shift 2
  dir=$out/$label-$rep
  rm -rf "$dir"
  bin= envs=
  while :; do
    case ${1:-} in
      bin=*) bin=${1#bin=}; shift ;;
      env=*) envs="$envs ${1#env=}"; shift ;;
      *) break ;;
    esac
  done
  t0=$(date +%s)
  # shellcheck disable=SC2086
  env $envs KFAC_BIN=${bin:-${KFAC_BIN:-}} timeout 900 deploy/kfac-launch "$config" --quiet --run.out_dir "$dir" --run.steps "$steps" \
    --run.eval_every "$((steps + 1))" --run.target_acc 0 "$@" >"$out/$label-$rep.launch.log" 2>&1
  rc=$?
  if [ $rc -ne 0 ] || [ ! -r "$dir/steps.csv" ]; then
    echo "$label run $rep failed (exit $rc): see $out/$label-$rep.launch.log" >&2
    return
  fi
  awk -F, -v label="$label" -v rep="$rep" -v skip="$skip" -v secs="$(($(date +%s) - t0))" '
    NR == 1 { for (i = 1; i <= NF; i++) h[$i] = i; split("wait_ms curv_ms update_ms publish_ms eval_busy", bk, " ")
              has = 1; for (k in bk) if (!(bk[k] in h)) has = 0; next }
    $h["step"] <= skip { next }
    {
      n++; if (n == 1) w0 = $h["wall_s"]; w1 = $h["wall_s"]
      if (has) { wait += $h["wait_ms"]; curv += $h["curv_ms"]; upd += $h["update_ms"]; pub += $h["publish_ms"]; ev += $h["eval_busy"] }
      ia += $h["inv_age_mean"]; sa += $h["stats_age_mean"]
    }
    END {
      if (n < 2 || w1 <= w0) { print label, rep, "too few rows" > "/dev/stderr"; exit }
      sps = (n - 1) / (w1 - w0)
      if (has) b = sprintf("%.2f %.2f %.2f %.2f %.1f", wait / n, curv / n, upd / n, pub / n, 100 * ev / n)
      else b = "- - - - -"
      printf "%s %s %.3f %.2f %s %.2f %.2f %d\n", label, rep, sps, 1000 / sps, b, ia / n, sa / n, secs
    }' "$dir/steps.csv" >>"$out/summary"
}

if [ "$table_only" = 1 ]; then
  [ -r "$out/summary" ] || { echo "bench_cluster.sh: no $out/summary" >&2; exit 2; }
else
: >"$out/summary"
r=1
while [ $r -le "$repeats" ]; do
  printf '%s' "$arms" | while IFS='|' read -r label opts; do
    [ -n "$label" ] || continue
    echo "run: $label repeat $r ($opts) $(date -u +%H:%M:%S)"
    # shellcheck disable=SC2086
    run_one "$label" "$r" $opts "$@"
  done
  r=$((r + 1))
done
echo "load average after: $(cat /proc/loadavg)"
fi
echo
printf '| arm | run | steps/s | ms/step | wait | curv | update | publish | eval%% | inv_age | stats_age | vs first |\n'
printf '|---|---|---|---|---|---|---|---|---|---|---|---|\n'
awk -v order="$(printf '%s' "$arms" | cut -d'|' -f1 | tr '\n' ' ')" '
  function f(v, fmt) { return v == "-" ? "-" : sprintf(fmt, v) }
  { k = $1; n[k]++; for (i = 3; i <= 11; i++) { s[k, i] += $i; if ($i == "-") dash[k, i] = 1 }
    printf "| %s | %s | %.2f | %.1f | %s | %s | %s | %s | %s | %.2f | %.2f | |\n", $1, $2, $3, $4, f($5, "%.1f"),
           f($6, "%.1f"), f($7, "%.1f"), f($8, "%.1f"), f($9, "%.0f"), $10, $11 }
  END {
    m = split(order, o, " ")
    for (j = 1; j <= m; j++) {
      k = o[j]; if (!n[k]) continue
      sps = s[k, 3] / n[k]; if (!first) first = sps
      for (i = 5; i <= 9; i++) cm[i] = dash[k, i] ? "-" : sprintf(i == 9 ? "%.0f" : "%.1f", s[k, i] / n[k])
      printf "| **%s** | mean of %d | %.2f | %.1f | %s | %s | %s | %s | %s | %.2f | %.2f | %.2fx |\n", k, n[k],
             sps, s[k, 4] / n[k], cm[5], cm[6], cm[7], cm[8], cm[9], s[k, 10] / n[k], s[k, 11] / n[k], sps / first
    }
  }' "$out/summary"
