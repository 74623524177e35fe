#!/bin/sh
# tests/integration/25-curve.sh — CURVE authentication (docs/security.md).
#   0. kfac-keygen writes the secret key with mode 0600, names the public
#      key OUT@HOST.pub (this host's short name; --host NAME, --host none:
#      OUT.pub), and refuses to overwrite a pair (without --force), to write
#      into a missing folder, or a host part that is no file name.
#   1. kfac-ps refuses a non-loopback bind without keys: exit 78 and a
#      message naming the fixes ([security] server_secret_key, a loopback
#      address, insecure = true); with insecure = true it serves and warns.
#   2. A deterministic K-FAC schedule (stats = sync, every step waits for
#      fresh inverses: see 55-deterministic.sh) trains 30 steps of the MNIST
#      MLP twice on 127.0.0.1: once without keys, once with CURVE (keys from
#      kfac-keygen, allowlists for the workers as a folder and for invertd as
#      a file) while
#        - kfac-poke with a key in no allowlist tries to send 3 frames: every
#          handshake is refused, nothing is sent, kfac-ps logs the refusal
#          with the key and a count; kfac-poke without keys neither gets
#          through, and kfac-ps logs the failed handshake;
#        - a kfac-invertd started with a listed *worker* key says Hello as
#          invertd: kfac-ps refuses it (logged), and it exits 1 with the
#          reason.
#        - a worker whose key is not listed yet, told not to wait for it
#          ([cluster] admit_wait_s = 0), is refused and exits 78 at once;
#          its key copied into the allowlist folder and SIGHUP to kfac-ps
#          (reload; the folder watch of 27-allowlist-watch.sh reloads it
#          too), it joins.
#      Passes when the two runs' train_loss columns are identical (the
#      intruders changed nothing) and every CURVE client was accepted.
#   3. deploy/kfac-launch --curve runs a short cluster with a throwaway key
#      set: kfac-ps says CURVE is on and every daemon exits cleanly.
# Skipped (77) when libzmq has no CURVE (kfac-keygen says so).
. tests/integration/harness.inc
h_init 25-curve
STEPS=30
for b in kfac-keygen kfac-poke; do [ -x "$BUILD/$b" ] || h_fail "missing $BUILD/$b"; done
K=$H_DIR/keys
mkdir -m 700 "$K" "$K/workers" "$K/later" || h_fail "mkdir"
if ! "$BUILD/kfac-keygen" --out "$K/ps" --host none >"$H_DIR/keygen.log" 2>&1; then
  grep -q "no CURVE support" "$H_DIR/keygen.log" && h_skip "this libzmq has no CURVE ($(cat "$H_DIR/keygen.log"))"
  h_fail "kfac-keygen failed: $(cat "$H_DIR/keygen.log")"
fi
for n in workers/worker-1 later/worker-2 invertd-1 intruder; do
  "$BUILD/kfac-keygen" --out "$K/$n" --host none >>"$H_DIR/keygen.log" 2>&1 || h_fail "kfac-keygen --out $K/$n failed"
done
# The public key's default name carries this host's short name.
h=$(hostname)
h=${h%%.*}
"$BUILD/kfac-keygen" --out "$K/hosted" >>"$H_DIR/keygen.log" 2>&1 || h_fail "kfac-keygen --out $K/hosted failed"
[ -f "$K/hosted@$h.pub" ] && [ ! -e "$K/hosted.pub" ] && [ -f "$K/hosted.secret" ] ||
  h_fail "kfac-keygen --out $K/hosted did not write hosted@$h.pub and hosted.secret: $(ls "$K")"
"$BUILD/kfac-keygen" --out "$K/named" --host node7 >>"$H_DIR/keygen.log" 2>&1 && [ -f "$K/named@node7.pub" ] ||
  h_fail "kfac-keygen --host node7 did not write named@node7.pub: $(ls "$K")"
