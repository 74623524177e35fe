#!/bin/sh
# tests/integration/25-curve-members-resume.sh — a member id stays with its
# CURVE key across a restart of kfac-ps from its checkpoint (docs/security.md,
# "Members and keys"). kfac-ps with CURVE, three listed worker keys and a
# checkpoint every 10 steps; worker-1 (key 1, id 1) and worker-2 (key 2,
# id 2) train the MNIST MLP. After the first checkpoint, worker-2 is stopped
# (SIGSTOP) and kfac-ps is killed (SIGKILL) and started again with --resume,
# so that the first Hello with id 2 after the restart comes from a client
# with the listed key 3 (kfac-poke): it must be refused ("belongs to another
# CURVE key"), as it would be had kfac-ps not restarted; then worker-2 goes
# on (SIGCONT) and gets id 2 and its shard back, and the run finishes. The
# restarted kfac-ps says how many bindings it restored. Then key 2 is
# removed from the allowlist and kfac-ps resumed once more: the binding of
# a key no longer listed is dropped, and key 3 is welcomed with id 2.
# Skipped (77) when libzmq has no CURVE.
. tests/integration/harness.inc
h_init 25-curve-members-resume
STEPS=60
h_curve_cluster "$STEPS" 10 '[checkpoint]
every = 10'
h_wait_log "$H_DIR/ps.log" "checkpoint at step 10 " 60 || h_fail "no checkpoint at step 10"
# worker-2 asleep, kfac-ps killed and started again: the honest worker-2
# cannot be the first to say Hello with id 2
kill -STOP "$W2"
kill -KILL "$PS_PID"
h_wait "$PS_PID" 10
# shellcheck disable=SC2086
h_start ps-2 "$BUILD/kfac-ps" --config "$H_DIR/run.ini" $S --resume
PS_PID=$H_PID
h_wait_log "$H_DIR/ps-2.log" "listening on" 30 || { kill -CONT "$W2"; h_fail "the restarted kfac-ps does not listen"; }
h_start poke-takeover "$BUILD/kfac-poke" --endpoint "$ep" --member_id 2 --member_kind hello --wait_ms 1500 \
  --client_secret_key "$K/workers/worker-3.secret" --server_public_key "$K/ps.pub"
h_wait "$H_PID" 20
st=$H_STATUS
kill -CONT "$W2"
grep -Eq "resumed from .*ckpt-[0-9]+\.kfc: step [0-9]+, .* 2 member ids bound to CURVE keys" "$H_DIR/ps-2.log" ||
  h_fail "the restarted kfac-ps does not say it restored 2 bindings: $(grep 'resumed from' "$H_DIR/ps-2.log")"
[ "$st" = 1 ] || h_fail "after the restart, a client with another listed key took worker-2's id (status $st)"
grep -q "refuse: worker id 2 belongs to another CURVE key" "$H_DIR/poke-takeover.log" ||
  h_fail "the takeover was not refused for the key: $(tail -n 3 "$H_DIR/poke-takeover.log")"
shard=$(sed -n 's/.*joined (asked for id 2; shard \([0-9]*\) of 2.*/\1/p' "$H_DIR/ps.log" | head -n 1)
[ -n "$shard" ] || h_fail "worker-2's shard before the restart is not in the log"
h_wait_log "$H_DIR/ps-2.log" "joined \(asked for id 2; shard $shard of 2" 30 ||
  h_fail "worker-2 did not get id 2 and shard $shard back after the restart"
h_wait "$PS_PID" 120
[ "$H_STATUS" = 0 ] || h_fail "the restarted kfac-ps exited with status $H_STATUS (124: still running after 120 s)"
log=$H_DIR/ps-2.log
grep -q "refused a kfac-worker (pid [0-9]* on .*): worker id 2 belongs to another CURVE key .*(1 refused for their key so far)" "$log" ||
  h_fail "the restarted kfac-ps did not log the takeover attempt"
grep -Eq "done: $STEPS steps.*hellos refused for their CURVE key 1" "$log" ||
  h_fail "the done line does not count the refused Hello: $(grep 'done:' "$log")"
# key 2 removed from the allowlist while kfac-ps is down: after a resume its
# id is free again (the run goes on for 10 more steps: no client comes)
rm -f "$K/workers/worker-2.pub"
# shellcheck disable=SC2086
h_start ps-3 "$BUILD/kfac-ps" --config "$H_DIR/run.ini" $S --resume --run.steps $((STEPS + 10))
PS_PID=$H_PID
h_wait_log "$H_DIR/ps-3.log" "listening on" 30 || h_fail "the third kfac-ps does not listen"
grep -q "1 member id no longer bound to a CURVE key (the key is no longer listed for its role" "$H_DIR/ps-3.log" ||
  h_fail "the binding of the removed key 2 was kept: $(grep -i 'bound' "$H_DIR/ps-3.log")"
h_start poke-free "$BUILD/kfac-poke" --endpoint "$ep" --member_id 2 --member_kind hello --wait_ms 1000 \
  --client_secret_key "$K/workers/worker-3.secret" --server_public_key "$K/ps.pub"
h_wait "$H_PID" 20
[ "$H_STATUS" = 0 ] || h_fail "key 3 was refused id 2 after key 2 left the allowlist (status $H_STATUS): $(tail -n 2 "$H_DIR/poke-free.log")"
kill -TERM "$PS_PID"
h_wait "$PS_PID" 20
[ "$H_STATUS" = 0 ] || h_fail "the third kfac-ps exited $H_STATUS after SIGTERM"
h_pass "after kfac-ps was killed and resumed from its checkpoint, another listed key was refused worker-2's id; worker-2 got it back; $STEPS steps; once key 2 left the allowlist, a resume freed its id"
