#!/bin/sh
# tests/integration/58-hostile-invfail.sh — an inverse daemon that says
# every factor it is given could not be inverted (tools/kfac-poke
# --member_kind inv-fail). Before, such a report cost it nothing and
# failed the block until newer statistics: a daemon quick to ask for work
# could hold every block it got, and a step waiting on them under [kfac]
# max_inverse_staleness waited with it. Now one daemon's report does not
# fail a block while another daemon may try that version (ps/sched.h,
# ps_sched_failed_by); the one that reported it is passed over for it, and
# when another daemon inverts that version the report was false: a bad
# result of its identity, 3 of which shut it out.
# The MNIST MLP (2 workers, 1 kfac-statsd, 1 honest kfac-invertd, inverses
# at most 20 versions old), the hostile daemon joining at step 20. Passes
# when every step runs, the hostile daemon is shut out with its false
# reports named, the honest one never, and inverses are installed after it
# joined.
. tests/integration/harness.inc
h_init 58-hostile-invfail
[ -x "$BUILD/kfac-poke" ] || h_fail "missing $BUILD/kfac-poke"
h_mlp_cluster "$H_DIR" 240 seed=4 statsd=1 invertd=1 ini="$H_ASYNC_INI
[kfac]
max_inverse_staleness = 20"
HONEST=$INV1
h_wait_steps 20 90
inv0=$(h_csv_last "$H_DIR/out/steps.csv" inverses_installed)
h_start poke-fail "$BUILD/kfac-poke" --endpoint "$ep" --member_id 9 --member_kind inv-fail --count 100 \
  --wait_ms 3000 --print 20
POKE=$H_PID
h_wait "$POKE" 90
[ "$H_STATUS" = 0 ] || h_fail "the hostile inverse daemon exited with status $H_STATUS (not welcomed?)"
hwm=$(h_kb "$PS_PID" VmHWM)
h_wait "$PS_PID" 120
[ "$H_STATUS" = 0 ] || h_fail "kfac-ps exited with status $H_STATUS (124: still running after 120 s)"
log=$H_DIR/ps.log
rows=$(awk 'NR > 1' "$H_DIR/out/steps.csv" | wc -l)
[ "$rows" -eq 240 ] || h_fail "steps.csv has $rows steps, expected 240"
grep -q "shut out by kfac-ps" "$H_DIR/poke-fail.log" ||
  h_fail "the daemon that reported every job failed was not shut out: $(tail -n 2 "$H_DIR/poke-fail.log")"
grep -q "invertd#[0-9]* (pid $POKE .*3 of its results were refused .*it gets no more jobs" "$log" ||
  h_fail "kfac-ps did not shut the daemon out in its log, naming it"
if grep -q "invertd#[0-9]* (pid $HONEST .*it gets no more jobs" "$log"; then h_fail "the honest inverse daemon was shut out"; fi
inv1=$(h_csv_last "$H_DIR/out/steps.csv" inverses_installed)
h_ge "$inv1" $((inv0 + 20)) || h_fail "$((inv1 - inv0)) inverses installed after the hostile daemon joined"
answered=$(sed -n 's/.*member 9: \([0-9]*\) jobs answered.*/\1/p' "$H_DIR/poke-fail.log")
h_pass "a daemon reporting every job failed shut out after ${answered:-?} reports (3 of them disproved by the honest daemon's inverses), the honest one never; $((inv1 - inv0)) inverses installed after it joined, every step run; kfac-ps peak resident memory ${hwm:-?} kB"
