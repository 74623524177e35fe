#!/bin/sh
# tests/integration/58-hostile-rejoin.sh — a member that leaves and comes
# back to push again (tools/kfac-poke --member_kind rejoin): it pushes a
# gradient of the round, says Bye, says Hello again on the same socket (a
# new connection to kfac-ps, a new peer record) and pushes the same
# round's gradient again, 6 times. Before, Bye forgot everything about it:
# with [ps] aggregate = mean its gradient was summed as it left and each
# new push counted again, so one member put 6 gradients into one round
# (and shed its stalls, demotion and request tokens the same way). What a
# member has done now stays with its identity (ps/ident.h): the member id
# without CURVE, the CURVE key with it.
# kfac-ps (SGD, [cluster] workers = 2) with two members: one that asks for
# Params and then only heartbeats (it holds round 0 open, stall timeout
# 30 s), and the rejoining one. Run twice: without CURVE (member ids) and
# with CURVE (keys). Passes when the first push is taken and the 5 after
# coming back are refused, each with the reason in its Error, kfac-ps's
# log naming the member, the refusals counted (kfac_grads_repushed_total).
# The CURVE half is skipped (noted in the pass line) when libzmq has no CURVE.
. tests/integration/harness.inc
h_init 58-hostile-rejoin
for b in kfac-poke kfac-keygen; do [ -x "$BUILD/$b" ] || h_fail "missing $BUILD/$b"; done
summary=""
for mode in plain curve; do
  d=$H_DIR/$mode
  mkdir -p "$d"
  S=""
  C1=""
  C2=""
  if [ "$mode" = curve ]; then
    K=$d/keys
    mkdir -m 700 "$K" "$K/workers" || h_fail "mkdir"
    if ! "$BUILD/kfac-keygen" --out "$K/ps" --host none >"$d/keygen.log" 2>&1; then
      grep -q "no CURVE support" "$d/keygen.log" && { summary="$summary curve: skipped (no CURVE in libzmq);"; break; }
      h_fail "kfac-keygen failed: $(cat "$d/keygen.log")"
    fi
    for n in 1 2; do
      "$BUILD/kfac-keygen" --out "$K/workers/worker-$n" --host none >>"$d/keygen.log" 2>&1 || h_fail "kfac-keygen failed"
    done
    S="--security.server_secret_key $K/ps.secret --security.allow_workers $K/workers --security.server_public_key $K/ps.pub"
    C1="--client_secret_key $K/workers/worker-1.secret --server_public_key $K/ps.pub"
    C2="--client_secret_key $K/workers/worker-2.secret --server_public_key $K/ps.pub"
  fi
  h_mlp_cluster "$d" 50 seed=9 eval_n=200 batch=16 train_n=2000 tag="-$mode" ps_opts="$S" start=ps ini="[optimizer]
kind = sgd
[ps]
aggregate = mean
stall_timeout_ms = 30000"
  # shellcheck disable=SC2086
  h_start "holder-$mode" "$BUILD/kfac-poke" --endpoint "$ep" --member_id 1 --member_kind stall --wait_ms 20000 $C1
  h_wait_log "$H_DIR/holder-$mode.log" "welcomed as id" 20 || h_fail "$mode: the member holding the round was not welcomed"
  # shellcheck disable=SC2086
  h_start "rejoin-$mode" "$BUILD/kfac-poke" --endpoint "$ep" --member_id 2 --member_kind rejoin --count 6 \
    --wait_ms 3000 --print 20 $C2
  h_wait "$H_PID" 60
  [ "$H_STATUS" = 0 ] || h_fail "$mode: the rejoining member exited with status $H_STATUS"
  hwm=$(h_kb "$PS_PID" VmHWM)
  plog=$H_DIR/rejoin-$mode.log
  grep -q "6 gradients of version 0 pushed, 6 times left and came back" "$plog" ||
    h_fail "$mode: the member did not push 6 times, coming back each time: $(tail -n 3 "$plog")"
  n_err=$(sed -n 's/.*errors INVALID \([0-9]*\)$/\1/p' "$plog")
  [ "${n_err:-0}" = 5 ] || h_fail "$mode: $n_err of the 5 pushes after coming back refused (expected 5): $(tail -n 5 "$plog")"
  who="its member id"
  [ "$mode" = curve ] && who="its CURVE key"
  grep -q "invalid: its identity ($who) already put 1 gradient into the round of step 0" "$plog" ||
    h_fail "$mode: the refusal does not say why: $(grep -m1 'reply' "$plog")"
  # kfac-ps logs one refusal line a second per cause; the replies carry the count
  grep -q "rejected grad_push from worker#[0-9]* (pid [0-9]* .*already put 1 gradient into the round of step 0.*(1 refused so far)" \
    "$H_DIR/ps-$mode.log" || h_fail "$mode: kfac-ps did not log the refusal naming the member"
  grep -q "(5 refused so far)" "$plog" || h_fail "$mode: the refusals were not counted to 5"
  summary="$summary $mode: 1 push taken, 5 refused, kfac-ps peak resident memory ${hwm:-?} kB;"
done
h_pass "a member that leaves and comes back gets no second share of a round;$summary"
