#!/bin/sh
# tests/integration/56-resume.sh — a run stopped with SIGTERM and resumed
# from its checkpoint repeats the uninterrupted run step for step. The
# deterministic configuration of 55-deterministic.sh (statistics from the
# workers, stats = sync; all inverses every 5 steps, waited for: refresh =
# every, inverse_every = 5, max_inverse_staleness = 4; the round summed in
# rank order), with the empirical Fisher (the workers' sampled-label stream
# is not part of their data position, see docs/operations.md), 3 gradient
# workers and 1 inverse daemon, 30 steps of the MNIST MLP, a checkpoint
# every 10 steps. Run A goes through; run B is stopped with SIGTERM once
# steps.csv has at least 12 rows (kfac-ps writes a checkpoint at whatever
# step it is, mid-round included, and every client exits), then every
# daemon is started again with --resume. Passes when, step by step, B's
# training loss equals A's as printed (for a step written twice, before
# the stop and after the resume, the later row counts), B resumed from the
# SIGTERM checkpoint with the 3 workers' histories against kfac-ps's
# reference gradient (on, with a bound no worker reaches: record DRFT),
# and the final parameters (the PRMS record of both
# runs' checkpoint of step 30, bytes compared) are identical. Then run B's
# newest checkpoint is damaged: --resume reports it and uses the one
# before; with every file damaged kfac-ps exits 1 instead of starting
# over.
. tests/integration/harness.inc
h_init 56-resume
STEPS=30
cat >"$H_DIR/run.ini" <<EOF2
[run]
seed = 11
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
fisher = empirical
refresh = every
inverse_every = 5
max_inverse_staleness = 4
[cluster]
workers = 3
statsd = 0
invertd = 1
[ps]
progress_every = 10
heldout_n = 256
heldout_every = 1
heldout_z = 1e9
[checkpoint]
every = 10
keep = 10
EOF2

# cluster NAME PORT [kfac-ps options...]: kfac-ps, 3 workers, 1 invertd;
# PS_PID, and the clients' pids in CLIENT_PIDS.
cluster() {
  name=$1 port=$2
  shift 2
  h_start "$name-ps" "$BUILD/kfac-ps" --config "$H_DIR/run.ini" --bind "tcp://127.0.0.1:$port" \
    --out-dir "$H_DIR/$name" "$@"
  PS_PID=$H_PID
  CLIENT_PIDS=""
  for i in 0 1 2; do
    h_start "$name-worker$i" "$BUILD/kfac-worker" --config "$H_DIR/run.ini" --cluster.ps "tcp://127.0.0.1:$port" \
      --worker.id "$i"
    CLIENT_PIDS="$CLIENT_PIDS $H_PID"
  done
  h_start "$name-invertd" "$BUILD/kfac-invertd" --config "$H_DIR/run.ini" --cluster.ps "tcp://127.0.0.1:$port"
  CLIENT_PIDS="$CLIENT_PIDS $H_PID"
}

# losses FILE: "step,train_loss" per step, the last row of each step
losses() {
  cs=$(h_csv_col "$1" step) || h_fail "$cs"
  cl=$(h_csv_col "$1" train_loss) || h_fail "$cl"
  awk -F, -v s="$cs" -v l="$cl" 'NR > 1 { v[$s] = $l; if ($s > m) m = $s } END { for (i = 1; i <= m; i++) print i "," v[i] }' "$1"
}

# params FILE: the parameters in a checkpoint file (ps/ckpt.h: the 32-byte
# header, the META record (16 + 148 bytes), then PRMS's 16-byte record
# header and n_params floats)
params() { tail -c +213 "$1" | head -c "$NP4"; }

port=$(h_port) || exit 1
cluster a "$port"
h_wait "$PS_PID" 120
[ "$H_STATUS" = 0 ] || h_fail "run A: kfac-ps exited with status $H_STATUS (124: still running after 120 s)"
[ "$(h_rows "$H_DIR/a/steps.csv")" -eq "$STEPS" ] || h_fail "run A: steps.csv has $(h_rows "$H_DIR/a/steps.csv") rows"

port=$(h_port) || exit 1
cluster b "$port"
if ! h_wait_rows "$H_DIR/b/steps.csv" 12 120 "$PS_PID"; then
  kill -0 "$PS_PID" 2>/dev/null || h_fail "run B: kfac-ps exited before it was stopped"
  h_fail "run B: fewer than 12 steps after 120 s"
