#!/bin/sh
# tests/integration/25-curve-members.sh — one member per CURVE key
# (docs/security.md, "Members and keys"). kfac-ps with CURVE and three
# listed worker keys; worker-1 (key 1, id 1) and worker-2 (key 2, id 2)
# train the MNIST MLP while
#   1. a second client with worker-1's key (kfac-poke, id 5) says Hello:
#      refused, the key already holds a member ([security] members_per_key
#      = 1 by default);
#   2. worker-2 is stopped (SIGSTOP) until it has been silent for more than
#      3 heartbeats, the window after which a Hello with its id would take
#      its record over, and a client with the listed key 3 says Hello with
#      id 2: refused, id 2 belongs to key 2; worker-2 goes on (SIGCONT);
#   3. key 3 with a free id (3) is welcomed (the key itself is fine);
#   4. a second kfac-ps with [security] members_per_key = 2 welcomes two
#      clients of one key and refuses a third.
# Passes when both refusals come back to the client with their reason,
# kfac-ps logs them with the count of Hellos refused for their key, its
# done line counts them among the rejected Hellos, worker-2 keeps shard 1
# (no "rejoins" line), and the run finishes all steps with exit 0.
# Skipped (77) when libzmq has no CURVE.
. tests/integration/harness.inc
h_init 25-curve-members
STEPS=400
h_curve_cluster "$STEPS" 100
h_wait_steps 10
# poke NAME KEY ID: a client with worker key KEY that says Hello with member id ID
poke() {
  h_start "poke-$1" "$BUILD/kfac-poke" --endpoint "$ep" --member_id "$3" --member_kind hello --wait_ms 1500 \
    --client_secret_key "$K/workers/worker-$2.secret" --server_public_key "$K/ps.pub"
  h_wait "$H_PID" 20
}
# 1. a second member with worker-1's key
poke shared 1 5
[ "$H_STATUS" = 1 ] || h_fail "a second client with worker-1's key was not refused (status $H_STATUS)"
grep -q "refuse: this CURVE key (.*) already holds 1 client (worker#[0-9]* .*members_per_key = 1" "$H_DIR/poke-shared.log" ||
  h_fail "the client sharing a key was not told why: $(tail -n 3 "$H_DIR/poke-shared.log")"
# 2. worker-2 silent for more than 3 heartbeats (0.6 s), its id from key 3:
# once it is seen stopped (state T), the PS has heard nothing from it for
# at least the time since; 4 heartbeats of that, read from /proc/uptime
kill -STOP "$W2"
t=0
until [ "$(sed 's/.*) //' "/proc/$W2/stat" 2>/dev/null | cut -d' ' -f1)" = T ]; do
  t=$((t + 1))
  [ $t -lt 100 ] || h_fail "worker-2 (pid $W2) was not stopped 10 s after SIGSTOP"
  sleep 0.1
done
t_stop=$(cut -d' ' -f1 /proc/uptime)
t=0
until awk -v a="$t_stop" '{ exit !($1 - a >= 0.8) }' /proc/uptime; do
  t=$((t + 1))
  [ $t -lt 100 ] || h_fail "/proc/uptime did not advance 0.8 s in 100 tries"
  sleep 0.1
done
poke takeover 3 2
st=$H_STATUS
kill -CONT "$W2"
[ "$st" = 1 ] || h_fail "a client with another listed key took worker-2's id (status $st)"
grep -q "refuse: worker id 2 belongs to another CURVE key" "$H_DIR/poke-takeover.log" ||
  h_fail "the takeover was not refused for the key: $(tail -n 3 "$H_DIR/poke-takeover.log")"
# 3. key 3 with an id of its own
poke own 3 3
[ "$H_STATUS" = 0 ] || h_fail "key 3 with a free id was not welcomed (status $H_STATUS)"
h_wait "$PS_PID" 120
[ "$H_STATUS" = 0 ] || h_fail "kfac-ps exited with status $H_STATUS (124: still running after 120 s)"
log=$H_DIR/ps.log
grep -q "refused a kfac-worker (pid [0-9]* on .*): this CURVE key .* already holds 1 client .*(1 refused for their key so far)" "$log" ||
  h_fail "kfac-ps did not log the shared key"
grep -q "refused a kfac-worker (pid [0-9]* on .*): worker id 2 belongs to another CURVE key .*(2 refused for their key so far)" "$log" ||
  h_fail "kfac-ps did not log the takeover attempt"
grep -q "rejoins" "$log" && h_fail "a worker record was taken over: $(grep rejoins "$log")"
grep -Eq "done: $STEPS steps.*rejected [0-9]+ \(.*hello 2.*hellos refused for their CURVE key 2" "$log" ||
  h_fail "the done line does not count the refused Hellos: $(grep 'done:' "$log")"
rows=$(awk 'NR > 1' "$H_DIR/out/steps.csv" | wc -l)
[ "$rows" -eq "$STEPS" ] || h_fail "steps.csv has $rows steps, expected $STEPS"

# 4. [security] members_per_key = 2: a key holds two clients, not three
port=$(h_port) || exit 1
ep=tcp://127.0.0.1:$port
# shellcheck disable=SC2086
h_start ps2 "$BUILD/kfac-ps" --config "$H_DIR/run.ini" $S --ps.bind "$ep" --run.out_dir "$H_DIR/out2" \
  --security.members_per_key 2
PS2=$H_PID
h_wait_log "$H_DIR/ps2.log" "listening on" 30 || h_fail "the second kfac-ps does not listen"
for i in 11 12; do
  h_start "poke-two-$i" "$BUILD/kfac-poke" --endpoint "$ep" --member_id "$i" --member_kind hello --wait_ms 3000 \
    --client_secret_key "$K/workers/worker-1.secret" --server_public_key "$K/ps.pub"
  eval "P$i=\$H_PID"
  h_wait_log "$H_DIR/poke-two-$i.log" "welcomed as id" 20 || h_fail "client $i of key 1 was not welcomed with members_per_key = 2"
done
poke third 1 13
[ "$H_STATUS" = 1 ] || h_fail "a third client of key 1 was not refused with members_per_key = 2 (status $H_STATUS)"
grep -q "refuse: this CURVE key (.*) already holds 2 clients (.*members_per_key = 2" "$H_DIR/poke-third.log" ||
  h_fail "the third client was not told why: $(tail -n 3 "$H_DIR/poke-third.log")"
h_wait "$P11" 20
h_wait "$P12" 20
kill -TERM "$PS2"
h_wait "$PS2" 20
[ "$H_STATUS" = 0 ] || h_fail "the second kfac-ps exited $H_STATUS after SIGTERM"
h_pass "a second member of one key refused, a listed key refused a silent worker's id, a key's own id welcomed; $STEPS steps; members_per_key = 2: 2 welcomed, the third refused"
