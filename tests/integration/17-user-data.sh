#!/bin/sh
# tests/integration/17-user-data.sh — training on the user's own files
# ([data] set = idx | npy) with kfac-train, in-process:
#   1. the first 2000 training and 1000 test examples of MNIST written as
#      .npy files (uint8 images (N, 28, 28), uint8 labels (N,)) by the
#      shell alone, and as IDX files (plain and gzip);
#   2. the MNIST MLP trained 60 SGD steps from each, with [data] mean/std set
#      to MNIST's constants, evaluates at step 60 to exactly the figures of
#      the built-in set (train_n = 2000, eval_n = 1000: the same examples in
#      the same order), and learns (test accuracy above 70%);
#   3. without mean/std, the normalization is computed from the training
#      images and logged (near MNIST's 0.1307 / 0.3081 for this subset);
#   4. kfac-ps computes the constants once, logs them and sends them in
#      Welcome: a worker welcomed by it loads the files without computing;
#   5. a model whose input is not 1 x 28 x 28 is refused with exit 78 and a
#      message naming the file and both shapes.
. tests/integration/harness.inc
h_init 17-user-data
H_T0=$(date +%s)
mn=data/mnist
for f in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
  [ -r "$mn/$f" ] || h_skip "needs the uncompressed MNIST file $mn/$f (run make data)"
done
d=$H_DIR/u
mkdir -p "$d"

