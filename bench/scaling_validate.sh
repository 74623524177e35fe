#!/bin/sh
# bench/scaling_validate.sh — checks the network and PS-load part of the
# scale model (docs/scaling.md) against real runs over a rate-limited link.
# Prints figures; never passes or fails on time.
#
# For each worker count W: kfac-ps runs in one network namespace, W
# kfac-worker in a second one, joined by one veth pair whose two ends are
# each limited by `tc qdisc ... tbf rate RATE burst 32kbit latency 50ms`
# (optionally behind a netem delay): the link stands for the PS's NIC, one
# rate each way, as on a full-duplex Ethernet port. SGD, no curvature
# daemons, [security] insecure = true (the link is private to the two
# namespaces; CURVE would add its encryption to the PS's CPU).
#
#   bench/scaling_validate.sh [--rate 100mbit] [--delay-ms 0] [--workers "1 2 4"]
#                             [--steps 80] [--skip 10] [--batch 64]
#                             [--model models/mnist-mlp.model] [--out DIR]
#                             [--kfac "Z D"]
#
# --kfac "Z D": K-FAC instead of SGD, with Z kfac-statsd and D kfac-invertd
# in the workers' namespace (refresh continuous): their StatsPush, Jobs and
# JobResults cross the same link, which is what the bytes columns show.
#
# BUILD (default build) names the folder of the binaries. Before the runs,
# the link's TCP goodput is measured once with python3 (20 MiB, one way),
# when python3 is there; the prediction uses that goodput.
#
# Per run (means over the steps after --skip, from steps.csv; worker
# compute from the workers' own "... ms each on average" log lines):
#   ms/step    (wall_s of the last row - wall_s of row skip) / steps
#   wait, update, publish   steps.csv's wait_ms, update_ms, publish_ms
#   compute    the workers' mean forward+backward ms per gradient
#   predicted  the synchronous-round model of docs/scaling.md, section 3:
#              compute + W x bytes / goodput (gradients in) + update
#              + publish + W x bytes / goodput (Params out) + one round
#              trip, bytes = 4 x parameters + 64 (the envelope); compute,
#              update and publish as measured in the same run, so what
#              it tests is the network term
#   net-only   the two transfer terms alone
#   overlapped the same with (W + 1) transfers in place of 2 W: the Params
#              reach the workers one after another and each worker's
#              gradient goes up while the next one's Params come down
#              (the link is full duplex); the measurement should lie
#              between the two
#   in, out    MB per step through the PS's end of the link (ip -s link:
#              frames with their headers), received and sent; "pred" the
#              accounting of docs/scaling.md: W messages each way, plus
#              with --kfac one full StatsPush in and one Params out per
#              fold and, per inverse installed, a block's factor out and
#              its inverse in (taken as the mean block: all factors / the
#              number of blocks), over the goodput share 0.954
#   PS CPU     kfac-ps's user + system CPU ms per step, and its user time
#              alone (/proc/PID/stat). Over veth the system time includes
#              the receiving side's network stack for what kfac-ps sends
#              (veth delivers in the sender's context) and the tc shaping
#
# Everything it creates (2 namespaces and the veth pair, which goes with
# them; its processes, ended by PID) is removed on exit, also on failure or
# a signal. Every wait is bounded. Needs root, ip(8) and tc(8); exits 77
# (skipped) where they or network namespaces are missing.
set -u

rate=100mbit
delay_ms=0
workers="1 2 4"
steps=80
skip=10
batch=64
model=models/mnist-mlp.model
out=runs/scaling-validate
kfac=""
BUILD=${BUILD:-build}
while [ $# -gt 0 ]; do
  case $1 in
    --rate) rate=$2; shift 2 ;;
    --delay-ms) delay_ms=$2; shift 2 ;;
    --workers) workers=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --skip) skip=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;;
    --model) model=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --kfac) kfac=$2; shift 2 ;;
    -h|--help) sed -n '2,56p' "$0"; exit 0 ;;
    *) echo "scaling_validate: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done

