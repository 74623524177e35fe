#!/bin/sh
# tests/integration/85-netns.sh — a host that goes away and comes back.
# kfac-ps runs in its own network namespace; gradient worker 1, gradient
# worker 2 and kfac-invertd each run in another, joined to the PS's by a
# veth pair (10.85.N.1 on the PS side, 10.85.N.2 on the client side). kfac-ps
# binds 0.0.0.0 inside its namespace, so CURVE keys (kfac-keygen) secure it.
# Statistics come from the workers (stats = sync).
#
# Once the run is under way, worker 1's link is taken down (ip link set
# down inside its namespace: its TCP connection stalls, nothing is
# closed) for longer than [ps] worker_timeout_ms = 1500:
#   - kfac-ps drops it from the round ("silent for ...: dropped") and the
#     steps go on with worker 2 alone (workers_present = 1 in steps.csv);
#   - the link comes back up: worker 1 is back in the round and steps
#     average both workers again (workers_present = 2) for 20 more steps;
#   - then kfac-ps is stopped with SIGTERM and every daemon exits 0.
# Passes when, besides, steps.csv lists every step number exactly once, in
# order from 1 (no step lost or doubled by the drop and the rejoin).
# Whether the returning worker gets its old shard back is not checked here.
#
# Everything the test creates (4 namespaces, their veth pairs, which go
# with them) is removed on exit by a trap, also on failure; it kills only
# the processes it started. The namespaces are private, so kfac-ps uses the
# fixed port 5555 inside its own.
# Skipped (77) when not root, without ip(8), or where network namespaces or
# veth pairs cannot be made (a container without CAP_SYS_ADMIN or NET_ADMIN).
. tests/integration/harness.inc
h_init 85-netns
[ "$(id -u)" = 0 ] || h_skip "needs root for ip netns"
command -v ip >/dev/null 2>&1 || h_skip "ip(8) is missing (Debian package iproute2)"
[ -x "$BUILD/kfac-keygen" ] || h_fail "missing $BUILD/kfac-keygen"

P="kfac85-$$"
NSS="$P-ps $P-w1 $P-w2 $P-inv"
ns_made=""
ns_cleanup() {
  for n in $ns_made; do ip netns del "$n" 2>/dev/null; done
  ns_made=""
}
trap 'h_cleanup; ns_cleanup' EXIT
trap 'h_cleanup; ns_cleanup; exit 130' INT
trap 'h_cleanup; ns_cleanup; exit 143' TERM
trap 'h_cleanup; ns_cleanup; exit 129' HUP

for n in $NSS; do
  if ! out=$(ip netns add "$n" 2>&1); then
    h_skip "cannot create a network namespace: $out"
  fi
  ns_made="$ns_made $n"
  # A namespace that cannot even bring its loopback up (a chroot without
  # /sys or /run/netns of its own) cannot host this test: a skip, said so.
  if ! out=$(ip -n "$n" link set lo up 2>&1); then
    h_skip "cannot configure a new network namespace here (ip -n $n link set lo up: $out)"
  fi
done
i=1
for c in w1 w2 inv; do
  if ! out=$(ip link add "to-$c" netns "$P-ps" type veth peer name eth0 netns "$P-$c" 2>&1); then
    h_skip "cannot create a veth pair: $out"
  fi
  ip -n "$P-ps" addr add "10.85.$i.1/24" dev "to-$c" && ip -n "$P-ps" link set "to-$c" up &&
    ip -n "$P-$c" addr add "10.85.$i.2/24" dev eth0 && ip -n "$P-$c" link set eth0 up ||
    h_fail "cannot configure the link to $c"
  i=$((i + 1))
done
if command -v ping >/dev/null 2>&1; then
  ip netns exec "$P-w1" ping -c 1 -W 2 10.85.1.1 >/dev/null 2>&1 ||
    h_fail "worker 1's namespace does not reach the PS's over the veth pair"
fi

K=$H_DIR/keys
mkdir -m 700 "$K" "$K/workers" || h_fail "mkdir"
for k in ps workers/w1 workers/w2 inv; do
  # ps.pub and inv.pub are named below: no host in their names
  "$BUILD/kfac-keygen" --out "$K/$k" --host none >/dev/null 2>"$H_DIR/keygen.log" || h_fail "kfac-keygen: $(cat "$H_DIR/keygen.log")"