"$BUILD/kfac-keygen" --out "$K/bad" --host ../x >"$H_DIR/kg.log" 2>&1
[ $? = 2 ] && [ ! -e "$K/bad.secret" ] || h_fail "kfac-keygen --host ../x was not refused as a usage error"
[ "$(stat -c %a "$K/ps.secret")" = 600 ] || h_fail "kfac-keygen wrote $K/ps.secret with mode $(stat -c %a "$K/ps.secret")"
# kfac-keygen's refusals: an existing pair (exit 1, names --force), a missing folder, no --out (2)
before=$(cat "$K/ps.pub")
"$BUILD/kfac-keygen" --out "$K/ps" --host none >"$H_DIR/kg.log" 2>&1 && h_fail "kfac-keygen overwrote an existing key pair"
grep -q -- "--force" "$H_DIR/kg.log" || h_fail "kfac-keygen's refusal to overwrite does not name --force: $(cat "$H_DIR/kg.log")"
[ "$(cat "$K/ps.pub")" = "$before" ] || h_fail "kfac-keygen changed $K/ps.pub while refusing"
"$BUILD/kfac-keygen" --out "$K/nowhere/x" >"$H_DIR/kg.log" 2>&1 && h_fail "kfac-keygen wrote into a missing folder"
grep -q "mkdir -m 755 -p $K/nowhere" "$H_DIR/kg.log" || h_fail "no mkdir hint: $(cat "$H_DIR/kg.log")"
"$BUILD/kfac-keygen" >/dev/null 2>&1
[ $? = 2 ] || h_fail "kfac-keygen without --out is not a usage error (2)"

# ---- 1. no keys, not loopback ------------------------------------------------------
port=$(h_port) || exit 1
"$BUILD/kfac-ps" --model.file models/mnist-mlp.model --run.out_dir "$H_DIR/open" --ps.bind "tcp://0.0.0.0:$port" \
  >"$H_DIR/open.log" 2>&1
st=$?
[ "$st" = 78 ] || h_fail "kfac-ps bound tcp://0.0.0.0 without keys: exit $st, expected 78"
for w in "server_secret_key" "tcp://127.0.0.1" "insecure = true" "docs/security.md"; do
  grep -qF "$w" "$H_DIR/open.log" || h_fail "the refusal does not mention '$w': $(cat "$H_DIR/open.log")"
done
# ... unless told that the network is trusted: it serves, with a warning.
h_start insecure "$BUILD/kfac-ps" --model.file models/mnist-mlp.model --run.out_dir "$H_DIR/insecure" \
  --ps.bind "tcp://0.0.0.0:$port" --security.insecure true
h_wait_log "$H_DIR/insecure.log" "listening on" 30 || h_fail "kfac-ps with insecure = true does not listen"
grep -q "insecure = true: tcp://0.0.0.0:$port is open to anyone" "$H_DIR/insecure.log" || h_fail "no warning with insecure = true"
kill -TERM "$H_PID"
h_wait "$H_PID" 20
[ "$H_STATUS" = 0 ] || h_fail "kfac-ps with insecure = true exited $H_STATUS after SIGTERM"