skip77() { echo "skipped: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip77 "needs root for ip netns and tc"
command -v ip >/dev/null 2>&1 || skip77 "ip(8) is missing (Debian package iproute2)"
command -v tc >/dev/null 2>&1 || skip77 "tc(8) is missing (Debian package iproute2)"
for b in kfac-ps kfac-worker; do
  [ -x "$BUILD/$b" ] || { echo "scaling_validate: missing $BUILD/$b (make BUILD=$BUILD all)" >&2; exit 1; }
done
[ -f "$model" ] || { echo "scaling_validate: no model file $model" >&2; exit 1; }

P="kfsv-$$"
NS_PS=$P-ps
NS_W=$P-w
ns_made=""
pids=""
# stop PID: SIGTERM, up to 5 s, then SIGKILL; only processes this script started
stop_pid() {
  kill -TERM "$1" 2>/dev/null || return 0
  i=0
  while kill -0 "$1" 2>/dev/null && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
  kill -KILL "$1" 2>/dev/null
  wait "$1" 2>/dev/null
}
cleanup() {
  for p in $pids; do stop_pid "$p"; done
  pids=""
  for n in $ns_made; do ip netns del "$n" 2>/dev/null; done
  ns_made=""
}
trap 'cleanup' EXIT
trap 'cleanup; exit 130' INT
trap 'cleanup; exit 143' TERM
trap 'cleanup; exit 129' HUP

for n in $NS_PS $NS_W; do
  out_ip=$(ip netns add "$n" 2>&1) || skip77 "cannot create a network namespace: $out_ip"
  ns_made="$ns_made $n"
  out_ip=$(ip -n "$n" link set lo up 2>&1) || skip77 "cannot configure a network namespace: $out_ip"
done
out_ip=$(ip link add kps netns "$NS_PS" type veth peer name kw netns "$NS_W" 2>&1) ||
  skip77 "cannot create a veth pair: $out_ip"
ip -n "$NS_PS" addr add 10.86.0.1/24 dev kps && ip -n "$NS_PS" link set kps up &&
  ip -n "$NS_W" addr add 10.86.0.2/24 dev kw && ip -n "$NS_W" link set kw up ||
  { echo "scaling_validate: cannot configure the veth pair" >&2; exit 1; }
# one rate each way: the PS's egress (Params) on kps, its ingress (gradients) on kw
for end in "$NS_PS kps" "$NS_W kw"; do
  set -- $end
  if [ "$delay_ms" != 0 ]; then
    ip netns exec "$1" tc qdisc add dev "$2" root handle 1: netem delay "${delay_ms}ms" &&
      ip netns exec "$1" tc qdisc add dev "$2" parent 1:1 handle 10: tbf rate "$rate" burst 32kbit latency 50ms
  else
    ip netns exec "$1" tc qdisc add dev "$2" root tbf rate "$rate" burst 32kbit latency 50ms
  fi || skip77 "tc cannot shape $2 here (tbf/netem missing from the kernel?)"
done

mkdir -p "$out" || exit 1
rtt_ms=$(ip netns exec "$NS_W" ping -c 3 -i 0.2 -W 2 10.86.0.1 2>/dev/null |
  awk -F/ '/^rtt|^round-trip/ { print $5 }')
rtt_said="${rtt_ms:-not measured (no ping(8)); taken as 2 x delay}"
[ -n "$rtt_ms" ] || rtt_ms=$((2 * delay_ms))

# The link's TCP goodput, one way (python3: a throwaway sender and receiver).
goodput_mbit=""
if command -v python3 >/dev/null 2>&1; then
  cat >"$out/goodput.py" <<'EOF'
import socket, sys, time
if sys.argv[1] == "srv":
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("10.86.0.1", 7086)); s.listen(1); s.settimeout(20)
    c, _ = s.accept(); c.settimeout(20); n = 0; t0 = None
    while True:
        b = c.recv(1 << 20)
        if not b: break
        if t0 is None: t0 = time.time()
        n += len(b)
    print("%.2f" % (n * 8 / (time.time() - t0) / 1e6))
else:
    time.sleep(0.5); s = socket.create_connection(("10.86.0.1", 7086), timeout=20)
    s.sendall(b"x" * (20 << 20)); s.close()
EOF
  ip netns exec "$NS_PS" timeout 40 python3 "$out/goodput.py" srv >"$out/goodput.txt" 2>&1 &
  gp=$!
  pids="$pids $gp"
  ip netns exec "$NS_W" timeout 40 python3 "$out/goodput.py" cli >/dev/null 2>&1
  wait "$gp" 2>/dev/null
  pids=""
  goodput_mbit=$(awk 'NR == 1 && $1 + 0 > 0 { print $1 }' "$out/goodput.txt")
fi
nominal_mbit=$(echo "$rate" | awk '/gbit$/ { print $1 * 1000; next } /mbit$/ { print $1 + 0; next } { print "" }')
[ -n "$goodput_mbit" ] || goodput_mbit=$nominal_mbit

echo "machine: $(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo), $(nproc) logical CPUs;" \
  "$(date -u '+%Y-%m-%d %H:%M UTC'); load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "link: tbf rate $rate each way (burst 32kbit, latency 50ms), netem delay ${delay_ms} ms;" \
  "TCP goodput ${goodput_mbit} Mbit/s; ping rtt ${rtt_said} ms; model $model, batch $batch, ${kfac:+K-FAC with kfac-statsd and kfac-invertd }${kfac:-SGD}, $steps steps"

