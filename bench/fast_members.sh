#!/bin/sh
# bench/fast_members.sh — what a cluster step costs when the workers cost
# nothing: kfac-ps with 1, 2 and 4 fast members (kfac-poke --member_kind
# fast-worker: each Params answered at once with a stored gradient,
# tools/poke/fast.c), beside a real kfac-statsd and kfac-invertd for
# K-FAC, on the demo model and the wide model. The steps are then kfac-ps's
# and the transport's own cost (docs/protocol.md), as with GPU workers.
# Prints figures; never passes or fails on time.
#
#   sh bench/fast_members.sh [--models "demo wide"] [--members "1 2 4"] [--out DIR]
#                            [--demo-steps W,K] [--wide-steps W,K] [--arm-timeout S]
#                            [--transport tcp|ipc]
#
#   demo   deploy/examples/mnist-cnn-kfac.ini (models/mnist-cnn.model)
#   wide   experiments/mnist-cnn.ini with experiments/mnist-cnn-wide-auto.model
#          (fc 3136 -> 1024), the network of study 7: K-FAC with the wide
#          layer doubly-factored (model.doubly_min_in = 1000), SGD at lr 0.05
#   --demo-steps, --wide-steps  W,K: the first W steps of every arm are
#          a warm-up, the next K are measured (defaults 50,1000 and 20,100);
#          a K-FAC arm's warm-up lasts at least until as many inverses were
#          installed as the model has blocks to invert
#   --out  folder of the runs' files (default: a temporary one, removed)
#   --transport  how the members reach kfac-ps: tcp (tcp://127.0.0.1:PORT,
#          the default) or ipc (ipc://OUT/ps-N.sock, a Unix socket)
#   --arm-timeout  seconds an arm may run in all (default 120); an arm
#          that does not reach W + K steps is measured over what it did
#
# Every configuration (model, members) runs two arms: SGD ([cluster]
# statsd = invertd = 0) and K-FAC (the run file's 1 kfac-statsd and 2
# kfac-invertd, at nice 10 as deploy/kfac-launch starts them). kfac-ps is
# started for more steps than are measured and stopped with SIGTERM once
# W + K are written. Figures, all from the measured steps:
#   steps/s       K / (wall_s of step S + K - wall_s of step S), steps.csv, S
#                 the step at which the warm-up ended
#   wait, curvature, update, publish  means of wait_ms, curv_ms, update_ms
#                 and publish_ms (steps.csv; bench/bench_cluster.sh says what each is)
#   kfac-ps CPU   utime + stime of kfac-ps (/proc/PID/stat, every thread of
#                 it, nothing of the members) per step, between the first
#                 poll (every 0.1 s) at or past step W and the first past W + K
#   mb_per_step   computed, not counted (kfac-ps has no byte counter): n_params
#                 x 4 bytes x members x 2 (a Params sent and a GradPush
#                 received per member); 1 MB = 1e6 bytes. Statistics pushes,
#                 jobs and inverses of the K-FAC arm come on top
#   memcpy_ms     build/bench/bench_memcpy: those bytes copied by memcpy in one
#                 process (median of 20)
#   gloo_ms       bench/gloo_allreduce.py: torch.distributed's gloo all-reduce
#                 of n_params floats between `members` processes (median of
#                 20); "-" when /usr/bin/python3 has no torch
#                 (apt-get install python3-torch)
# Each configuration ends with one line a script reads:
#   fast-members model=demo members=2 sgd_steps_s=... kfac_steps_s=... ratio=... mb_per_step=... memcpy_ms=... gloo_ms=...
# and a line before it with kfac-ps's CPU time per step and the goals of
# the fast-member benchmark (K-FAC/SGD >= 0.9x; SGD's step no slower than
# gloo + kfac-ps's update; kfac-ps CPU per SGD step <= 4 x memcpy_ms).
# Stops only the processes it started (by PID), on any exit.
set -u