fi
kill -TERM "$PS_PID"
h_wait "$PS_PID" 30
[ "$H_STATUS" = 0 ] || h_fail "run B: kfac-ps exited with status $H_STATUS after SIGTERM"
stop=$(sed -n 's/.*checkpoint at step \([0-9]*\) (SIGTERM).*/\1/p' "$H_DIR/b-ps.log")
[ -n "$stop" ] || h_fail "run B: no checkpoint written on SIGTERM"
# the clients read Shutdown and exit (before the next cluster starts)
for p in $CLIENT_PIDS; do
  h_wait "$p" 30
  [ "$H_STATUS" = 0 ] || h_fail "run B: a client exited with status $H_STATUS after kfac-ps's Shutdown (124: still running after 30 s)"
done

port=$(h_port) || exit 1
cluster b2 "$port" --out-dir "$H_DIR/b" --resume
h_wait "$PS_PID" 120
[ "$H_STATUS" = 0 ] || h_fail "run B (resumed): kfac-ps exited with status $H_STATUS"
grep -q "resumed from .*ckpt-0*$stop.kfc: step $stop.*, 3 workers' histories against the reference gradient" "$H_DIR/b2-ps.log" ||
  h_fail "run B did not resume from the SIGTERM checkpoint of step $stop with the 3 workers' histories: $(grep "resumed from" "$H_DIR/b2-ps.log")"

losses "$H_DIR/a/steps.csv" >"$H_DIR/loss-a"
losses "$H_DIR/b/steps.csv" >"$H_DIR/loss-b"
[ "$(wc -l <"$H_DIR/loss-a")" -eq "$STEPS" ] || h_fail "run A: not $STEPS steps"
if ! cmp -s "$H_DIR/loss-a" "$H_DIR/loss-b"; then
  h_fail "the resumed run differs from the uninterrupted one (stopped at step $stop): $(diff "$H_DIR/loss-a" "$H_DIR/loss-b" | head -n 6 | tr '\n' ' ')"
fi
head -n 1 "$H_DIR/b/steps.csv" | grep -q '^step,' || h_fail "run B's steps.csv lost its header"
[ "$(grep -c '^step,' "$H_DIR/b/steps.csv")" = 1 ] || h_fail "run B's steps.csv has a second header (truncated or rewritten?)"

ca=$H_DIR/a/checkpoints/ckpt-0000000030.kfc
cb=$H_DIR/b/checkpoints/ckpt-0000000030.kfc
[ -r "$ca" ] && [ -r "$cb" ] || h_fail "no checkpoint of step 30 in both runs"
NP4=$(( (784 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10) * 4 ))
params "$ca" >"$H_DIR/pa"
params "$cb" >"$H_DIR/pb"
[ "$(wc -c <"$H_DIR/pa")" -eq "$NP4" ] || h_fail "could not read the parameters of $ca"
cmp -s "$H_DIR/pa" "$H_DIR/pb" || h_fail "the final parameters differ"
# A damaged newest checkpoint is reported and the one before it is used:
# flip a byte of run B's checkpoint of step 30 and resume it as a run of
# 20 steps (the checkpoint before, of step 20 or more, then says the run
# is over: exit 0).
prev=$(ls "$H_DIR/b/checkpoints" | sort | tail -n 2 | head -n 1)   # the one before ckpt-0000000030.kfc
printf 'X' | dd of="$cb" bs=1 seek=5000 conv=notrunc 2>/dev/null
h_start c-ps "$BUILD/kfac-ps" --config "$H_DIR/run.ini" --bind "tcp://127.0.0.1:$(h_port)" --out-dir "$H_DIR/b" \
  --resume --steps 20
h_wait "$H_PID" 30
[ "$H_STATUS" = 0 ] || h_fail "resuming past a damaged checkpoint: kfac-ps exited with status $H_STATUS"
grep -q "checkpoint .*ckpt-0000000030.kfc: the contents' checksum does not match" "$H_DIR/c-ps.log" ||
  h_fail "the damaged checkpoint of step 30 was not reported"
grep -q "resumed from .*$prev: step" "$H_DIR/c-ps.log" || h_fail "the checkpoint before it ($prev) was not used"
# every file damaged: kfac-ps refuses to start over from step 0
for f in "$H_DIR"/b/checkpoints/ckpt-*.kfc; do printf 'X' | dd of="$f" bs=1 seek=100 conv=notrunc 2>/dev/null; done
h_start d-ps "$BUILD/kfac-ps" --config "$H_DIR/run.ini" --bind "tcp://127.0.0.1:$(h_port)" --out-dir "$H_DIR/b" --resume
h_wait "$H_PID" 30
[ "$H_STATUS" = 1 ] || h_fail "with every checkpoint damaged kfac-ps exited with status $H_STATUS, expected 1"
grep -q "none of the [0-9]* checkpoint files in .* can be used" "$H_DIR/d-ps.log" || h_fail "no reason given for not starting"
h_pass "stopped at step $stop, resumed: the same training loss at all $STEPS steps and the same final parameters; a damaged checkpoint falls back to the one before; the workers' reference-gradient histories resumed"