opt_kind=sgd
n_statsd=0
n_invertd=0
if [ -n "$kfac" ]; then
  opt_kind=kfac
  set -- $kfac
  n_statsd=${1:-1}
  n_invertd=${2:-1}
fi
# link_bytes: "RX TX" bytes of the PS's end of the link
link_bytes() {
  ip -n "$NS_PS" -s link show kps 2>/dev/null | awk '/RX:/ { getline; rx = $1 } /TX:/ { getline; tx = $1 } END { print rx + 0, tx + 0 }'
}

rows=""
for W in $workers; do
  run=$out/w$W
  rm -rf "$run"
  mkdir -p "$run" || exit 1
  cat >"$run/run.ini" <<EOF2
[run]
seed = 1
steps = $steps
eval_every = 1000000
eval_n = 100
out_dir = $run/out
[model]
file = $model
[data]
batch = $batch
train_n = 8000
[optimizer]
kind = $opt_kind
[cluster]
workers = $W
statsd = $n_statsd
invertd = $n_invertd
[ps]
bind = tcp://0.0.0.0:5555
progress_every = 20
[security]
insecure = true
EOF2
  ip netns exec "$NS_PS" "$BUILD/kfac-ps" --config "$run/run.ini" --force >"$run/ps.log" 2>&1 &
  ps_pid=$!
  pids="$ps_pid"
  i=0
  until grep -q "listening on" "$run/ps.log" 2>/dev/null; do
    i=$((i + 1))
    [ $i -le 300 ] && kill -0 "$ps_pid" 2>/dev/null || { echo "W=$W: kfac-ps did not start:"; tail -5 "$run/ps.log"; break; }
    sleep 0.1
  done
  w=1
  while [ $w -le "$W" ]; do
    ip netns exec "$NS_W" "$BUILD/kfac-worker" --config "$run/run.ini" --worker.id "$w" \
      --cluster.ps tcp://10.86.0.1:5555 >"$run/worker-$w.log" 2>&1 &
    pids="$pids $!"
    w=$((w + 1))
  done
  k=1
  while [ $k -le "$n_statsd" ]; do
    ip netns exec "$NS_W" "$BUILD/kfac-statsd" --config "$run/run.ini" --statsd.id "$k" \
      --cluster.ps tcp://10.86.0.1:5555 >"$run/statsd-$k.log" 2>&1 &
    pids="$pids $!"
    k=$((k + 1))
  done
  k=1
  while [ $k -le "$n_invertd" ]; do
    ip netns exec "$NS_W" "$BUILD/kfac-invertd" --config "$run/run.ini" --invertd.id "$k" \
      --cluster.ps tcp://10.86.0.1:5555 >"$run/invertd-$k.log" 2>&1 &
    pids="$pids $!"
    k=$((k + 1))
  done
  # bounded: the run's own steps, at most 600 s. kfac-ps's CPU time (user +
  # system, /proc/PID/stat; `ip netns exec` execs, so the PID is kfac-ps's)
  # is read when steps.csv has its row `skip` and at the last sample before
  # it exits.
  i=0
  cpu0=""
  rows0=0
  cpu1=""
  rows1=0
  usr0=0
  usr1=0
  bytes0=""
  bytes1=""
  while kill -0 "$ps_pid" 2>/dev/null && [ $i -lt 6000 ]; do
    c=$(awk '{ print $14 + $15, $14 }' "/proc/$ps_pid/stat" 2>/dev/null)
    u=${c#* }
    c=${c% *}
    r=$(awk 'END { print NR - 1 }' "$run/out/steps.csv" 2>/dev/null)
    if [ -n "$c" ] && [ -n "$r" ]; then
      if [ -z "$cpu0" ] && [ "$r" -ge "$skip" ]; then cpu0=$c; usr0=$u; rows0=$r; bytes0=$(link_bytes); fi
      cpu1=$c
      usr1=$u
      [ -z "$cpu0" ] || bytes1=$(link_bytes)
      rows1=$r
    fi
    sleep 0.1
    i=$((i + 1))
  done
  [ $i -lt 6000 ] || echo "W=$W: kfac-ps still running after 600 s: stopped"
  cleanup_run_pids=$pids
  for p in $cleanup_run_pids; do stop_pid "$p"; done
  pids=""

  params=$(sed -n 's/.*: \([0-9][0-9]*\) parameters[,;].*/\1/p' "$run/ps.log" | head -1)
  # the workers' mean compute per gradient: their last "... ms each on average" line, or the final summary
  compute=$(for f in "$run"/worker-*.log; do
      sed -n 's/.*(\([0-9.][0-9.]*\) ms compute each on average.*/\1/p' "$f" | tail -1
    done | awk '{ s += $1; n++ } END { if (n) printf "%.1f", s / n }')
  csv=$run/out/steps.csv
  if [ ! -s "$csv" ] || [ -z "$params" ]; then
    echo "W=$W: no steps.csv or no parameter count (see $run/ps.log)"
    continue
  fi
  ps_cpu=$(awk -v a="${cpu0:-0}" -v b="${cpu1:-0}" -v r0="$rows0" -v r1="$rows1" -v hz="$(getconf CLK_TCK)" \
    -v ua="$usr0" -v ub="$usr1" 'BEGIN { if (r1 > r0 && b >= a) printf "%.1f (user %.1f)", (b - a) * 1000 / hz / (r1 - r0),
      (ub - ua) * 1000 / hz / (r1 - r0); else print "-" }')
  # every factor's packed bytes and the block count (K-FAC only; the model's blocks in bench/scaling_model.py)
  fact_bytes=0
  nblocks=1
  if [ -n "$kfac" ]; then
    # shellcheck disable=SC2046 # two words, split on purpose
    set -- $(python3 bench/scaling_model.py --factor-bytes "$model" 2>/dev/null) 0 1
    fact_bytes=$1
    nblocks=$2
  fi
  set -- ${bytes0:-0 0} ${bytes1:-0 0}
  row=$(awk -F, -v skip="$skip" -v W="$W" -v P="$params" -v gp="$goodput_mbit" -v rtt="${rtt_ms:-0}" \
    -v comp="${compute:-0}" -v pscpu="$ps_cpu" -v rx0="$1" -v tx0="$2" -v rx1="$3" -v tx1="$4" \
    -v r0="$rows0" -v r1="$rows1" -v F="$fact_bytes" -v nb="${nblocks:-1}" '
    NR == 1 { for (i = 1; i <= NF; i++) h[$i] = i; next }
    { step = $h["step"] }
    step == skip { t0 = $h["wall_s"] }
    step == r0 { f0 = $h["stats_folded"]; i0 = $h["inverses_installed"] }
    step == r1 { f1 = $h["stats_folded"]; i1 = $h["inverses_installed"] }
    step > skip { n++; t1 = $h["wall_s"]; wt += $h["wait_ms"]; up += $h["update_ms"]; pb += $h["publish_ms"] }
    END {
      if (n < 2) { print "too few steps"; exit }
      ms = 1000 * (t1 - t0) / n
      bytes = 4 * P + 64
      one = bytes * 8 / (gp * 1e6) * 1000               # ms, one message
      xfer = W * one                                    # ms, one direction, every worker
      pred = comp + 2 * xfer + up / n + pb / n + rtt
      lo = comp + (W + 1) * one + up / n + pb / n + rtt # Params sent one worker after another
      k = r1 - r0
      if (k > 0 && rx1 > rx0) {
        folds = (f1 - f0) / k; jobs = (i1 - i0) / k
        pin = (W * bytes + folds * F + jobs * F / nb) / 0.954 / 1e6
        pout = (W * bytes + folds * bytes + jobs * F / nb) / 0.954 / 1e6
        io = sprintf("%.2f / %.2f | %.2f / %.2f", (rx1 - rx0) / k / 1e6, (tx1 - tx0) / k / 1e6, pin, pout)
        if (F > 0) io = io sprintf(" | %.2f / %.2f", folds, jobs)
      } else io = "- | -"
      printf "| %d | %d | %.1f | %.1f | %.1f | %.1f | %s | %s | %s | %.1f | **%.1f** | %.1f | %.2f |\n",
        W, n, ms, wt / n, up / n, pb / n, comp, pscpu, io, 2 * xfer, pred, lo, ms / pred
    }' "$csv")
  rows="$rows$row
"
  echo "W=$W done: $row"
done

echo
echo "parameters: ${params:-?} (a message: 4 x P + 64 bytes)"
if [ -n "$kfac" ]; then
  echo "| W | steps | ms/step measured | wait | update | publish | worker compute | PS CPU ms/step | MB/step in / out | predicted in / out | folds / inverses per step | net-only (2 x W x bytes / goodput) | predicted (serial) | predicted (overlapped: (W + 1) transfers) | measured / serial |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
else
  echo "| W | steps | ms/step measured | wait | update | publish | worker compute | PS CPU ms/step | MB/step in / out | predicted in / out | net-only (2 x W x bytes / goodput) | predicted (serial) | predicted (overlapped: (W + 1) transfers) | measured / serial |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
fi
printf "%s" "$rows"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