models="demo wide"
members_list="1 2 4"
out=""
demo_steps=50,1000
wide_steps=20,100
arm_timeout=120
transport=tcp
while [ $# -gt 0 ]; do
  case $1 in
    --models) models=$2; shift 2 ;;
    --members) members_list=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --demo-steps) demo_steps=$2; shift 2 ;;
    --wide-steps) wide_steps=$2; shift 2 ;;
    --arm-timeout) arm_timeout=$2; shift 2 ;;
    --transport) transport=$2; shift 2 ;;
    -h | --help) sed -n '2,55p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "fast_members.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
for v in "$demo_steps" "$wide_steps"; do
  case $v in [0-9]*,[0-9]*) ;; *) echo "fast_members.sh: steps are W,K (whole numbers)" >&2; exit 2 ;; esac
done
case $transport in tcp | ipc) ;; *) echo "fast_members.sh: --transport is tcp or ipc, not '$transport'" >&2; exit 2 ;; esac
case $arm_timeout$members_list in *[!0-9\ ]*) echo "fast_members.sh: --members and --arm-timeout take whole numbers" >&2; exit 2 ;; esac
BIN=${KFAC_BIN:-build}
for b in kfac-ps kfac-statsd kfac-invertd kfac-poke bench/bench_memcpy; do
  [ -x "$BIN/$b" ] || { echo "fast_members.sh: no $BIN/$b: build first (make build-bench), or set KFAC_BIN" >&2; exit 2; }
done
[ -r data/mnist/train-images-idx3-ubyte ] || [ -r data/mnist/train-images-idx3-ubyte.gz ] ||
  { echo "fast_members.sh: MNIST is missing under data/ (make data)" >&2; exit 2; }
keep=1
if [ -z "$out" ]; then
  out=$(mktemp -d "${TMPDIR:-/tmp}/fast-members.XXXXXX") || exit 1
  keep=0
fi
mkdir -p "$out" || exit 1

PIDS=""
cleanup() {
  for p in $PIDS; do kill -TERM "$p" 2>/dev/null; done
  t=0
  while [ $t -lt 50 ]; do
    left=""
    for p in $PIDS; do kill -0 "$p" 2>/dev/null && left="$left $p"; done
    [ -z "$left" ] && break
    sleep 0.2
    t=$((t + 1))
  done
  for p in $PIDS; do kill -KILL "$p" 2>/dev/null; done
  PIDS=""
}
on_exit() {
  cleanup
  [ "$keep" = 0 ] && rm -rf "$out"
}
trap on_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

# start NAME CMD...: CMD in the background, its output in $out/NAME.log; sets PID.
start() {
  n=$1
  shift
  "$@" >"$out/$n.log" 2>&1 &
  PID=$!
  PIDS="$PIDS $PID"
}

free_port() {
  i=0
  while [ $i -lt 200 ]; do
    r=$(od -An -N2 -tu2 /dev/urandom | tr -d ' ')
    p=$((20000 + r % 12000))
    hex=$(printf '%04X' "$p")
    if ! awk -v h="$hex" 'FNR > 1 { n = split($2, a, ":"); if (a[n] == h) f = 1 } END { exit !f }' \
      /proc/net/tcp /proc/net/tcp6 2>/dev/null; then
      echo "$p"
      return 0
    fi
    i=$((i + 1))
  done
  return 1
}

rows() { awk 'NR > 1' "$1" 2>/dev/null | wc -l; }
ticks() { sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null | awk '{ print $12 + $13 }'; } # utime + stime (fields 14, 15)
hz=$(getconf CLK_TCK)