done
cat >"$H_DIR/run.ini" <<EOF2
[run]
seed = 2
steps = 100000
eval_every = 100000
eval_n = 200
out_dir = $H_DIR/out
[model]
file = models/mnist-mlp.model
[data]
batch = 32
train_n = 4000
[kfac]
stats = sync
stats_every = 5
[cluster]
workers = 2
statsd = 0
invertd = 1
[ps]
bind = tcp://0.0.0.0:5555
progress_every = 10
heartbeat_ms = 200
worker_timeout_ms = 1500
job_timeout_ms = 3000
[security]
server_public_key = $K/ps.pub
EOF2
h_start ps ip netns exec "$P-ps" "$BUILD/kfac-ps" --config "$H_DIR/run.ini" \
  --security.server_secret_key "$K/ps.secret" --security.allow_workers "$K/workers" \
  --security.allow_invertd "$K/inv.pub"
ps=$H_PID
h_wait_log "$H_DIR/ps.log" "listening on" 30 || h_fail "kfac-ps does not listen"
h_start w1 ip netns exec "$P-w1" "$BUILD/kfac-worker" --config "$H_DIR/run.ini" --worker.id 1 \
  --cluster.ps tcp://10.85.1.1:5555 --security.client_secret_key "$K/workers/w1.secret"
w1=$H_PID
h_start w2 ip netns exec "$P-w2" "$BUILD/kfac-worker" --config "$H_DIR/run.ini" --worker.id 2 \
  --cluster.ps tcp://10.85.2.1:5555 --security.client_secret_key "$K/workers/w2.secret"
w2=$H_PID
h_start inv ip netns exec "$P-inv" "$BUILD/kfac-invertd" --config "$H_DIR/run.ini" --invertd.id 1 \
  --cluster.ps tcp://10.85.3.1:5555 --security.client_secret_key "$K/inv.secret"
inv=$H_PID
h_wait_log "$H_DIR/ps.log" "step +30/" 90 || h_fail "training did not reach step 30"

steps=$H_DIR/out/steps.csv
h_csv_need "$steps" step workers_present
cw=$(h_csv_col "$steps" workers_present) || h_fail "$cw"
last_step() { h_csv_last "$steps" step; }
# wait_steps N SECONDS W: 0 once N more rows with workers_present = W were written
wait_steps() {
  from=$(awk 'END { print NR }' "$steps")
  t=0
  while [ $t -lt $(($2 * 5)) ]; do
    n=$(awk -F, -v c="$cw" -v f="$from" -v w="$3" 'NR > f && $c == w { k++ } END { print k + 0 }' "$steps")
    [ "$n" -ge "$1" ] && return 0
    sleep 0.2
    t=$((t + 1))
  done
  return 1
}

# ---- the outage ----------------------------------------------------------------------
down_at=$(last_step)
ip -n "$P-w1" link set eth0 down || h_fail "cannot take worker 1's link down"
h_wait_log "$H_DIR/ps.log" "\(pid $w1 on [^)]*\) silent for [0-9.]+s: dropped from the round" 20 ||
  h_fail "kfac-ps did not drop worker 1 (pid $w1) within 20 s of its link going down"
# the link stays down past worker_timeout_ms: kfac-ps found worker 1
# silent for that long (above), and 10 steps went by without it since
wait_steps 10 30 1 || h_fail "training did not go on with worker 2 alone (10 steps with workers_present = 1)"
ip -n "$P-w1" link set eth0 up || h_fail "cannot bring worker 1's link back up"
up_at=$(last_step)
h_wait_log "$H_DIR/ps.log" "\(pid $w1 on [^)]*\) (is back|said hello again)" 40 ||
  h_fail "worker 1 (pid $w1) did not come back within 40 s of its link coming up"
wait_steps 20 60 2 || h_fail "after worker 1 came back, steps did not average both workers again (20 steps)"

# ---- the end -----------------------------------------------------------------------------
kill -TERM "$ps"
h_wait "$ps" 30
[ "$H_STATUS" = 0 ] || h_fail "kfac-ps exited with status $H_STATUS after SIGTERM"
for p in "$w1 worker-1" "$w2 worker-2" "$inv invertd"; do
  set -- $p
  h_wait "$1" 30
  [ "$H_STATUS" = 0 ] || h_fail "$2 exited with status $H_STATUS (124: still running 30 s after kfac-ps)"
done
rows=$(awk 'NR > 1' "$steps" | wc -l)
cs=$(h_csv_col "$steps" step) || h_fail "$cs"
bad=$(awk -F, -v c="$cs" 'NR > 1 && $c != NR - 1 { print "row " NR - 1 ": step " $c; exit }' "$steps")
[ -z "$bad" ] || h_fail "steps.csv is not every step once, in order: $bad"
alone=$(awk -F, -v c="$cw" 'NR > 1 && $c == 1 { k++ } END { print k + 0 }' "$steps")
h_pass "worker 1's link down at step $down_at, up at step $up_at; $alone steps with worker 2 alone; worker 1 rejoined; $rows steps, each once and in order"
