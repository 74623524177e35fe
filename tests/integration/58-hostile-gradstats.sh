#!/bin/sh
# tests/integration/58-hostile-gradstats.sh — statistics smuggled in a
# GradPush (tools/kfac-poke --member_kind gradstats): a gradient worker that
# adds, to every small gradient it pushes, statistics for the model's last
# fc layer whose factors are indefinite with 1e6 on the diagonal. Before,
# kfac-ps folded a GradPush's statistics whenever the run was K-FAC, asked
# for or not and without the statistics guard of a StatsPush: the honest
# inverse daemons' results for the poisoned factors failed verification,
# both daemons were distrusted and no inverse was installed again.
# Two runs of the MNIST MLP (2 workers, 2 kfac-invertd), the member joining
# at step 20:
#   1. [kfac] stats = async (1 kfac-statsd): no Params asks a worker for
#      statistics, so each such push is refused as unasked, naming the
#      member;
#   2. stats = sync: the workers' statistics are asked for at the due
#      versions; the member's are refused, as unasked or by the statistics
#      guard (the factor named), never folded.
# Both: every step runs, no inverse daemon is distrusted
# (no line of it), inverses go on being
# installed after the member joined, and the member got its refusals
# back as errors.
. tests/integration/harness.inc
h_init 58-hostile-gradstats
[ -x "$BUILD/kfac-poke" ] || h_fail "missing $BUILD/kfac-poke"
summary=""
for mode in async sync; do
  d=$H_DIR/$mode
  n_statsd=0
  [ "$mode" = async ] && n_statsd=1
  h_mlp_cluster "$d" 240 seed=3 statsd=$n_statsd invertd=2 tag="-$mode" ini="[kfac]
stats = $mode
[statsd]
priority = normal
[invertd]
priority = normal"
  t=0
  while [ "$(awk 'NR > 1' "$d/out/steps.csv" 2>/dev/null | wc -l)" -lt 20 ]; do
    t=$((t + 1))
    [ $t -lt 900 ] || h_fail "$mode: fewer than 20 steps after 90 s"
    sleep 0.1
  done
  inv0=$(h_csv_last "$d/out/steps.csv" inverses_installed)
  h_start "poke-$mode" "$BUILD/kfac-poke" --endpoint "$ep" --member_id 62 --member_kind gradstats --count 150 \
    --wait_ms 4000 --print 10
  POKE=$H_PID
  h_wait "$POKE" 120
  [ "$H_STATUS" = 0 ] || h_fail "$mode: the member exited with status $H_STATUS (not welcomed?)"
  grep -q "gradstats gradients pushed" "$H_DIR/poke-$mode.log" || h_fail "$mode: the member pushed nothing"
  hwm=$(h_kb "$PS_PID" VmHWM)
  h_wait "$PS_PID" 120
  [ "$H_STATUS" = 0 ] || h_fail "$mode: kfac-ps exited with status $H_STATUS (124: still running after 120 s)"
  log=$H_DIR/ps-$mode.log
  rows=$(awk 'NR > 1' "$d/out/steps.csv" | wc -l)
  [ "$rows" -eq 240 ] || h_fail "$mode: steps.csv has $rows steps, expected 240"
  if grep -q "it gets no more jobs" "$log"; then h_fail "$mode: an inverse daemon was distrusted: $(grep -m1 'it gets no more jobs' "$log")"; fi
  n_unasked=$(grep -c "rejected grad_push from worker#[0-9]* (pid $POKE .*statistics nobody asked for" "$log")
  n_guard=$(grep -c "rejected grad_push from worker#[0-9]* (pid $POKE .*stats: layer .*not positive semi-definite" "$log")
  [ $((n_unasked + n_guard)) -ge 1 ] || h_fail "$mode: no refusal of the member's statistics naming it"
  if [ "$mode" = sync ]; then
    grep -q "invalid: grad_push.stats: layer .*not positive semi-definite" "$H_DIR/poke-$mode.log" ||
      h_fail "sync: the asked-for indefinite statistics were not refused by the statistics guard (kfac-poke's replies)"
  fi
  inv1=$(h_csv_last "$d/out/steps.csv" inverses_installed)
  h_ge "$inv1" $((inv0 + 20)) || h_fail "$mode: $((inv1 - inv0)) inverses installed after the member joined (from $inv0 to $inv1)"
  # Each refusal is answered with an Error: the member counts them.
  n_err=$(sed -n 's/.*errors INVALID \([0-9]*\).*/\1/p' "$H_DIR/poke-$mode.log" | tail -n 1)
  h_ge "${n_err:-0}" 1 || h_fail "$mode: the member got no INVALID error back"
  summary="$summary $mode: $n_unasked refused as unasked and $n_guard by the guard in the log, $((inv1 - inv0)) inverses installed after it joined, kfac-ps peak resident memory ${hwm:-?} kB;"
done
h_pass "statistics in a GradPush refused, the member named; no inverse daemon distrusted;$summary"
