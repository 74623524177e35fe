#!/bin/sh
# tests/integration/58-hostile-members.sh — members that say a valid Hello
# and then try to poison or hold the run (tools/kfac-poke --member_id):
# while 2 honest workers train the MNIST MLP (150 steps, batch 32), four
# hostile members join after step 20 and push, 5 times each, gradients
# with n_examples = 1000000, gradients of values 3e38, gradients with NaN
# and Inf, or nothing at all (heartbeats only for 10 s: dropped after 10
# median push times, at least [ps] stall_min_ms = 1000; a fixed 1.5 s
# applied to the honest workers too, which a loaded host can hold that
# long); 22 more say Hello and never ask for work ([ps]
# handshake_timeout_ms = 1000; more than the 18 worker slots); a last
# client says Hello with the member id of a live worker; one more says
# Hello with a host name holding a newline, a forged log line and an
# escape sequence. Join lines are limited: at most 20 in a window of 10 s.
# Passes when kfac-ps finishes all steps with exit 0 and a final test
# accuracy of at least ACC, each poisoned push was rejected with a log
# line that names the sender and the cause, the silent member was dropped
# from the round, the idle ones expired or made room, every step averaged
# exactly the 2 honest workers, the duplicate id was refused, and the
# forged host name was logged escaped (\x0a, \x1b: no forged line, no
# escape character in the log).
. tests/integration/harness.inc
h_init 58-hostile-members
ACC=0.85
[ -x "$BUILD/kfac-poke" ] || h_fail "missing $BUILD/kfac-poke"
h_mlp_cluster "$H_DIR" 150 seed=3 eval_n=2000 train_n=10000 invertd=1 ini='[kfac]
stats = sync
fisher = empirical
[ps]
stall_min_ms = 1000
handshake_timeout_ms = 1000
progress_every = 50'
h_wait_steps 20
# a member whose host name would forge a log line and clear the operator's terminal
forged=$(printf 'evil\nERROR kfac-ps: forged line\033[2J')
h_start poke-forge "$BUILD/kfac-poke" --endpoint "$ep" --member_id 60 --member_kind hello --wait_ms 1500 --host "$forged"
FORGE=$H_PID
pids=""
for k in examples:11 huge:12 nan:13 stall:14; do
  w=4000
  [ "${k%%:*}" = stall ] && w=10000 # past the stall timeout, which grows with the push times
  h_start "poke-${k%%:*}" "$BUILD/kfac-poke" --endpoint "$ep" --member_id "${k##*:}" --member_kind "${k%%:*}" \
    --count 5 --wait_ms "$w" --seed 7
  pids="$pids $H_PID"
done
for k in examples huge nan stall; do
  h_wait_log "$H_DIR/poke-$k.log" "welcomed as id" 20 || h_fail "the $k member was not welcomed"
done
sleep 0.5 # they have asked for Params by now
# a flood of clients that say Hello and never ask for work: more than the
# worker slots ([cluster] workers = 2: 18)
for i in $(seq 100 121); do
  h_start "poke-hello$i" "$BUILD/kfac-poke" --endpoint "$ep" --member_id "$i" --member_kind hello --wait_ms 2500
done
h_start poke-dup "$BUILD/kfac-poke" --endpoint "$ep" --member_id 1 --member_kind examples --count 1 --wait_ms 3000
DUP=$H_PID
for p in $pids; do
  h_wait "$p" 30
  [ "$H_STATUS" = 0 ] || h_fail "a hostile member exited with status $H_STATUS (not welcomed?)"
done
h_wait "$FORGE" 30
[ "$H_STATUS" = 0 ] || h_fail "the member with a forged host name was not welcomed (status $H_STATUS)"
h_wait "$DUP" 30
[ "$H_STATUS" = 1 ] || h_fail "the client with a live worker's id was not refused (status $H_STATUS)"
grep -q "internal: worker id 1 is in use by worker#" "$H_DIR/poke-dup.log" || h_fail "the answer does not say the id is in use"
h_wait "$PS_PID" 120
[ "$H_STATUS" = 0 ] || h_fail "kfac-ps exited with status $H_STATUS (124: still running after 120 s)"
log=$H_DIR/ps.log
grep -q "rejected grad_push from worker#[0-9]* (pid [0-9]* .*grad_push.n_examples = 1000000 is more than \[data\] batch = 32" "$log" ||
  h_fail "no rejection of n_examples = 1000000 naming the sender"