# ---- 2. the same run without and with CURVE -----------------------------------------
cat >"$H_DIR/run.ini" <<EOF2
[run]
seed = 7
steps = $STEPS
eval_every = 1000
eval_n = 200
[model]
file = models/mnist-mlp.model
[data]
batch = 16
train_n = 2000
[kfac]
stats = sync
max_inverse_staleness = 0
[cluster]
workers = 2
statsd = 0
invertd = 1
[ps]
progress_every = 5
EOF2
cat >"$H_DIR/secure.ini" <<EOF2
[security]
server_secret_key = $K/ps.secret
server_public_key = $K/ps.pub
allow_workers = $K/workers
allow_invertd = $K/invertd-1.pub
EOF2
# run NAME SECURE(0|1): kfac-ps, 2 workers and 1 invertd started by hand
run() {
  name=$1
  port=$(h_port) || exit 1
  ep=tcp://127.0.0.1:$port
  sec=""
  [ "$2" = 1 ] && sec="--security.server_secret_key $K/ps.secret --security.server_public_key $K/ps.pub
    --security.allow_workers $K/workers --security.allow_invertd $K/invertd-1.pub"
  # shellcheck disable=SC2086
  h_start "$name-ps" "$BUILD/kfac-ps" --config "$H_DIR/run.ini" --run.out_dir "$H_DIR/$name" --ps.bind "$ep" $sec
  ps=$H_PID
  h_wait_log "$H_DIR/$name-ps.log" "listening on" 30 || h_fail "$name: kfac-ps does not listen"
  if [ "$2" = 1 ]; then
    # Before the clients join (the first step waits for them) and while
    # they train: a key in no allowlist, refused in the handshake ...
    h_start poke "$BUILD/kfac-poke" --endpoint "$ep" --count 3 --seed 5 --wait_ms 300 \
      --client_secret_key "$K/intruder.secret" --server_public_key "$K/ps.pub"
    poke=$H_PID
    # ... a client without keys, which fails the handshake before ZAP ...
    h_start poke-nokey "$BUILD/kfac-poke" --endpoint "$ep" --count 2 --seed 6 --wait_ms 300
    poke_nokey=$H_PID
    # ... and a listed worker key claiming the invertd role.
    h_start "$name-rogue" "$BUILD/kfac-invertd" --config "$H_DIR/run.ini" --cluster.ps "$ep" --invertd.id 9 \
      --security.client_secret_key "$K/workers/worker-1.secret" --security.server_public_key "$K/ps.pub"
    rogue=$H_PID
    h_wait_log "$H_DIR/$name-rogue.log" "refused" 20 || h_fail "the kfac-invertd with a worker key was not refused"
    # worker-2's key is not listed yet: refused in the handshake, it stops
    # with 78 (admit_wait_s = 0: no waiting); listed and reloaded (SIGHUP),
    # it is admitted below.
    h_start "$name-early-worker-2" "$BUILD/kfac-worker" --config "$H_DIR/run.ini" --cluster.ps "$ep" --worker.id 2 \
      --cluster.admit_wait_s 0 \
      --security.client_secret_key "$K/later/worker-2.secret" --security.server_public_key "$K/ps.pub"
    h_wait "$H_PID" 20
    [ "$H_STATUS" = 78 ] || h_fail "a worker with a key not yet listed exited $H_STATUS, expected 78"
    grep -q "refused this daemon's CURVE key" "$H_DIR/$name-early-worker-2.log" ||
      h_fail "the refused worker does not say why: $(tail -n 3 "$H_DIR/$name-early-worker-2.log")"
    cp "$K/later/worker-2.pub" "$K/workers/" || h_fail "cp"
    kill -HUP "$ps"
    h_wait_log "$H_DIR/$name-ps.log" "allowlists reloaded \(SIGHUP\): 2 worker, 0 statsd and 1 invertd keys" 10 ||
      h_fail "kfac-ps did not reload its allowlists on SIGHUP"
  fi
  for i in 1 2; do
    csec=""
    wk=$K/workers/worker-1.secret
    [ "$i" = 2 ] && wk=$K/later/worker-2.secret
    [ "$2" = 1 ] && csec="--security.client_secret_key $wk --security.server_public_key $K/ps.pub"
    # shellcheck disable=SC2086
    h_start "$name-worker-$i" "$BUILD/kfac-worker" --config "$H_DIR/run.ini" --cluster.ps "$ep" --worker.id "$i" $csec
  done
  csec=""
  [ "$2" = 1 ] && csec="--security.client_secret_key $K/invertd-1.secret --security.client_public_key $K/invertd-1.pub
    --security.server_public_key $K/ps.pub"
  # shellcheck disable=SC2086
  h_start "$name-invertd-1" "$BUILD/kfac-invertd" --config "$H_DIR/run.ini" --cluster.ps "$ep" --invertd.id 1 $csec
  if [ "$2" = 1 ]; then
    h_wait "$poke" 30
    [ "$H_STATUS" = 1 ] || h_fail "kfac-poke with an unlisted key exited $H_STATUS, expected 1 (nothing sent)"
    grep -q "(0 frames, 3 could not be sent)" "$H_DIR/poke.log" || h_fail "the unlisted key got frames through: $(cat "$H_DIR/poke.log")"
    grep -Eq "handshakes: [1-9][0-9]* refused" "$H_DIR/poke.log" || h_fail "kfac-poke saw no refused handshake: $(cat "$H_DIR/poke.log")"
    ikey=$(grep -v '^#' "$K/intruder.pub")
    h_wait_log "$H_DIR/$name-ps.log" "refused a connection from 127.0.0.1: its CURVE key .* is in no allowlist .*refused so far" 10 ||
      h_fail "kfac-ps did not log the unlisted key"
    grep -qF -- "$ikey" "$H_DIR/$name-ps.log" || h_fail "kfac-ps's refusal does not name the key $ikey"
    h_wait "$poke_nokey" 30
    [ "$H_STATUS" = 1 ] || h_fail "kfac-poke without keys exited $H_STATUS, expected 1 (nothing sent)"
    grep -q "(0 frames, 2 could not be sent)" "$H_DIR/poke-nokey.log" || h_fail "a client without keys got frames through"
    h_wait_log "$H_DIR/$name-ps.log" "refused a connection that failed the CURVE handshake .*a client without keys.* so far" 10 ||
      h_fail "kfac-ps did not log the client without keys"
    h_wait "$rogue" 20
    [ "$H_STATUS" = 1 ] || h_fail "a kfac-invertd with a worker key exited $H_STATUS, expected 1 (refused)"
    grep -q "refused this kfac-invertd: this CURVE key is listed for the worker role" "$H_DIR/$name-rogue.log" ||
      h_fail "the refused kfac-invertd does not say why: $(tail -n 3 "$H_DIR/$name-rogue.log")"
    grep -q "refused a hello claiming the invertd role from key .* which is listed for worker" "$H_DIR/$name-ps.log" ||
      h_fail "kfac-ps did not log the role refusal"
  fi
  h_wait "$ps" 120
  [ "$H_STATUS" = 0 ] || h_fail "$name: kfac-ps exited with status $H_STATUS (124: still running after 120 s)"
  f=$H_DIR/$name/steps.csv
  rows=$(awk 'NR > 1' "$f" | wc -l)
  [ "$rows" -eq "$STEPS" ] || h_fail "$name: steps.csv has $rows steps, expected $STEPS"
  cs=$(h_csv_col "$f" step) || h_fail "$cs"
  cl=$(h_csv_col "$f" train_loss) || h_fail "$cl"
  awk -F, -v s="$cs" -v l="$cl" '{ print $s "," $l }' "$f" >"$H_DIR/loss-$name"
}
run plain 0
run curve 1
grep -qF "CURVE on: kfac-ps public key $(grep -v '^#' "$K/ps.pub")" "$H_DIR/curve-ps.log" || h_fail "kfac-ps did not report CURVE on"
grep -Eq "CURVE: [4-9] handshakes accepted, [2-9][0-9]* refused \(unlisted key\), [1-9][0-9]* messages refused .*, [1-9][0-9]* failed handshakes" "$H_DIR/curve-ps.log" ||
  h_fail "kfac-ps's CURVE summary is not as expected: $(grep 'CURVE:' "$H_DIR/curve-ps.log")"
