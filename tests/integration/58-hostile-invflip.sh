#!/bin/sh
# tests/integration/58-hostile-invflip.sh — inverse daemons that answer
# each job with the true damped inverse, its sign flipped along the
# eigenvector of the factor's largest eigenvalue, along a random one, or
# along 4 random ones (tools/kfac-poke --member_kind inv-flip-top,
# inv-flip-random, inv-flip-many; blocks of n < 64 answered honestly, so
# that every refusal is of a flipped inverse). Such an inverse is
# indefinite: a preconditioned step climbs along q. Before, kfac-ps checked
# a result on one random probe x, where the flip leaves a residual of
# 2 |q . x| / ||x||, about 2 / sqrt(n) (0.07 at n = 785, this model's
# largest block, against a tolerance of 0.05 to 0.25): about half the
# flipped inverses were installed. Now every one is refused
# (ps/verify.h: a span of random directions and their images under F, and
# Lanczos steps on H), each refusal counted (the done line's "inverses
# refused N") and logged with the daemon's name and pid, and each daemon
# shut out after 3.
# The MNIST MLP (2 workers, 1 kfac-statsd, 1 honest kfac-invertd), the
# three hostile daemons joining at step 20. The run is as long as the
# attack: once the three daemons have exited and 20 inverses were
# installed after they joined, kfac-ps is stopped with SIGTERM (a fixed
# 600 steps ended before the third refusal of one daemon beside a busy
# CPU, while its result was still being checked). Passes when kfac-ps
# stops cleanly with a row in steps.csv for every step it counts but its
# recoveries; each hostile daemon has 3 results refused and is shut out;
# none of its flipped inverses is installed (by job id in kfac-ps's debug
# log: one that comes back after its job went to another daemon is dropped
# unchecked, neither refused nor installed); the honest daemon never has a
# result refused; and inverses are installed after they joined.
. tests/integration/harness.inc
h_init 58-hostile-invflip
[ -x "$BUILD/kfac-poke" ] || h_fail "missing $BUILD/kfac-poke"
STEPS=20000 # a bound: the test stops the run
h_mlp_cluster "$H_DIR" "$STEPS" seed=4 statsd=1 invertd=1 ini="$H_ASYNC_INI" ps_opts=--run.log_level=debug
HONEST=$INV1
h_wait_steps 20 90
inv0=$(h_csv_last "$H_DIR/out/steps.csv" inverses_installed)
POKES=""
for k in top:9 random:10 many:11; do
  h_start "poke-${k%%:*}" "$BUILD/kfac-poke" --endpoint "$ep" --member_id "${k##*:}" --member_kind "inv-flip-${k%%:*}" \
    --count 20 --wait_ms 10000 --print 20
  POKES="$POKES ${k%%:*}:$H_PID"
done
for kp in $POKES; do
  h_wait "${kp##*:}" 120
  [ "$H_STATUS" = 0 ] || h_fail "the inv-flip-${kp%%:*} daemon exited with status $H_STATUS (not welcomed?)"
done
t=0
while ! h_ge "$(h_csv_last "$H_DIR/out/steps.csv" inverses_installed)" $((inv0 + 20)); do
  kill -0 "$PS_PID" 2>/dev/null || h_fail "kfac-ps exited before it was stopped: $(tail -n 2 "$H_DIR/ps.log")"
  t=$((t + 1))
  [ $t -lt 600 ] || h_fail "fewer than 20 inverses installed in 60 s after the hostile daemons exited"
  sleep 0.1
