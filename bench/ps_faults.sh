#!/bin/sh
# bench/ps_faults.sh — what kfac-ps costs the kernel per step: its minor
# page faults, system and user CPU time per step in steady state, beside
# steps/s, for arms run interleaved (A B A B ...) on the local cluster of a
# run file (deploy/kfac-launch). Fault counts do not depend on how expensive
# a fault is on the machine at hand, so they are the figures to drive down;
# the times and steps/s do. Prints figures; never passes or fails on them.
#
#   bench/ps_faults.sh [--config FILE] [--steps N] [--from S] [--repeats R]
#                      [--out DIR] [--arm 'LABEL|--key value ...'] ... [-- --key value ...]
#
#   --config   run file (default deploy/examples/mnist-cnn-kfac.ini)
#   --steps    steps per run (default 120)
#   --from     first step of the window (default 30: after the warm-up);
#              the window ends 10 steps before the last one, before the
#              final evaluation and the shutdown
#   --repeats  runs per arm (default 2)
#   --out      folder of the runs (default runs/ps-faults)
#   --arm      a label and the launcher options of one arm; repeatable.
#              Options may start with bin=DIR: that arm's daemons come from
#              DIR (KFAC_BIN), e.g. an older build for a before/after table.
#              Default: 'sgd|--optimizer.kind sgd --cluster.statsd 0
#              --cluster.invertd 0' and 'kfac|'.
#   after --   options given to every run (default: --model.file
#              models/mnist-cnn-wide.model, the wide model)
#
# How: the launcher prints kfac-ps's pid; while the run goes on,
# /proc/PID/stat is read (minflt, majflt, utime, stime) when steps.csv
# first shows a step >= --from and again at the end of the window, together
# with the steps done and the PS's wall clock (steps.csv wall_s). Columns:
#   steps/s      steps in the window / wall seconds between the two reads
#   minflt/step  kfac-ps's minor faults per step (all its threads: the loop,
#                the update pool, libzmq's I/O thread, the evaluation)
#   majflt       major faults in the window (should be 0)
#   sys ms/step, user ms/step   kfac-ps's CPU time per step, by kind
#   sys%         system time as a share of kfac-ps's CPU time
# The machine (CPU model, logical CPUs) and the load before and after are
# printed: compare only arms of one call.
set -u

config=deploy/examples/mnist-cnn-kfac.ini
steps=120
from=30
repeats=2
out=runs/ps-faults
arms=""
nl='
'
while [ $# -gt 0 ]; do
  case $1 in
    --config) config=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --from) from=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --arm) arms="$arms$2$nl"; shift 2 ;;
    --) shift; break ;;
    -h | --help) sed -n '2,38p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "ps_faults.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[ $# -gt 0 ] || set -- --model.file models/mnist-cnn-wide.model
[ -n "$arms" ] || arms="sgd|--optimizer.kind sgd --cluster.statsd 0 --cluster.invertd 0${nl}kfac|${nl}"
[ -r "$config" ] || { echo "ps_faults.sh: cannot read the run file $config" >&2; exit 2; }
case $steps$from$repeats in *[!0-9]*) echo "ps_faults.sh: --steps, --from and --repeats take whole numbers" >&2; exit 2 ;; esac
to=$((steps - 10))
[ "$to" -gt "$from" ] || { echo "ps_faults.sh: --steps must exceed --from + 10" >&2; exit 2; }
[ -x build/kfac-ps ] || { echo "ps_faults.sh: build first (make)" >&2; exit 2; }
[ -r /proc/self/stat ] || { echo "ps_faults.sh: no /proc/PID/stat here" >&2; exit 2; }
mkdir -p "$out" || exit 1
hz=$(getconf CLK_TCK 2>/dev/null || echo 100)

model=$(awk -F: '/^model name/ { sub(/^ /, "", $2); print $2; exit }' /proc/cpuinfo)
echo "machine: $model, $(grep -c ^processor /proc/cpuinfo) logical CPUs"
echo "load average before: $(cat /proc/loadavg)"
echo "run file: $config, $steps steps, window steps $from..$to, $repeats repeats; common options: $*"