cmp -s "$H_DIR/loss-plain" "$H_DIR/loss-curve" ||
  h_fail "the CURVE run with intruders differs from the plain run: $(diff "$H_DIR/loss-plain" "$H_DIR/loss-curve" | head -n 4 | tr '\n' ' ')"

# ---- 3. the launcher's throwaway key set ------------------------------------------------
port=$(h_port) || exit 1
h_start launch env KFAC_BIN="$BUILD" sh deploy/kfac-launch "$H_DIR/run.ini" --curve --port "$port" --nice 0 --quiet \
  --run.out_dir "$H_DIR/launch" --steps 10
h_wait "$H_PID" 90
[ "$H_STATUS" = 0 ] || h_fail "kfac-launch --curve exited with status $H_STATUS"
grep -q "CURVE on: kfac-ps public key" "$H_DIR/launch/logs/ps.log" || h_fail "kfac-launch --curve: kfac-ps did not use CURVE"
grep -q "CURVE: 3 handshakes accepted, 0 refused" "$H_DIR/launch/logs/ps.log" || h_fail "kfac-launch --curve: not every client was accepted"
grep -q "4 of 4 daemons exited cleanly" "$H_DIR/launch.log" || h_fail "kfac-launch --curve: not every daemon exited cleanly"
h_pass "bind refused without keys (78); CURVE run identical to the plain one ($STEPS steps) with an unlisted key, a role-swapped key and a keyless client refused, a key listed by SIGHUP admitted; kfac-launch --curve"