# run_arm MODEL MEMBERS OPT: one cluster; sets SPS, UPD, WAIT, CURV, PUB,
# CPU (ms per step), INVS, FOLDS (inverses installed and statistics folded
# in the measured steps), AGE (mean inverse age), MEAS (the steps), NPAR, NOTE.
run_arm() {
  model=$1 m=$2 opt=$3
  SPS=0 UPD=0 WAIT=0 CURV=0 PUB=0 CPU=0 INVS=0 FOLDS=0 AGE=0 MEAS="" NOTE=""
  case $model in
    demo) cfg=deploy/examples/mnist-cnn-kfac.ini wk=$demo_steps extra="" ;;
    wide) cfg=experiments/mnist-cnn.ini wk=$wide_steps extra="--model.file experiments/mnist-cnn-wide-auto.model" ;;
  esac
  w=${wk%,*} k=${wk#*,}
  case $opt in
    sgd) extra="$extra --optimizer.kind sgd --cluster.statsd 0 --cluster.invertd 0"
         [ "$model" = wide ] && extra="$extra --optimizer.lr 0.05" ;;
    kfac) [ "$model" = wide ] && extra="$extra --model.doubly_min_in 1000" ;;
  esac
  dir=$out/$model-$m-$opt
  rm -rf "$dir"
  if [ "$transport" = ipc ]; then
    ep=ipc://$out/ps-$model-$m-$opt.sock
  else
    port=$(free_port) || { NOTE="no free port"; return; }
    ep=tcp://127.0.0.1:$port
  fi
  total=$((w + k + 100000))
  # shellcheck disable=SC2086
  start "$model-$m-$opt-ps" "$BIN/kfac-ps" --config "$cfg" $extra --run.out_dir "$dir" --run.steps "$total" \
    --run.eval_every "$((total + 1))" --run.target_acc 0 --cluster.workers "$m" --cluster.ps "$ep" --ps.bind "$ep" \
    --ps.progress_every 100000 --ps.heldout_n 0
  ps=$PID
  pslog=$out/$model-$m-$opt-ps.log
  t=0
  until grep -q "listening on" "$pslog" 2>/dev/null; do
    t=$((t + 1))
    if [ $t -gt 300 ] || ! kill -0 "$ps" 2>/dev/null; then
      NOTE="kfac-ps did not start (see $pslog)"
      tail -n 5 "$pslog" >&2
      cleanup
      return
    fi
    sleep 0.1
  done
  if [ "$opt" = kfac ]; then
    start "$model-$m-statsd-1" nice -n 10 "$BIN/kfac-statsd" --config "$cfg" --cluster.ps "$ep" --statsd.id 1
    for i in 1 2; do
      start "$model-$m-invertd-$i" nice -n 10 "$BIN/kfac-invertd" --config "$cfg" --cluster.ps "$ep" --invertd.id "$i"
    done
  fi
  i=1
  members=""
  while [ $i -le "$m" ]; do
    start "$model-$m-$opt-fast-$i" "$BIN/kfac-poke" --endpoint "$ep" --member_id "$i" --member_kind fast-worker \
      --seed "$i" --count 1000000 --wait_ms 60000
    members="$members $PID"
    i=$((i + 1))
  done
  csv=$dir/steps.csv
  # K-FAC: the warm-up lasts until as many inverses were installed as the
  # model has blocks (kfac-ps's log: "N blocks to invert"), so that the
  # measured steps are preconditioned ones.
  nb=0
  [ "$opt" = kfac ] && nb=$(sed -n 's/.* \([0-9]*\) blocks to invert.*/\1/p' "$pslog" | head -n 1)
  t0=$(date +%s)
  r0="" c0="" r1="" c1=""
  while :; do
    n=$(rows "$csv")
    c=$(ticks "$ps")
    inv=$(tail -n 1 "$csv" 2>/dev/null | awk -F, -v c="$(awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "inverses_installed") print i; exit }' "$csv" 2>/dev/null)" 'c { print $c + 0 }')
    [ -n "$c" ] || { NOTE="kfac-ps exited after $n steps (see $pslog)"; break; }
    for p in $members; do
      kill -0 "$p" 2>/dev/null || { NOTE="a fast member exited: $(tail -n 1 "$out/$model-$m-$opt-fast-1.log")"; break 2; }
    done
    if [ -z "$r0" ]; then
      [ "$n" -ge "$w" ] && [ "${inv:-0}" -ge "${nb:-0}" ] && r0=$n c0=$c
    elif [ "$n" -ge $((r0 + k)) ]; then # the CPU window: at least one poll after r0
      r1=$n c1=$c
      break
    fi
    if [ $(($(date +%s) - t0)) -ge "$arm_timeout" ]; then
      NOTE="only $n steps in ${arm_timeout} s${r0:+, measured from step $r0}"
      [ -z "$r0" ] && [ "$n" -ge "$w" ] && NOTE="$NOTE, $inv of $nb inverses installed: not measured"
      [ -n "$r0" ] && [ "$n" -gt "$r0" ] && r1=$n c1=$c
      break
    fi
    sleep 0.1
  done
  NPAR=$(sed -n 's/.*, \([0-9]*\) parameters, batch.*/\1/p' "$out/$model-$m-$opt-fast-1.log" | head -n 1)
  cleanup
  if [ -z "$r0" ] || [ -z "$r1" ]; then
    NOTE="${NOTE:-too few steps}"
    return
  fi
  CPU=$(awk -v a="$c0" -v b="$c1" -v ra="$r0" -v rb="$r1" -v hz="$hz" 'BEGIN { printf "%.3f", (b - a) * 1000 / hz / (rb - ra) }')
  # shellcheck disable=SC2046 # five numbers, split on purpose
  set -- $(awk -F, -v lo="$r0" -v hi="$((r1 < r0 + k ? r1 : r0 + k))" '
    NR == 1 { for (i = 1; i <= NF; i++) h[$i] = i; next }
    $h["step"] == lo { w0 = $h["wall_s"] }
    $h["step"] == lo { i0 = $h["inverses_installed"]; s0 = $h["stats_folded"] }
    $h["step"] > lo && $h["step"] <= hi { n++; w1 = $h["wall_s"]; u += $h["update_ms"]; q += $h["wait_ms"]
                                          cv += $h["curv_ms"]; pb += $h["publish_ms"]; ag += $h["inv_age_mean"]
                                          i1 = $h["inverses_installed"]; s1 = $h["stats_folded"] }
    END { if (n < 1 || w1 <= w0) print 0, 0, 0, 0, 0, 0, 0, 0
          else printf "%.3f %.3f %.3f %.3f %.3f %d %d %.1f\n", n / (w1 - w0), u / n, q / n, cv / n, pb / n,
                      i1 - i0, s1 - s0, ag / n }' "$csv")
  SPS=$1 UPD=$2 WAIT=$3 CURV=$4 PUB=$5 INVS=$6 FOLDS=$7 AGE=$8
  MEAS="steps $r0-$((r1 < r0 + k ? r1 : r0 + k))"
}

