#!/bin/sh
# tests/integration/27-allowlist-watch.sh — keys admitted and revoked
# without a signal (docs/security.md, "Adding and removing keys").
# A CURVE kfac-ps trains the MNIST MLP with one listed worker; its
# [security] allow_invertd folder starts empty.
#   1. kfac-invertd 1 starts with a key in no list ([cluster] admit_wait_s =
#      120): kfac-ps refuses its handshake, and it does not exit: it logs
#      each retry with the pause (1 s, then 2 s) and the time left.
#   2. Its public key is copied into the folder, no SIGHUP: kfac-ps logs one
#      reload naming the folder and "1 added"; the daemon is welcomed and
#      gets a job; kfac-ps logs it joining.
#   3. The key file is removed: kfac-ps logs "1 removed" and lets go of
#      kfac-invertd 1, whose connection was made with that key: it is told
#      why (Refuse) and exits 1, and kfac-ps logs it; a new handshake with
#      that key (kfac-poke) is refused and gets no frame through.
#   4. kfac-invertd 2 with a key never listed and admit_wait_s = 3 gives up
#      after its window: exit 78, saying how long it waited.
# No signal is sent to kfac-ps before its final SIGTERM (it must exit 0).
# Skipped (77) when libzmq has no CURVE (kfac-keygen says so).
. tests/integration/harness.inc
h_init 27-allowlist-watch
for b in kfac-keygen kfac-poke; do [ -x "$BUILD/$b" ] || h_fail "missing $BUILD/$b"; done
K=$H_DIR/keys
mkdir -m 755 "$K" "$K/workers" "$K/invertd" "$K/pending" || h_fail "mkdir"
if ! "$BUILD/kfac-keygen" --out "$K/ps" --host none >"$H_DIR/keygen.log" 2>&1; then
  grep -q "no CURVE support" "$H_DIR/keygen.log" && h_skip "this libzmq has no CURVE ($(cat "$H_DIR/keygen.log"))"
  h_fail "kfac-keygen failed: $(cat "$H_DIR/keygen.log")"
fi
for n in workers/worker-1 pending/invertd-1 pending/invertd-2; do
  "$BUILD/kfac-keygen" --out "$K/$n" >>"$H_DIR/keygen.log" 2>&1 || h_fail "kfac-keygen --out $K/$n failed"
done
# The clients' public keys carry the host's name (kfac-keygen's default).
h=$(hostname)
h=${h%%.*}
[ -f "$K/pending/invertd-1@$h.pub" ] || h_fail "kfac-keygen did not write invertd-1@$h.pub: $(ls "$K/pending")"
port=$(h_port) || exit 1
ep=tcp://127.0.0.1:$port
cat >"$H_DIR/run.ini" <<EOF2
[run]
seed = 7
steps = 100000
eval_every = 100000
eval_n = 200
out_dir = $H_DIR/out
[model]
file = models/mnist-mlp.model
[data]
batch = 16
train_n = 2000
[kfac]
stats = sync
[cluster]
ps = $ep
workers = 1
statsd = 0
invertd = 1
[ps]
bind = $ep
progress_every = 50
[security]
server_public_key = $K/ps.pub
EOF2
h_start ps "$BUILD/kfac-ps" --config "$H_DIR/run.ini" --security.server_secret_key "$K/ps.secret" \
  --security.allow_workers "$K/workers" --security.allow_invertd "$K/invertd"
ps=$H_PID
h_wait_log "$H_DIR/ps.log" "listening on" 30 || h_fail "kfac-ps does not listen"
grep -q "watching 2 allowlist folders" "$H_DIR/ps.log" || h_fail "kfac-ps does not say it watches its allowlist folders"
h_start worker-1 "$BUILD/kfac-worker" --config "$H_DIR/run.ini" --worker.id 1 \
  --security.client_secret_key "$K/workers/worker-1.secret"

# ---- 1. an unlisted key: refused, retried ---------------------------------------------
ikey=$(grep -v '^#' "$K/pending/invertd-1@$h.pub")
h_start invertd-1 "$BUILD/kfac-invertd" --config "$H_DIR/run.ini" --invertd.id 1 --cluster.admit_wait_s 120 \
  --security.client_secret_key "$K/pending/invertd-1.secret"
i1=$H_PID
# (The key is Z85 text, full of regex characters: matched with grep -F.)
h_wait_log "$H_DIR/invertd-1.log" "refused this daemon's CURVE key .*trying again in 2s, 11[0-9]s of \[cluster\] admit_wait_s left" 20 ||
  h_fail "kfac-invertd 1 did not retry its refused key twice (1 s, then 2 s)"
grep -F "trying again in 1s, 120s of [cluster] admit_wait_s left (refusal 1)" "$H_DIR/invertd-1.log" | grep -qF -- "$ikey" ||
  h_fail "the first retry line is not as expected: $(grep 'trying again' "$H_DIR/invertd-1.log" | head -n 1)"