grep -q "rejected grad_push from worker#[0-9]* (pid [0-9]* .*gradient norm .* grad_norm_max_ratio" "$log" ||
  h_fail "no rejection of the 3e38 gradient naming the sender"
grep -q "rejected grad_push from worker#[0-9]* (pid [0-9]* .*grad_push.grad\[[0-9]*\] is \(NaN\|Inf\|not finite\)" "$log" ||
  h_fail "no rejection of the NaN gradient naming the sender"
grep -q "worker#[0-9]* (pid [0-9]* .*heartbeats but has not pushed its gradient" "$log" ||
  h_fail "the silent member was not dropped from the round"
grep -q "refused a kfac-worker .*worker id 1 is in use" "$log" || h_fail "the duplicate id was not refused in the log"
grep -q "worker#[0-9]* (pid [0-9]* .*said Hello .* has not asked for work since" "$log" ||
  h_fail "the clients that never asked for work did not expire"
grep -q "forgotten to make room for a new kfac-worker (it never asked for work)" "$log" ||
  h_fail "the flood of clients did not make kfac-ps forget idle ones"
grep -q '^ERROR kfac-ps: forged' "$log" && h_fail "a client's host name forged a log line: $(grep -n '^ERROR kfac-ps: forged' "$log")"
grep -q "$(printf '\033')" "$log" && h_fail "a client's host name put an escape character into the log"
grep -q 'worker#[0-9]* (pid [0-9]* on evil\\x0aERROR kfac-ps: forged line\\x1b\[2J)' "$log" ||
  h_fail "the forged host name is not logged escaped: $(grep -n 'forged' "$log" | head -n 3)"
# join and leave lines of workers: at most 20 in each window of 10 s
# ([ps] PS_JOIN_LOG_BURST; a window opens with the first line after the
# last one closed), while 29 workers join within a few seconds
joined=$(grep -c "worker#[0-9]* (pid [0-9]* on .*) joined (asked for id" "$log")
[ "$joined" -gt 0 ] || h_fail "no worker join line"
grep -E "^[0-9T:.-]+Z INFO  kfac-ps: worker#[0-9]+ \(pid [0-9]+ on .*\) (joined|said hello again|left: )" "$log" |
  awk '{ split(substr($1, 12, 12), t, ":"); s = t[1] * 3600 + t[2] * 60 + t[3]
         if (n == 0 || s - w >= 10) { w = s; n = 0 }
         if (++n > 20) { print "more than 20 worker join lines within 10 s, from " $1; exit 1 } }' >"$H_DIR/joins.txt" ||
  h_fail "the join lines are not limited: $(cat "$H_DIR/joins.txt")"
wp=$(h_csv_col "$H_DIR/out/steps.csv" workers_present) || h_fail "$wp"
awk -F, -v c="$wp" 'NR > 1 && $c != 2 { bad++ } END { exit bad > 0 }' "$H_DIR/out/steps.csv" ||
  h_fail "a step did not average exactly the 2 honest workers"
rows=$(awk 'NR > 1' "$H_DIR/out/steps.csv" | wc -l)
[ "$rows" -eq 150 ] || h_fail "steps.csv has $rows steps, expected 150"
acc=$(h_csv_last "$H_DIR/out/eval.csv" test_acc)
h_ge "$acc" "$ACC" || h_fail "final test accuracy $acc is below $ACC: the hostile gradients got in"
h_pass "every poisoned push rejected with its sender named, the silent member dropped, the duplicate id refused, the forged host name escaped, $joined join lines logged; test accuracy $acc"