echo "machine: $(awk -F: '/^model name/ { sub(/^ /, "", $2); print $2; exit }' /proc/cpuinfo), $(grep -c ^processor /proc/cpuinfo) logical CPUs"
echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD -- 2>/dev/null || echo ' (with local changes)')"
echo "load before: $(uptime)"
echo "steps per arm: demo $demo_steps, wide $wide_steps (warm-up,measured); members: $members_list; transport $transport"
have_torch=1
if ! /usr/bin/python3 -c 'import torch.distributed as d; assert d.is_available() and d.is_gloo_available()' 2>/dev/null; then
  have_torch=0
  echo "gloo: skipped: /usr/bin/python3 has no torch with gloo (Debian: apt-get install python3-torch)"
fi
summary=$out/summary
: >"$summary"
for model in $models; do
  case $model in demo | wide) ;; *) echo "fast_members.sh: unknown model '$model' (demo, wide)" >&2; exit 2 ;; esac
  for m in $members_list; do
    echo
    echo "== $model, $m fast member(s) $(date -u +%H:%M:%S)"
    run_arm "$model" "$m" sgd
    s_sps=$SPS s_upd=$UPD s_cpu=$CPU npar=${NPAR:-0}
    echo "  sgd:  $SPS steps/s ($MEAS); a step: wait $WAIT (curvature $CURV), update $UPD, publish $PUB ms; kfac-ps CPU $CPU ms/step${NOTE:+ ($NOTE)}"
    run_arm "$model" "$m" kfac
    k_sps=$SPS k_cpu=$CPU
    [ "$npar" -gt 0 ] 2>/dev/null || npar=${NPAR:-0}
    echo "  kfac: $SPS steps/s ($MEAS); a step: wait $WAIT (curvature $CURV), update $UPD, publish $PUB ms; kfac-ps CPU $CPU ms/step; $INVS inverses installed, $FOLDS statistics folded, inverse age $AGE${NOTE:+ ($NOTE)}"
    bytes=$((npar * 4 * m * 2))
    mc=$("$BIN/bench/bench_memcpy" --bytes "$bytes" --reps 20 | sed -n 's/^memcpy .*median_ms=\([0-9.]*\).*/\1/p')
    gl=-
    if [ "$have_torch" = 1 ]; then
      gl=$(timeout 300 /usr/bin/python3 bench/gloo_allreduce.py --floats "$npar" --procs "$m" --reps 20 2>"$out/gloo.err" |
        sed -n 's/^gloo .*median_ms=\([0-9.]*\).*/\1/p')
      [ -n "$gl" ] || { gl=-; echo "  gloo failed: $(tail -n 1 "$out/gloo.err")"; }
    fi
    awk -v model="$model" -v m="$m" -v s="$s_sps" -v k="$k_sps" -v np="$npar" -v b="$bytes" -v mc="${mc:-0}" \
      -v gl="$gl" -v upd="$s_upd" -v cpu="$s_cpu" -v kcpu="$k_cpu" '
      function yn(c) { return c ? "met" : "not met" }
      BEGIN {
        r = s > 0 ? k / s : 0; ms = s > 0 ? 1000 / s : 0
        printf "  %d parameters; %.3f MB a step (computed: %d x 4 B x %d member(s) x 2); memcpy of them %.3f ms\n", np, b / 1e6, np, m, mc
        g = (gl == "-") ? "gloo skipped" : sprintf("SGD step %.2f ms against gloo %.3f + update %.3f = %.2f ms (%s)", ms, gl, upd, gl + upd, yn(ms <= gl + upd))
        printf "  goals: kfac/sgd %.3fx (>= 0.9x: %s); %s; kfac-ps CPU %.3f ms per SGD step = %.1fx memcpy (<= 4x: %s); kfac-ps CPU per K-FAC step %.3f ms\n",
               r, yn(r >= 0.9), g, cpu, (mc > 0 ? cpu / mc : 0), yn(mc > 0 && cpu > 0 && cpu <= 4 * mc), kcpu
        line = sprintf("fast-members model=%s members=%d sgd_steps_s=%.2f kfac_steps_s=%.2f ratio=%.3f mb_per_step=%.3f memcpy_ms=%.3f gloo_ms=%s",
                       model, m, s, k, r, b / 1e6, mc, gl == "-" ? "-" : sprintf("%.3f", gl))
        print line
        printf "%s %s %s %s %s %s\n", line, cpu, upd, ms, kcpu, np > "/dev/stderr"
      }' 2>>"$summary"
  done
done
echo
echo "load after: $(uptime)"
echo
echo "| model | members | SGD steps/s | K-FAC steps/s | ratio | MB/step | memcpy ms | gloo ms | SGD ms/step | SGD update ms | kfac-ps CPU ms/SGD step | CPU / memcpy | kfac-ps CPU ms/K-FAC step |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
awk '{ for (i = 2; i <= 9; i++) { split($i, kv, "="); v[i] = kv[2] }
       printf "| %s | %s | %s | %s | %s | %s | %s | %s | %.2f | %.3f | %.3f | %.1fx | %.3f |\n", v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9],
              $12, $11, $10, (v[8] > 0 ? $10 / v[8] : 0), $13 }' "$summary"