# le16 N: two bytes, little-endian, as printf escapes
le16() { printf "\\$(printf %03o $(($1 % 256)))\\$(printf %03o $(($1 / 256)))"; }
# npy_header SHAPE: a version 1.0 header for uint8 data of shape SHAPE ("2000, 28, 28"),
# padded with spaces so that the data start at a multiple of 64 bytes
npy_header() {
  dict="{'descr': '|u1', 'fortran_order': False, 'shape': ($1), }"
  len=$(( ${#dict} + 1 ))
  pad=$(( (64 - (10 + len) % 64) % 64 ))
  printf '\223NUMPY\001\000'
  le16 $((len + pad))
  printf '%s%*s\n' "$dict" "$pad" ""
}
# idx_slice IN OUT HEADER_BYTES N ITEM_BYTES: the first N items of an IDX file, with its header's count set to N
idx_slice() {
  { head -c 4 "$1"
    printf "\\$(printf %03o $(($4 / 16777216 % 256)))\\$(printf %03o $(($4 / 65536 % 256)))\\$(printf %03o $(($4 / 256 % 256)))\\$(printf %03o $(($4 % 256)))"
    tail -c +9 "$1" | head -c $(($3 - 8))
    tail -c +$(($3 + 1)) "$1" | head -c $(($4 * $5)); } >"$2"
}
for split in train:train:2000 test:t10k:1000; do
  name=${split%%:*}; rest=${split#*:}; src=${rest%%:*}; n=${rest#*:}
  { npy_header "$n, 28, 28"; tail -c +17 "$mn/$src-images-idx3-ubyte" | head -c $((n * 784)); } >"$d/$name-images.npy"
  { npy_header "$n,"; tail -c +9 "$mn/$src-labels-idx1-ubyte" | head -c "$n"; } >"$d/$name-labels.npy"
  idx_slice "$mn/$src-images-idx3-ubyte" "$d/$name-images.idx" 16 "$n" 784
  idx_slice "$mn/$src-labels-idx1-ubyte" "$d/$name-labels.idx" 8 "$n" 1
  gzip -c "$d/$name-images.idx" >"$d/$name-images.idx.gz"
  gzip -c "$d/$name-labels.idx" >"$d/$name-labels.idx.gz"
done
[ "$(wc -c <"$d/train-images.npy")" = $((128 + 2000 * 784)) ] || h_fail "the npy writer: unexpected size $(wc -c <"$d/train-images.npy")"

common="--model.file models/mnist-mlp.model --kind sgd --lr 0.05 --steps 60 --eval-every 60 --batch 32 --seed 3"
# shellcheck disable=SC2086
run() { # name args...
  n=$1; shift
  "$BUILD/kfac-train" $common --run.out_dir "$H_DIR/out-$n" "$@" >"$H_DIR/$n.log" 2>&1
  st=$?
  [ "$st" = 0 ] || h_fail "kfac-train ($n) exited $st"
  # the evaluation line of the last step, without the timings (the final
  # "done:" line evaluates the whole test split, which differs in size)
  grep '^step *60/60' "$H_DIR/$n.log" | sed 's/ [0-9.]* img\/s *[0-9.]*s / /' >"$H_DIR/$n.done"
  [ -s "$H_DIR/$n.done" ] || h_fail "kfac-train ($n) printed no evaluation line"
}
run named --data.set mnist --train-n 2000 --eval-n 1000
run npy --data.set npy --data.dir "$d" --train-images train-images.npy --train-labels train-labels.npy \
  --test-images test-images.npy --test-labels test-labels.npy --data.mean 0.1307 --data.std 0.3081
run idx --data.set idx --data.dir "$d" --train-images train-images.idx --train-labels train-labels.idx \
  --test-images "$d/test-images.idx" --test-labels "$d/test-labels.idx" --data.mean 0.1307 --data.std 0.3081
run idxgz --data.set idx --data.dir "$d" --train-images train-images.idx.gz --train-labels train-labels.idx.gz \
  --test-images test-images.idx.gz --test-labels test-labels.idx.gz --data.mean 0.1307 --data.std 0.3081
for v in npy idx idxgz; do
  cmp -s "$H_DIR/named.done" "$H_DIR/$v.done" ||
    h_fail "$v differs from the built-in set: '$(cat "$H_DIR/$v.done")' vs '$(cat "$H_DIR/named.done")'"
done
acc=$(sed -n 's/.*test acc *\([0-9.]*\)%.*/\1/p' "$H_DIR/npy.done")
h_ge "$acc" 70 || h_fail "60 SGD steps from the npy files reached only $acc% test accuracy"

# 3: computed normalization
run computed --data.set npy --data.dir "$d" --train-images train-images.npy --train-labels train-labels.npy \
  --test-images test-images.npy --test-labels test-labels.npy
line=$(grep 'normalization computed from the training images' "$H_DIR/computed.log") ||
  h_fail "the computed normalization was not logged"
mean=$(echo "$line" | sed -n 's/.*mean = \([0-9.e-]*\),* .*/\1/p')
std=$(echo "$line" | sed -n 's/.*std = \([0-9.e-]*\).*/\1/p')
h_ge "$mean" 0.11 && h_ge 0.15 "$mean" && h_ge "$std" 0.29 && h_ge 0.33 "$std" ||
  h_fail "computed mean $mean / std $std are far from MNIST's 0.1307 / 0.3081: $line"
acc=$(sed -n 's/.*test acc *\([0-9.]*\)%.*/\1/p' "$H_DIR/computed.done")
h_ge "$acc" 70 || h_fail "with computed normalization only $acc% test accuracy"

# 4: kfac-ps computes it once and logs it (the clients get it in Welcome)
port=$(h_port) || h_fail "no free port"
h_start ps "$BUILD/kfac-ps" --model.file models/mnist-mlp.model --data.set npy --data.dir "$d" \
  --train-images train-images.npy --train-labels train-labels.npy --test-images test-images.npy \
  --test-labels test-labels.npy --bind "tcp://127.0.0.1:$port" --run.out-dir "$H_DIR/ps-out"
ps_pid=$H_PID
h_wait_log "$H_DIR/ps.log" "listening on" 30 || h_fail "kfac-ps did not start on npy files"
grep -q "normalization computed from the training images" "$H_DIR/ps.log" || h_fail "kfac-ps did not log the normalization"
h_start worker "$BUILD/kfac-worker" --cluster.ps "tcp://127.0.0.1:$port" --data.dir "$d"
w_pid=$H_PID
h_wait_log "$H_DIR/worker.log" "ready: shard" 30 || h_fail "kfac-worker did not load the npy files named in Welcome"
! grep -q "normalization computed" "$H_DIR/worker.log" || h_fail "kfac-worker computed its own normalization instead of the PS's"
kill -TERM "$w_pid"
h_wait "$w_pid" 20
kill -TERM "$ps_pid"
h_wait "$ps_pid" 20

# 5: shapes
cat >"$H_DIR/wide.model" <<EOF
input 1x32x32
flatten
fc name=out out=10
softmax_xent
EOF
"$BUILD/kfac-train" --model.file "$H_DIR/wide.model" --run.out_dir "$H_DIR/out-wide" --kind sgd --steps 1 \
  --data.set npy --data.dir "$d" \
  --train-images train-images.npy --train-labels train-labels.npy --test-images test-images.npy \
  --test-labels test-labels.npy --data.mean 0.1 --data.std 0.3 >"$H_DIR/wide.log" 2>&1
st=$?
[ "$st" = 78 ] || h_fail "a model of another input shape: expected exit 78, got $st"
grep -q "train-images.npy: examples are 1 x 28 x 28 .* but $H_DIR/wide.model takes 1 x 32 x 32" "$H_DIR/wide.log" ||
  h_fail "the shape message does not name the file and both shapes: $(tail -n 2 "$H_DIR/wide.log")"
h_pass "npy, IDX and gzip IDX files train exactly like the built-in set (acc $acc%), normalization computed and logged, kfac-ps too, a shape mismatch exits 78"
