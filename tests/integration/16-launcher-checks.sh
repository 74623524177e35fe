#!/bin/sh
# tests/integration/16-launcher-checks.sh — the launcher never starts a run
# that a daemon would reject, and never goes on without a daemon that failed
# at start-up:
#   1. a typo in [invertd] (a key only kfac-invertd checks): exit 2 before
#      anything starts, the daemon's error with its suggestion is shown;
#   2. --check: 0 on a good configuration, 2 on the bad one;
#   2a. --check runs the checks across options a start would (aggregate =
#      median with 2 workers, kind = sgd with max_inverse_staleness, a
#      staleness bound that sync statistics cannot hold, a bad log_level):
#      exit 2 with the message naming the field, the same message kfac-ps
#      gives at start-up, and kfac-multiprog refuses them too;
#   3. a misspelt launcher option gets a "did you mean";
#   4. a worker that fails at start-up (device = cuda with every GPU hidden
#      by CUDA_VISIBLE_DEVICES=-1, so on a GPU host too) stops the whole
#      cluster at once, exit 1, instead of a run that waits for it.
. tests/integration/harness.inc
h_init 16-launcher-checks
cat >"$H_DIR/bad.ini" <<EOF2
[model]
file = models/mnist-mlp.model
[run]
out_dir = $H_DIR/bad
[invertd]
threds = 2
EOF2
h_start bad env KFAC_BIN="$BUILD" sh deploy/kfac-launch "$H_DIR/bad.ini" --port auto --quiet
h_wait "$H_PID" 60
[ "$H_STATUS" = 2 ] || h_fail "a typo in [invertd]: expected exit 2, got $H_STATUS"
grep -q "kfac-invertd rejects the configuration" "$H_DIR/bad.log" || h_fail "the launcher did not name kfac-invertd"
grep -q "did you mean 'threads'" "$H_DIR/bad.log" || h_fail "the daemon's suggestion was not shown"
[ ! -d "$H_DIR/bad/logs" ] || h_fail "daemons were started (logs folder exists)"

cat >"$H_DIR/good.ini" <<EOF2
[model]
file = models/mnist-mlp.model
[run]
out_dir = $H_DIR/good
steps = 20
eval_every = 1000
eval_n = 200
[data]
train_n = 2000
batch = 16
[cluster]
workers = 1
statsd = 0
invertd = 1
EOF2
KFAC_BIN="$BUILD" sh deploy/kfac-launch "$H_DIR/good.ini" --check >"$H_DIR/check-good.log" 2>&1 ||
  h_fail "--check rejected a good configuration: $(cat "$H_DIR/check-good.log")"
KFAC_BIN="$BUILD" sh deploy/kfac-launch "$H_DIR/bad.ini" --check >"$H_DIR/check-bad.log" 2>&1
[ $? = 2 ] || h_fail "--check accepted the [invertd] typo"
# What kfac-ps would refuse at start-up, --check refuses, with its message.
for case in "--aggregate median --workers 3 --cluster.workers 2|[ps] aggregate = median needs [cluster] workers >= 3" \
  "--optimizer.kind sgd --max-inverse-staleness 0|[kfac] max_inverse_staleness = 0 needs [optimizer] kind = kfac" \
  "--kfac.stats sync --stats-every 5 --max-inverse-staleness 1|[kfac] max_inverse_staleness = 1 cannot hold with stats = sync" \
  "--log-level loud|[run] log_level: expected error, warn, info or debug"; do
  args=${case%%|*}
  want=${case#*|}
  # shellcheck disable=SC2086
  KFAC_BIN="$BUILD" sh deploy/kfac-launch "$H_DIR/good.ini" --check $args >"$H_DIR/cross.log" 2>&1
  st=$?
  [ "$st" = 2 ] || h_fail "--check $args: expected exit 2, got $st: $(cat "$H_DIR/cross.log")"
  grep -qF "$want" "$H_DIR/cross.log" || h_fail "--check $args: no '$want' in: $(cat "$H_DIR/cross.log")"
  # shellcheck disable=SC2086
  KFAC_BIN="$BUILD" "$BUILD/kfac-ps" --config "$H_DIR/good.ini" $args >"$H_DIR/cross-ps.log" 2>&1
  st=$?
  [ "$st" = 2 ] && grep -qF "$want" "$H_DIR/cross-ps.log" ||
    h_fail "kfac-ps $args at start-up: expected exit 2 with '$want', got $st: $(cat "$H_DIR/cross-ps.log")"
done
SLURM_JOB_NODELIST=node1 KFAC_BIN="$BUILD" sh deploy/slurm/kfac-multiprog "$H_DIR/good.ini" --ps.aggregate median \
  --cluster.workers 2 >/dev/null 2>"$H_DIR/mp.log"
[ $? = 2 ] && grep -qF "aggregate = median needs" "$H_DIR/mp.log" ||
  h_fail "kfac-multiprog accepted aggregate = median with 2 workers: $(cat "$H_DIR/mp.log")"

KFAC_BIN="$BUILD" sh deploy/kfac-launch "$H_DIR/good.ini" --check --stesp 5 >"$H_DIR/typo.log" 2>&1
[ $? = 2 ] || h_fail "a misspelt option was not a usage error"
grep -q "did you mean --steps" "$H_DIR/typo.log" || h_fail "no suggestion for --stesp: $(head -n 1 "$H_DIR/typo.log")"

if "$BUILD/kfac-worker" --help 2>/dev/null | grep -q 'device=' &&
   ! KFAC_BIN="$BUILD" "$BUILD/kfac-worker" --config "$H_DIR/good.ini" --worker.device cuda --dump-config >/dev/null 2>&1; then
  h_fail "--worker.device cuda is not accepted by the parser"
fi
port=$(h_port) || exit 1
t0=$(date +%s)
h_start fail env KFAC_BIN="$BUILD" CUDA_VISIBLE_DEVICES=-1 sh deploy/kfac-launch "$H_DIR/good.ini" --port "$port" --quiet \
  --worker.device cuda
h_wait "$H_PID" 60
[ "$H_STATUS" = 1 ] || h_fail "a worker failing at start-up: expected exit 1, got $H_STATUS"
grep -q "worker-1 failed at start-up: stopping the cluster" "$H_DIR/fail.log" || h_fail "the launcher did not stop on the failed worker"
el=$(($(date +%s) - t0))
[ "$el" -lt 50 ] || h_fail "the launcher took ${el}s to stop"
h_pass "typo stopped before start, --check (checks across options included), suggestions, start-up failure stops the cluster"
