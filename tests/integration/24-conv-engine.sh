#!/bin/sh
# tests/integration/24-conv-engine.sh — training the MNIST CNN in process
# (kfac-train, K-FAC, batch 64 on 10000 images) with each CPU engine of the
# conv layers ([model] conv_engine): blas and onednn reach the accuracy
# (0.90 on 2000 test images after 100 steps), within 3 points of each
# other (their float rounding differs, and the steps amplify it: 1.1
# points apart at 150 steps, 0.7 at 100; a broken engine falls far below
# 0.90), and each puts the layers where it says:
#   - blas:   no layer on oneDNN;
#   - onednn: conv1 and conv2 on oneDNN;
#   - auto:   conv2 on oneDNN, conv1 (one input channel) on OpenBLAS
#             (nn_conv_engine_pick), and two runs of 30 steps give the same
#             training loss at every step, bit for bit as printed (the same
#             path in both: what tests/integration/55-deterministic.sh relies
#             on). auto mixes the two engines whose accuracy is checked
#             above, so its runs are short.
# Skipped (77) only where oneDNN cannot run here (kfac-train with onednn says
# "cannot run here": its primitives were refused). A oneDNN that runs and
# gives a wrong result in its probe ("broken here") fails, for onednn and
# auto alike (KFAC_TEST_ONEDNN_WRONG=1 forces it: common/nn/nn_dnnl.h).
. tests/integration/harness.inc
h_init 24-conv-engine
[ -x "$BUILD/kfac-train" ] || h_fail "missing $BUILD/kfac-train"
ACC=0.90
train() { # name engine [steps]
  "$BUILD/kfac-train" --model.file models/mnist-cnn.model --model.conv_engine "$2" --optimizer.kind kfac \
    --data.train_n 10000 --data.batch 64 --run.steps "${3:-100}" --run.eval_every 100 --run.eval_n 2000 --run.seed 7 \
    --run.out_dir "$H_DIR/$1" >"$H_DIR/$1.log" 2>&1
}
if ! train onednn onednn; then
  grep -q "cannot run here" "$H_DIR/onednn.log" && h_skip "oneDNN cannot run here: $(grep -m1 'cannot run here' "$H_DIR/onednn.log")"
  h_fail "kfac-train with conv_engine = onednn failed: $(grep -m1 ERROR "$H_DIR/onednn.log")"
fi
train blas blas || h_fail "kfac-train with conv_engine = blas failed"
train auto auto 30 || h_fail "kfac-train with conv_engine = auto failed"
train auto2 auto 30 || h_fail "kfac-train with conv_engine = auto (second run) failed"
on() { grep -c "conv $2: oneDNN" "$H_DIR/$1.log"; }
[ "$(on blas conv1)$(on blas conv2)" = 00 ] || h_fail "blas: a conv layer ran on oneDNN"
[ "$(on onednn conv1)$(on onednn conv2)" = 11 ] || h_fail "onednn: conv1 and conv2 not both on oneDNN"
[ "$(on auto conv1)$(on auto conv2)" = 01 ] || h_fail "auto: expected conv2 alone on oneDNN"
for r in blas onednn; do
  a=$(h_csv_last "$H_DIR/$r/eval.csv" test_acc)
  h_ge "$a" "$ACC" || h_fail "$r: test accuracy $a below $ACC"
  eval "acc_$r=$a"
done
awk -v a="$acc_blas" -v b="$acc_onednn" 'BEGIN { d = a - b; exit !(d < 0.03 && d > -0.03) }' ||
  h_fail "blas and onednn accuracies differ by more than 3 points: $acc_blas, $acc_onednn"
c=$(h_csv_col "$H_DIR/auto/steps.csv" train_loss) || h_fail "$c"
cut -d, -f"$c" "$H_DIR/auto/steps.csv" >"$H_DIR/loss1"
cut -d, -f"$c" "$H_DIR/auto2/steps.csv" >"$H_DIR/loss2"
[ "$(wc -l <"$H_DIR/loss1")" = 31 ] || h_fail "the auto run has $(($(wc -l <"$H_DIR/loss1") - 1)) steps, expected 30"
cmp -s "$H_DIR/loss1" "$H_DIR/loss2" || h_fail "two auto runs of 30 steps differ in train_loss"
h_pass "test accuracy blas $acc_blas, onednn $acc_onednn; two auto runs identical over 30 steps"
