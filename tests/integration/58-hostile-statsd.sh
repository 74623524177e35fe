#!/bin/sh
# tests/integration/58-hostile-statsd.sh — a statistics worker that pushes
# more than it may (tools/kfac-poke --member_kind stats): while the MNIST
# MLP trains with K-FAC (2 workers, 1 honest kfac-statsd, 1 kfac-invertd),
# a hostile statistics worker joins and pushes, for one parameter version,
# statistics of 1000000 examples, then two pushes of one example (the
# second for the same version), then, for newer versions, indefinite
# factors and factors of 1e6 x the identity (ps/stats_guard.h), then a
# replay of versions 0-4 back to back. Before, n_examples had no upper
# bound and a burst of pushes (about 60 at stat_decay 0.95) replaced the
# curvature; a statistics worker joining at step t could push every
# version 0..t (each folded, each in the trace history the guard judges by).
# Passes when the first is refused for its example count, the third for
# being a second push of one version, the replayed ones for not being of
# the Params last sent, each line naming the sender, the
# honest kfac-statsd has no push refused, and the run finishes all steps.
. tests/integration/harness.inc
h_init 58-hostile-statsd
[ -x "$BUILD/kfac-poke" ] || h_fail "missing $BUILD/kfac-poke"
# the history the trace rule judges by must exist under any load: the daemons at normal priority
h_mlp_cluster "$H_DIR" 300 seed=7 statsd=1 invertd=1 ini="$H_ASYNC_INI"
HONEST=$STATSD_PID
h_wait_steps 100 # a history of accepted statistics for the trace rule (about 20 folds)
h_start poke-stats "$BUILD/kfac-poke" --endpoint "$ep" --member_id 61 --member_kind stats --wait_ms 4000 --print 40
h_wait "$H_PID" 40
[ "$H_STATUS" = 0 ] || h_fail "the hostile statistics worker exited with status $H_STATUS (not welcomed?)"
h_wait "$PS_PID" 120
[ "$H_STATUS" = 0 ] || h_fail "kfac-ps exited with status $H_STATUS (124: still running after 120 s)"
log=$H_DIR/ps.log
grep -q "rejected stats_push from statsd#[0-9]* (pid [0-9]* .*n_examples = 1000000 is more than any statistics batch" "$log" ||
  h_fail "no rejection of n_examples = 1000000 naming the sender"
grep -Eq "already pushed version [0-9]* \(one push per version\)|the Params last sent to this statistics worker were of version" "$H_DIR/poke-stats.log" ||
  h_fail "the second push of one version was not refused (kfac-poke's replies)"
# the replay of versions 0-4 after newer Params: each refused
n_replay=$(grep -c "stats_push for parameter version [0-4]: the Params last sent to this statistics worker were of version" "$H_DIR/poke-stats.log")
[ "$n_replay" -ge 5 ] || h_fail "the replayed versions 0-4 were not all refused ($n_replay of 5; kfac-poke's replies)"
# kfac-ps logs one refusal line a second per cause: the replies carry each
grep -q "invalid: stats: layer fc1 factor A: F\[0\]\[1\]^2 = .*not positive semi-definite" "$H_DIR/poke-stats.log" ||
  h_fail "the indefinite statistics were not refused with the factor and entry named (kfac-poke's replies)"
grep -q "invalid: stats: layer .* trace .* is more than \[ps\] stats_trace_max_ratio" "$H_DIR/poke-stats.log" ||
  h_fail "the statistics of 1e6 x the identity were not refused by the trace rule (kfac-poke's replies)"
n_honest=$(grep -c "rejected stats_push from statsd#[0-9]* (pid $HONEST \|answered with error" "$log" "$H_DIR/statsd.log" |
  awk -F: '{ n += $NF } END { print n + 0 }')
[ "$n_honest" = 0 ] || h_fail "the honest kfac-statsd (pid $HONEST) had $n_honest pushes refused"
rows=$(awk 'NR > 1' "$H_DIR/out/steps.csv" | wc -l)
[ "$rows" -eq 300 ] || h_fail "steps.csv has $rows steps, expected 300"
h_pass "the oversized, the repeated, the indefinite and the huge statistics pushes refused, their sender named; the honest kfac-statsd never refused"