# "minflt majflt utime stime" of PID (fields 10, 12, 14, 15 of /proc/PID/stat,
# counted after the ')' that closes the command name).
proc_counts() {
  sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null | awk '{ print $8, $10, $12, $13 }'
}
# The last row's "step wall_s" of a steps.csv, or nothing.
last_step() {
  awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) h[$i] = i; next } { s = $h["step"]; w = $h["wall_s"] }
           END { if (s != "") print s, w }' "$1" 2>/dev/null
}

# One run: LABEL REPEAT OPTIONS... ; its line goes to $out/summary.
run_one() {
  label=$1 rep=$2
  shift 2
  dir=$out/$label-$rep
  rm -rf "$dir"
  bin=
  case ${1:-} in bin=*) bin=${1#bin=}; shift ;; esac
  log=$out/$label-$rep.launch.log
  # shellcheck disable=SC2086
  KFAC_BIN=${bin:-${KFAC_BIN:-}} timeout 900 deploy/kfac-launch "$config" --quiet --run.out_dir "$dir" --run.steps "$steps" \
    --run.eval_every "$((steps + 1))" --run.target_acc 0 "$@" >"$log" 2>&1 &
  launcher=$!
  pid="" a="" b=""
  i=0
  while [ $i -lt 6000 ] && kill -0 "$launcher" 2>/dev/null; do # at most about 10 minutes
    [ -n "$pid" ] || pid=$(sed -n 's/.*kfac-ps (pid \([0-9]*\)).*/\1/p' "$log" | tail -n 1)
    st=$(last_step "$dir/steps.csv")
    if [ -n "$pid" ] && [ -n "$st" ]; then
      if [ -z "$a" ] && [ "${st% *}" -ge "$from" ]; then a="$st $(proc_counts "$pid")"; fi
      if [ -n "$a" ] && [ "${st% *}" -ge "$to" ]; then b="$st $(proc_counts "$pid")"; break; fi
    fi
    sleep 0.1
    i=$((i + 1))
  done
  wait "$launcher"
  rc=$?
  if [ -z "$a" ] || [ -z "$b" ] || [ "$(echo "$b" | wc -w)" -ne 6 ] || [ "$(echo "$a" | wc -w)" -ne 6 ]; then
    echo "$label run $rep: no window measured (launcher exit $rc): see $log" >&2
    return
  fi
  [ "$rc" = 0 ] || echo "$label run $rep: the launcher exited $rc (see $log); its window is kept" >&2
  # shellcheck disable=SC2086
  set -- $a $b
  awk -v label="$label" -v rep="$rep" -v hz="$hz" -v s0="$1" -v w0="$2" -v f0="$3" -v m0="$4" -v u0="$5" -v k0="$6" \
    -v s1="$7" -v w1="$8" -v f1="$9" -v m1="${10}" -v u1="${11}" -v k1="${12}" 'BEGIN {
      n = s1 - s0; if (n <= 0 || w1 <= w0) { print label, rep, "empty window" > "/dev/stderr"; exit }
      sys = 1000 * (k1 - k0) / hz / n; usr = 1000 * (u1 - u0) / hz / n
      pct = sys + usr > 0 ? 100 * sys / (sys + usr) : 0
      printf "%s %s %.3f %.0f %d %.2f %.2f %.1f %d\n", label, rep, n / (w1 - w0), (f1 - f0) / n, m1 - m0, sys, usr, pct, n
    }' >>"$out/summary"
}

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
echo
printf '| arm | run | steps/s | minflt/step | majflt | sys ms/step | user ms/step | sys%% | steps in window |\n'
printf '|---|---|---|---|---|---|---|---|---|\n'
awk -v order="$(printf '%s' "$arms" | cut -d'|' -f1 | tr '\n' ' ')" '
  { k = $1; n[k]++; for (i = 3; i <= 9; i++) s[k, i] += $i
    printf "| %s | %s | %.2f | %d | %d | %.1f | %.1f | %.0f | %d |\n", $1, $2, $3, $4, $5, $6, $7, $8, $9 }
  END {
    m = split(order, o, " ")
    for (j = 1; j <= m; j++) {
      k = o[j]; if (!n[k]) continue
      printf "| **%s** | mean of %d | %.2f | %.0f | %d | %.1f | %.1f | %.0f | |\n", k, n[k], s[k, 3] / n[k],
             s[k, 4] / n[k], s[k, 5], s[k, 6] / n[k], s[k, 7] / n[k], s[k, 8] / n[k]
    }
  }' "$out/summary"
