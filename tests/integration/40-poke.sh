#!/bin/sh
# tests/integration/40-poke.sh — hostile input during training. A K-FAC
# cluster (kfac-ps, 2 workers, 1 statsd, 2 invertd, started by
# deploy/kfac-launch) trains the MNIST MLP while tools/kfac-poke sends kfac-ps
# 240 bad frames of every kind: random bytes, truncated envelopes, another
# protocol version, unknown bodies, messages from the wrong role, unwelcomed
# requests, NaN gradients, mis-shaped statistics, bogus job results, empty
# and multi-part frames and 16 MiB frames over the size limit. Passes when
# kfac-ps answered some of them with Refuse and Error, logged rejections,
# at most one line a second per cause (the rest counted), and the run
# still ends cleanly with the accuracy bound of 20-kfac-cluster.sh.
. tests/integration/harness.inc
h_init 40-poke
ACC=0.92
port=$(h_port) || exit 1
cat >"$H_DIR/run.ini" <<EOF2
[run]
seed = 1
steps = 400
eval_every = 100
eval_n = 2000
out_dir = $H_DIR/out
[model]
file = models/mnist-mlp.model
[data]
batch = 64
train_n = 10000
[cluster]
workers = 2
statsd = 1
invertd = 2
[ps]
progress_every = 10
EOF2
[ -x "$BUILD/kfac-poke" ] || h_fail "missing $BUILD/kfac-poke"
h_start launch env KFAC_BIN="$BUILD" sh deploy/kfac-launch "$H_DIR/run.ini" --port "$port" --nice 0 --quiet
launch=$H_PID
h_wait_log "$H_DIR/out/logs/ps.log" "step +20/" 90 || h_fail "training did not reach step 20"
"$BUILD/kfac-poke" --endpoint "tcp://127.0.0.1:$port" --count 240 --seed 42 --interval_ms 1 \
  --oversize_bytes 16777216 --wait_ms 1500 >"$H_DIR/poke.log" 2>&1 || h_fail "kfac-poke failed"
kill -0 "$launch" 2>/dev/null || h_fail "the cluster stopped while being poked"
grep -q "refuse" "$H_DIR/poke.log" || h_fail "no Refuse for another protocol version"
grep -q "error" "$H_DIR/poke.log" || h_fail "no Error reply at all"
grep -Eqi "rejected|refused" "$H_DIR/out/logs/ps.log" || h_fail "kfac-ps logged no rejection"
# Refusal lines are rate-limited: per cause (the text up to its first ':'),
# no two lines less than 0.9 s apart, however fast the frames come.
awk '/ kfac-ps: (rejected|refused) / {
       split(substr($1, 12, 12), hms, ":"); t = hms[1] * 3600 + hms[2] * 60 + hms[3]
       msg = $0; sub(/^.* kfac-ps: /, "", msg); k = msg; sub(/:.*/, "", k)
       if ((k in last) && t - last[k] < 0.9) { printf "%s: %.3f s after the previous one\n", k, t - last[k]; bad = 1 }
       last[k] = t }
     END { exit bad }' "$H_DIR/out/logs/ps.log" >"$H_DIR/flood.txt" ||
  h_fail "refusals are not rate-limited per cause: $(head -n 3 "$H_DIR/flood.txt")"
h_wait "$launch" 150
st=$H_STATUS
[ "$st" = 0 ] || h_fail "kfac-launch exited with status $st after the poking (124: still running)"
grep -q "6 of 6 daemons exited cleanly" "$H_DIR/launch.log" || h_fail "not every daemon exited cleanly"
rows=$(awk 'NR > 1' "$H_DIR/out/steps.csv" | wc -l)
[ "$rows" -eq 400 ] || h_fail "steps.csv has $rows steps, expected 400"
acc=$(h_csv_last "$H_DIR/out/eval.csv" test_acc)
pacc=$(h_csv_last "$H_DIR/out/eval.csv" polyak_acc)
best=$(h_max "$acc" "$pacc")
h_ge "$best" "$ACC" || h_fail "final test accuracy $acc (Polyak $pacc) is below $ACC"
h_pass "$(tail -n 1 "$H_DIR/poke.log"); training finished with accuracy $acc (Polyak $pacc)"
