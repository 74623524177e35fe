#!/bin/sh
# tests/integration/17-exit-codes.sh — configuration errors found at start-up
# exit 78 (EX_CONFIG) with a message naming the file, so that systemd
# (RestartPreventExitStatus=2 78) and the launcher do not retry them:
#   1. kfac-ps and kfac-train with a missing [model] file: 78, the path named;
#   2. kfac-ps and kfac-train with a missing data file ([data] dir empty): 78;
#   3. kfac-worker and kfac-statsd whose own [data] dir lacks the training
#      files (they load them after kfac-ps welcomes them): 78, path named;
#   4. kfac-invertd reads neither file (the model comes from kfac-ps in
#      Welcome): a missing [model] file does not stop it;
#   5. a bad option is still a usage error (2), for every program;
#   6. the launcher reports kfac-ps's 78 as a configuration error, exit 78.
. tests/integration/harness.inc
h_init 17-exit-codes
H_T0=$(date +%s)
missing=$H_DIR/no-such.model
mkdir -p "$H_DIR/empty"
port=$(h_port) || h_fail "no free port"

# 1, 2: kfac-ps and kfac-train.
for prog in kfac-ps kfac-train; do
  if [ "$prog" = kfac-ps ]; then
    h_start "$prog-model" "$BUILD/$prog" --model.file "$missing" --run.out-dir "$H_DIR/out-ps" --bind "tcp://127.0.0.1:$port"
  else
    h_start "$prog-model" "$BUILD/$prog" --model.file "$missing" --run.out-dir "$H_DIR/out-train" --steps 1
  fi
  h_wait "$H_PID" 30
  [ "$H_STATUS" = 78 ] || h_fail "$prog with a missing model file: expected exit 78, got $H_STATUS"
  grep -q "$missing" "$H_DIR/$prog-model.log" || h_fail "$prog did not name $missing"
done
h_start ps-data "$BUILD/kfac-ps" --model.file models/mnist-mlp.model --data.dir "$H_DIR/empty" \
  --run.out-dir "$H_DIR/out-ps-data" --bind "tcp://127.0.0.1:$port"
h_wait "$H_PID" 30
[ "$H_STATUS" = 78 ] || h_fail "kfac-ps with a missing data file: expected exit 78, got $H_STATUS"
grep -q "$H_DIR/empty/mnist/t10k-images-idx3-ubyte" "$H_DIR/ps-data.log" || h_fail "kfac-ps did not name the missing test images"
h_start train-data "$BUILD/kfac-train" --model.file models/mnist-mlp.model --data.dir "$H_DIR/empty" \
  --run.out-dir "$H_DIR/out-train-data" --steps 1
h_wait "$H_PID" 30
[ "$H_STATUS" = 78 ] || h_fail "kfac-train with a missing data file: expected exit 78, got $H_STATUS"
grep -q "$H_DIR/empty/mnist/train-images-idx3-ubyte" "$H_DIR/train-data.log" || h_fail "kfac-train did not name the missing file"

# 3: the clients, welcomed by a kfac-ps that has its data.
cat >"$H_DIR/run.ini" <<EOF
[run]
out_dir = $H_DIR/run
steps = 50
eval_every = 1000
eval_n = 200
[model]
file = models/mnist-mlp.model
[data]
batch = 16
[cluster]
ps = tcp://127.0.0.1:$port
workers = 1
[ps]
bind = tcp://127.0.0.1:$port
EOF
h_start ps "$BUILD/kfac-ps" --config "$H_DIR/run.ini"
ps_pid=$H_PID
h_wait_log "$H_DIR/ps.log" "listening on" 30 || h_fail "kfac-ps did not start"
for prog in kfac-worker kfac-statsd; do
  h_start "$prog" "$BUILD/$prog" --config "$H_DIR/run.ini" --data.dir "$H_DIR/empty" --model.file "$missing"
  h_wait "$H_PID" 30
  [ "$H_STATUS" = 78 ] || h_fail "$prog with a missing data file: expected exit 78, got $H_STATUS"
  grep -q "$H_DIR/empty/mnist/train-images-idx3-ubyte" "$H_DIR/$prog.log" || h_fail "$prog did not name the missing file"
done

# 4: kfac-invertd does not read the model file: it is welcomed and works.
h_start invertd "$BUILD/kfac-invertd" --config "$H_DIR/run.ini" --model.file "$missing"
inv_pid=$H_PID
h_wait_log "$H_DIR/invertd.log" "welcomed by kfac-ps" 30 || h_fail "kfac-invertd with a missing (unused) model file was not welcomed"
kill -TERM "$inv_pid"
h_wait "$inv_pid" 20
[ "$H_STATUS" = 0 ] || h_fail "kfac-invertd: expected exit 0 after SIGTERM, got $H_STATUS"
kill -TERM "$ps_pid"
h_wait "$ps_pid" 20

# 5: usage errors stay 2.
for prog in kfac-ps kfac-worker kfac-statsd kfac-invertd kfac-train; do
  "$BUILD/$prog" --no-such-option 1 >"$H_DIR/usage-$prog.log" 2>&1
  st=$?
  [ "$st" = 2 ] || h_fail "$prog --no-such-option: expected exit 2, got $st"
done

# 6: the launcher.
sed "s|^file = .*|file = $missing|; s|^bind = .*|bind = tcp://127.0.0.1:0|" "$H_DIR/run.ini" >"$H_DIR/launch.ini"
# (--force: the steps above left a run in out_dir; the model file must be what fails)
h_start launch env KFAC_BIN="$BUILD" sh deploy/kfac-launch "$H_DIR/launch.ini" --port auto --quiet --force
h_wait "$H_PID" 60
[ "$H_STATUS" = 78 ] || h_fail "the launcher with a missing model file: expected exit 78, got $H_STATUS"
grep -q "configuration error" "$H_DIR/launch.log" || h_fail "the launcher did not call it a configuration error"
h_pass "missing model and data files exit 78 in kfac-ps, kfac-worker, kfac-statsd and kfac-train (named in the message), kfac-invertd ignores the model file, usage errors exit 2, the launcher exits 78"