done
kill -TERM "$PS_PID"
h_wait "$PS_PID" 60
[ "$H_STATUS" = 0 ] || h_fail "kfac-ps exited with status $H_STATUS after SIGTERM (124: still running after 60 s)"
log=$H_DIR/ps.log
rows=$(h_rows "$H_DIR/out/steps.csv")
done_steps=$(sed -n 's/.*done: \([0-9]*\) steps in .*/\1/p' "$log" | tail -n 1)
[ -n "$done_steps" ] || h_fail "kfac-ps's log has no done line: $(tail -n 2 "$log")"
# a recovery (every gradient of a round refused) publishes a round without a row
rec=$(sed -n 's/.*done: .*, recoveries \([0-9]*\) .*/\1/p' "$log" | tail -n 1)
[ "$rows" -eq $((done_steps - ${rec:-0})) ] ||
  h_fail "steps.csv has $rows steps, kfac-ps's done line $done_steps steps with ${rec:-0} recoveries"
summary=""
for kp in $POKES; do
  k=${kp%%:*}
  pid=${kp##*:}
  plog=$H_DIR/poke-$k.log
  line=$(grep "jobs answered" "$plog") || h_fail "the inv-flip-$k daemon did not report: $(tail -n 2 "$plog")"
  flipped=$(echo "$line" | sed -n 's/.* \([0-9]*\) of them with .*/\1/p')
  refused=$(echo "$line" | sed -n 's/.*errors INVALID \([0-9]*\).*/\1/p')
  [ -n "$flipped" ] && [ "$flipped" -ge 3 ] || h_fail "the inv-flip-$k daemon sent ${flipped:-no} flipped inverses: $line"
  echo "$line" | grep -q "shut out by kfac-ps" || h_fail "the inv-flip-$k daemon was not shut out: $line"
  # each refused result is answered with an Error, but the third with the Shutdown
  refused=$((refused + 1))
  [ "$refused" = 3 ] || h_fail "inv-flip-$k: $refused of its results refused before it was shut out, expected 3: $line"
  # None of its flipped inverses was installed, by job id in kfac-ps's
  # debug log. Those neither refused nor installed came back after their
  # job was handed to another daemon (a slow answer beside a busy CPU) and
  # were dropped unchecked.
  ids=$(sed -n 's/^flipped job \([0-9]*\) .*/\1/p' "$plog")
  [ "$(echo "$ids" | grep -c .)" = "$flipped" ] || h_fail "inv-flip-$k: $flipped flipped inverses but the job ids of $(echo "$ids" | grep -c .) printed"
  for id in $ids; do
    if grep -q ": job $id (.*installed" "$log"; then h_fail "inv-flip-$k: its flipped inverse for job $id was installed"; fi
  done
  grep -q "invertd#[0-9]* (pid $pid .*3 of its results were refused .*it gets no more jobs" "$log" ||
    h_fail "kfac-ps did not shut the inv-flip-$k daemon (pid $pid) out in its log, naming it"
  # the reasons of the refusals answered with an Error (the poke prints them)
  n_def=$(grep -c "refused: it is not positive definite" "$plog")
  n_res=$(grep -c "refused: it does not invert" "$plog")
  n_diag=$(grep -c "refused: job_result.inverse: diagonal element" "$plog")
  summary="$summary inv-flip-$k: $refused of $flipped refused, none installed (reasons given: $n_res residual, $n_def not positive definite, $n_diag a non-positive diagonal);"
done
if grep -q "(pid $HONEST[ ,)].*refused" "$log"; then h_fail "the honest inverse daemon had a result refused"; fi
# the log the job ids were looked for in names the installs
grep -q "(pid $HONEST[ ,)].*: job [0-9]* (.*installed" "$log" || h_fail "kfac-ps's debug log names no install by the honest daemon"

total=$(sed -n 's/.*inverses refused \([0-9]*\).*/\1/p' "$log" | tail -n 1)
[ "${total:-0}" -ge 9 ] || h_fail "the done line counts ${total:-no} inverses refused, expected at least 9"
inv1=$(h_csv_last "$H_DIR/out/steps.csv" inverses_installed)
h_ge "$inv1" $((inv0 + 20)) || h_fail "$((inv1 - inv0)) inverses installed after the hostile daemons joined"
h_pass "no flipped inverse installed:$summary inverses refused $total in all; the honest daemon never refused; $((inv1 - inv0)) inverses installed after they joined, every one of the run's $rows steps written"
