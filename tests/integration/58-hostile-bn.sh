#!/bin/sh
# tests/integration/58-hostile-bn.sh — a member that pushes batch-norm
# running statistics with a negative variance (tools/kfac-poke
# --member_kind negvar): while 2 honest workers train a small CNN with
# batch norm (written here) with SGD, the hostile member joins after step
# 10 and pushes 4 small gradients whose running statistics are all -1.
# Before, only non-finite values were refused, so a negative variance got
# into the average and made the evaluation and the exported weights NaN.
# Then a member whose running statistics are all 3e38 (finite, but two of
# them average to Inf, which made every client refuse the Params and the
# checkpoints fail to restore): refused against the published ones
# (PS_BN_VAR_MAX_RATIO).
# Passes when every such push is refused with a line that names the
# sender, the layer and the channel, kfac-ps finishes all steps, and the
# final test accuracy (the running statistics are used there) is a number
# of at least ACC.
. tests/integration/harness.inc
h_init 58-hostile-bn
ACC=0.80
[ -x "$BUILD/kfac-poke" ] || h_fail "missing $BUILD/kfac-poke"
cat >"$H_DIR/bn.model" <<EOF2
input 1x28x28
conv name=c1 out=8 k=5 pad=2
batchnorm name=bn1
relu
maxpool k=2
flatten
fc name=f out=10
softmax_xent
EOF2
h_mlp_cluster "$H_DIR" 80 seed=5 eval_n=2000 model="$H_DIR/bn.model" ini='[optimizer]
kind = sgd
lr = 0.05'
h_wait_steps 10
h_start poke-negvar "$BUILD/kfac-poke" --endpoint "$ep" --member_id 21 --member_kind negvar --count 4 --wait_ms 4000
h_wait "$H_PID" 40
[ "$H_STATUS" = 0 ] || h_fail "the hostile member exited with status $H_STATUS (not welcomed?)"
h_start poke-bnhuge "$BUILD/kfac-poke" --endpoint "$ep" --member_id 22 --member_kind bnhuge --count 4 --wait_ms 4000
h_wait "$H_PID" 40
[ "$H_STATUS" = 0 ] || h_fail "the second hostile member exited with status $H_STATUS (not welcomed?)"
hwm=$(h_kb "$PS_PID" VmHWM)
h_wait "$PS_PID" 120
[ "$H_STATUS" = 0 ] || h_fail "kfac-ps exited with status $H_STATUS (124: still running after 120 s)"
grep -q "rejected grad_push from worker#[0-9]* (pid [0-9]* .*running variance of layer bn1 channel 0 is -1, below 0" \
  "$H_DIR/ps.log" || h_fail "no rejection of the negative running variance naming the sender, layer and channel"
# kfac-ps logs one refusal line a second per cause: the replies carry each
grep -q "invalid: grad_push.state: running variance of layer bn1 channel 0 is 3e+38, more than" \
  "$H_DIR/poke-bnhuge.log" || h_fail "no refusal of the running variance of 3e38 naming the layer and channel"
if grep -q "batch-norm running statistics are not finite" "$H_DIR/ps.log"; then h_fail "a non-finite state reached the step"; fi
rows=$(awk 'NR > 1' "$H_DIR/out/steps.csv" | wc -l)
[ "$rows" -eq 80 ] || h_fail "steps.csv has $rows steps, expected 80"
acc=$(h_csv_last "$H_DIR/out/eval.csv" test_acc)
case $acc in *[0-9]*) ;; *) h_fail "final test accuracy is not a number: '$acc'" ;; esac
h_ge "$acc" "$ACC" || h_fail "final test accuracy $acc is below $ACC: the negative variance got in"
h_pass "every negative running variance and every one of 3e38 refused, their senders named; test accuracy $acc; kfac-ps peak resident memory ${hwm:-?} kB"