kill -0 "$i1" 2>/dev/null || h_fail "kfac-invertd 1 exited after its key was refused (it must wait for it to be listed)"
grep -qF "refused a connection from 127.0.0.1: its CURVE key $ikey is in no allowlist" "$H_DIR/ps.log" ||
  h_fail "kfac-ps did not log the refused key"
grep -q "welcomed" "$H_DIR/invertd-1.log" && h_fail "kfac-invertd 1 was welcomed before its key was listed"

# ---- 2. listed by copying the key, no signal ----------------------------------------------
cp "$K/pending/invertd-1@$h.pub" "$K/invertd/" || h_fail "cp"
h_wait_log "$H_DIR/ps.log" "allowlists reloaded \(a change in $K/invertd\): 1 worker, 0 statsd and 1 invertd keys; \[security\] allow_invertd = $K/invertd: 1 added, 0 removed" 10 ||
  h_fail "kfac-ps did not reload its allowlists after the key was copied in"
[ "$(grep -c "allowlists reloaded" "$H_DIR/ps.log")" = 1 ] ||
  h_fail "one copied key gave $(grep -c "allowlists reloaded" "$H_DIR/ps.log") reload lines, expected 1 (debounce)"
# The daemon's next try comes at most 30 s later.
h_wait_log "$H_DIR/invertd-1.log" "welcomed by kfac-ps" 40 || h_fail "kfac-invertd 1 was not admitted after its key was listed"
h_wait_log "$H_DIR/invertd-1.log" "first job" 30 || h_fail "the admitted kfac-invertd 1 got no job"
grep -Eq "invertd#[0-9]+ \(pid [0-9]+ on .*\) joined \(asked for id 1;" "$H_DIR/ps.log" || h_fail "kfac-ps did not log kfac-invertd 1 joining"

# ---- 3. revoked by removing the file --------------------------------------------------------
rm "$K/invertd/invertd-1@$h.pub" || h_fail "rm"
h_wait_log "$H_DIR/ps.log" "allowlists reloaded \(a change in $K/invertd\): 1 worker, 0 statsd and 0 invertd keys; \[security\] allow_invertd = $K/invertd: 0 added, 1 removed" 10 ||
  h_fail "kfac-ps did not reload its allowlists after the key was removed"
h_wait "$i1" 20
[ "$H_STATUS" = 1 ] || h_fail "kfac-invertd 1 exited $H_STATUS after its key was removed, expected 1 (refused; 124: still running)"
grep -q "refused this kfac-invertd: this daemon's CURVE key (.*) was removed from the allowlist of the invertd role" \
  "$H_DIR/invertd-1.log" || h_fail "kfac-invertd 1 was not told why: $(tail -n 3 "$H_DIR/invertd-1.log")"
grep -Eq "invertd#[0-9]+ \(pid [0-9]+ on .*\) let go: its CURVE key \(.*\) is no longer listed \(1 clients let go so far\)" \
  "$H_DIR/ps.log" || h_fail "kfac-ps did not log letting kfac-invertd 1 go"
"$BUILD/kfac-poke" --endpoint "$ep" --count 2 --seed 5 --wait_ms 300 \
  --client_secret_key "$K/pending/invertd-1.secret" --server_public_key "$K/ps.pub" >"$H_DIR/poke.log" 2>&1
st=$?
[ "$st" = 1 ] || h_fail "kfac-poke with the removed key exited $st, expected 1 (refused, nothing sent)"
grep -q "(0 frames, 2 could not be sent)" "$H_DIR/poke.log" || h_fail "the removed key got frames through: $(cat "$H_DIR/poke.log")"

# ---- 4. a key never listed: the window ends in 78 ----------------------------------------------
h_start invertd-2 "$BUILD/kfac-invertd" --config "$H_DIR/run.ini" --invertd.id 2 --cluster.admit_wait_s 3 \
  --security.client_secret_key "$K/pending/invertd-2.secret"
h_wait "$H_PID" 30
[ "$H_STATUS" = 78 ] || h_fail "kfac-invertd 2 (key never listed, admit_wait_s = 3) exited $H_STATUS, expected 78"
grep -q "still not listed after 3s (\[cluster\] admit_wait_s)" "$H_DIR/invertd-2.log" ||
  h_fail "kfac-invertd 2 does not say why it gave up: $(tail -n 2 "$H_DIR/invertd-2.log")"
n2=$(grep -c "trying again in" "$H_DIR/invertd-2.log")
[ "$n2" -ge 2 ] || h_fail "kfac-invertd 2 retried $n2 times in its 3 s window, expected 2 or more (1 s, then 2 s)"

kill -TERM "$ps"
h_wait "$ps" 30
[ "$H_STATUS" = 0 ] || h_fail "kfac-ps exited $H_STATUS after SIGTERM"
h_pass "an unlisted kfac-invertd retried, was admitted once its key was copied in (no SIGHUP) and got a job; the key removed, its connection was let go (Refuse, exit 1) and a new handshake with it was refused; a key never listed gave up after admit_wait_s with 78"
