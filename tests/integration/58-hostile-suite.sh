#!/bin/sh
# tests/integration/58-hostile-suite.sh — every hostile-member attack of
# docs/security.md against a real K-FAC cluster of the demo model
# (models/mnist-cnn.model: 2 workers, 1 kfac-statsd, 1 kfac-invertd, both
# curvature daemons at normal priority so that the curvature does not
# depend on the load), with the seed of 3 clean runs of the same
# configuration (asynchronous runs are not deterministic: the clean runs
# give the spread; they run between the attacks, so that a change in the
# host's load reaches both alike). Each attacker (tools/kfac-poke) joins
# after step 20 (attacks that other counters count share a run, so the
# suite is 6 attacked runs and 3 clean ones):
#   inverses   3 inverse daemons answering every job wrongly
#              (inv-indefinite, inv-scaled, inv-other)
#   scaled     a worker pushing 100 x the parameters it was sent, 40 rounds
#              (2 workers and the mean: per-layer clipping is the defence)
#   bias       a worker pushing -0.02 x the parameters it was sent, with a
#              batch's n_examples, 80 rounds: inside every norm bound, the
#              same direction every time ("a little is enough"; kfac-ps's
#              reference gradient is the defence). Only when asked for
#              (KFAC_HOSTILE_ATTACKS): make check runs this attack in
#              58-hostile-bias.sh, against its own clean run and with the
#              defence off and on
#   poison     3 workers pushing 5 gradients each with n_examples 10^6,
#              values of 3e38, or NaN and Inf (with the reference gradient
#              on: no honest worker may be refused against it)
#   flood      a worker sending 20,000 GetParams without reading a reply
#   id         a client saying Hello with the member id of a live worker
#              (in the run of the scaled attack)
#   stats      a statistics worker pushing 10^6 examples, two pushes for
#              one version, indefinite factors, and 1e6 x the identity
#              (in the run of the poison attack)
#   slow       a worker that asks for Params and only heartbeats for 6 s,
#              and one that stalls every other round (8 rounds: 3 stalls of
#              5 s, a push that must be refused, and a fourth stall in
#              which kfac-poke reads the refusal; kfac-ps's stall timeout is
#              2 s or more, found up to a heartbeat late: a 3 s stall was
#              not always a drop beside two busy loops)
# Not here: negative batch-norm variances (the demo model has no batch
# norm: 58-hostile-bn.sh); a robust mean against a worker inside the norm
# rules (needs 3+ workers: 58-robust-aggregate.sh); one member per key
# (needs CURVE keys: 25-curve-members.sh). KFAC_HOSTILE_ATTACKS="stats slow"
# runs only those attacks (and the clean runs); KFAC_KEEP=1 keeps the logs.
#
# For each attack it prints one line: the test accuracy at step $STEPS
# (whole test set) of the Polyak average and of the raw parameters against
# the clean runs' spreads, the counter of the
# Prometheus endpoint that counted the attacker, the mean inverse age and
# steps/s after the join, kfac-ps's peak resident memory, and the log line
# that named the attacker. Passes when every run finishes
# its steps, every attack is counted and named, every attacked Polyak
# accuracy is at least the clean minimum less $SLACK and every raw one the
# clean raw minimum less $SLACK_RAW (a fourth run lands outside the range
# of 3 by chance about half the time; the line says where it landed), the
# flood's peak memory stays within the resident size before
# it plus $FLOOD_PARAMS Params messages, one statistics push, a job result
# and an inverse holder (below),
# and no step gap of the slow attack is over 5 s.
. tests/integration/harness.inc
h_init 58-hostile-suite
STEPS=150         # steps of every run (the slow attack: $SLOW_STEPS)
SLOW_STEPS=250
JOIN=20           # the step at which attackers join
SLACK=0.01        # below the clean minimum that still passes: Polyak accuracy
SLACK_RAW=0.02    # the same for the raw parameters' accuracy (noisier, below)
# KFAC_HOSTILE_ATTACKS: the attacks to run (default all; the clean runs
# always run), e.g. KFAC_HOSTILE_ATTACKS="stats slow" to look at two
ATTACKS=${KFAC_HOSTILE_ATTACKS:-inverses scaled poison flood id stats slow}
PS_EXTRA="" # options of kfac-ps for the next cluster
SPARED="" # the poisoned run's kfac_grads_drift_spared_total
want() { case " $ATTACKS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
POKES=""
[ -x "$BUILD/kfac-poke" ] || h_fail "missing $BUILD/kfac-poke"
command -v curl >/dev/null 2>&1 || h_skip "curl is missing (Debian package curl): the metrics are read with it"
PARAMS_KB=$(( (215370 * 4 + 1023) / 1024 + 1 ))   # the demo model's Params message, about 842 KiB
STATS_KB=5196     # a full StatsPush of the demo model, 5.32 MB (docs/scaling.md, section 1)
# The flood's bound: kfac-ps keeps at most one Params per client in
# ZeroMQ's hands (ps_round_send_params), so each of the 3 honest clients
# that get Params and the flooder may pin one buffer of an older version,
# besides the 2 current ones (with and without the statistics request):
# 6 Params. On a loaded host the honest clients read late and do pin
# theirs (+4.9 MB measured beside two busy loops, against +0 to +0.5 MB
# quiet). Plus one statistics push, the largest message an honest member
# sends, which may land in fresh pages during the flood, and one job
# result of the largest block (fc1's A, n = 1569: its packed inverse, 4.9
# MB), which kfac-ps holds while its curvature job thread checks it
# (ps/curv.h) beside the next messages. And one full n x n matrix of that
# block (9.6 MB): the curvature thread keeps a pool of inverse holders
# (ps_curv_holder, up to PS_CURV_SPARES per block) that grows, and whose
# holders first allocate their workspace, when more checks are in flight
# than before; a clean run's pool may still be growing at the flood (+16.8
# MB measured once, quiet). A flood that queued a Params per request would
# be 20,000 of them (16 GB).
FLOOD_PARAMS=6
RESULT_KB=$(( (1569 * 1570 / 2 * 4 + 1023) / 1024 + 1 ))
HOLDER_KB=$(( (1569 * 1569 * 4 + 1023) / 1024 + 1 ))


# cluster NAME STEPS: start kfac-ps, 2 workers, kfac-statsd and kfac-invertd
# in $H_DIR/NAME; sets EP (the PS endpoint), MET (metrics address), PS_PID.
cluster() {
  D=$H_DIR/$1
  mkdir -p "$D"
  port=$(h_port) || exit 1
  mport=$(h_port) || exit 1
  EP="tcp://127.0.0.1:$port"
  MET="127.0.0.1:$mport"
  cat >"$D/run.ini" <<EOF2
[run]
seed = 1
steps = $2
eval_every = $STEPS
eval_n = 0
out_dir = $D/out
[model]
file = models/mnist-cnn.model
[data]
batch = 64
[optimizer]
kind = kfac
momentum = 0.9
[kfac]
damping = 0.03
stat_decay = 0.95
kl_c0 = 0.001
polyak_decay = 0.99
fisher = true
stats = async
[statsd]
priority = normal
[invertd]
priority = normal
[cluster]
ps = $EP
workers = 2
statsd = 1
invertd = 1
[ps]
bind = $EP
metrics = $MET
progress_every = 100
EOF2
  h_start "$1-ps" "$BUILD/kfac-ps" --config "$D/run.ini" $PS_EXTRA
  PS_PID=$H_PID
  # kfac-ps's peak resident memory (VmHWM), kept while it runs
  (while kill -0 "$PS_PID" 2>/dev/null; do
     v=$(h_kb "$PS_PID" VmHWM) && [ -n "$v" ] && echo "$v" >"$D/hwm"
     sleep 0.2
   done) &
  H_PIDS="$H_PIDS $!"
  h_start "$1-worker1" "$BUILD/kfac-worker" --config "$D/run.ini" --worker.id 1
  h_start "$1-worker2" "$BUILD/kfac-worker" --config "$D/run.ini" --worker.id 2
  h_start "$1-statsd" "$BUILD/kfac-statsd" --config "$D/run.ini"
  h_start "$1-invertd" "$BUILD/kfac-invertd" --config "$D/run.ini"
  INV_PID=$H_PID
}

# wait_steps NAME N: until NAME's steps.csv has N steps (at most 120 s).
wait_steps() {
  t=0
  while [ "$(awk 'NR > 1' "$H_DIR/$1/out/steps.csv" 2>/dev/null | wc -l)" -lt "$2" ]; do
    t=$((t + 1))
    [ $t -lt 1200 ] || h_fail "$1: fewer than $2 steps after 120 s"
    kill -0 "$PS_PID" 2>/dev/null || h_fail "$1: kfac-ps exited before step $2"
    sleep 0.1
  done
}

# poke NAME ARGS...: start an attacker of run NAME; its PID is added to POKES.
poke() {
  n=$1
  shift
  h_start "$n" "$BUILD/kfac-poke" --endpoint "$EP" "$@"
  POKES="$POKES $H_PID"
}

# finish NAME STEPS: wait for the attackers (each must have been welcomed:
# status 0), read the metrics while the run goes on, wait for kfac-ps and
# check that every step was taken. Sets METRICS (the file) and ACC (test
# accuracy at step $STEPS).
finish() {
  for p in $POKES; do
    h_wait "$p" 120
    [ "$H_STATUS" = 0 ] || h_fail "$1: an attacker exited with status $H_STATUS (not welcomed?)"
  done
  POKES=""
  # two more steps: the endpoint's view is published at each step
  n0=$(awk 'NR > 1' "$H_DIR/$1/out/steps.csv" 2>/dev/null | wc -l)
  wait_steps "$1" $((n0 + 2 < $2 ? n0 + 2 : $2))
  METRICS=$H_DIR/$1/metrics.txt
  t=0
  until curl -fsS --max-time 5 "http://$MET/metrics" >"$METRICS" 2>/dev/null; do
    t=$((t + 1))
    [ $t -lt 20 ] && kill -0 "$PS_PID" 2>/dev/null ||
      h_fail "$1: the metrics endpoint $MET did not answer after the attack (the run ended first?)"
    sleep 0.5
  done
  h_wait "$PS_PID" 240
  [ "$H_STATUS" = 0 ] || h_fail "$1: kfac-ps exited with status $H_STATUS (124: still running after 240 s)"
  rows=$(awk 'NR > 1' "$H_DIR/$1/out/steps.csv" | wc -l)
  [ "$rows" -eq "$2" ] || h_fail "$1: steps.csv has $rows steps, expected $2"
  ACC=$(awk -F, -v s="$STEPS" 'NR == 1 { for (i = 1; i <= NF; i++) { if ($i == "step") c = i; if ($i == "test_acc") a = i } }
    NR > 1 && $c == s { print $a }' "$H_DIR/$1/out/eval.csv")
  [ -n "$ACC" ] || h_fail "$1: no evaluation at step $STEPS in eval.csv"
  PACC=$(awk -F, -v s="$STEPS" 'NR == 1 { for (i = 1; i <= NF; i++) { if ($i == "step") c = i; if ($i == "polyak_acc") a = i } }
    NR > 1 && $c == s { print $a }' "$H_DIR/$1/out/eval.csv")
  [ -n "$PACC" ] || h_fail "$1: no Polyak accuracy at step $STEPS in eval.csv"
  HWM=$(cat "$H_DIR/$1/hwm" 2>/dev/null)
  # the curvature's age and the pace after the join: what an attack may
  # change besides the parameters
  AGE=$(awk -F, -v j="$JOIN" 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "inv_age_mean") c = i }
    NR > j + 1 && c { s += $c; n++ } END { printf "%.1f", n ? s / n : -1 }' "$H_DIR/$1/out/steps.csv")
  SPS=$(awk -F, -v j="$JOIN" 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "wall_s") c = i }
    NR == j + 1 { a = $c } NR > 1 { b = $c; n = NR - 1 } END { printf "%.1f", (b > a) ? (n - j) / (b - a) : 0 }' \
    "$H_DIR/$1/out/steps.csv")
}

# metric NAME: the value of one line of the metrics (exact name and labels).
metric() { awk -v m="$1" '$1 == m { print $2 }' "$METRICS"; }

# clean NAME: one clean run, with the attacks' schedule but no attacker.
clean() {
  cluster "$1" "$STEPS"
  wait_steps "$1" "$JOIN"
  finish "$1" "$STEPS"
  CLEANS="$CLEANS $ACC"
  PCLEANS="$PCLEANS $PACC"
  echo "58-hostile-suite: $1: test accuracy $ACC (Polyak $PACC) at step $STEPS; after the join: inverse age $AGE, $SPS steps/s; kfac-ps peak resident memory $HWM kB"
}
CLEANS=""
PCLEANS=""

# judge RUN ATTACK COUNTER_TEXT NAMED_RE: the attacker named in RUN's
# kfac-ps log; the accuracy, counter and named line kept for the verdict at
# the end (the clean runs are spread among the attacks, so that a change in
# the host's load reaches both alike).
RESULTS=$H_DIR/results
: >"$RESULTS"
judge() {
  grep -Eq "$4" "$H_DIR/$1-ps.log" || h_fail "$2: kfac-ps's log never named the attacker (no line matching: $4)"
  named=$(grep -E "$4" "$H_DIR/$1-ps.log" | head -n 1 | sed 's/^[^ ]* [A-Z]* *//' | cut -c1-150)
  printf '%s\t%s\t%s\t%s; after the join: inverse age %s, %s steps/s; kfac-ps peak resident memory %s kB\t%s\n' \
    "$2" "$PACC" "$ACC" "$3" "$AGE" "$SPS" "$HWM" "$named" >>"$RESULTS"
  echo "58-hostile-suite: $2 (run $1): test accuracy $ACC (Polyak $PACC) at step $STEPS; $3; inverse age $AGE, $SPS steps/s; peak $HWM kB"
}

clean clean1

if want inverses; then
# inverses: 3 inverse daemons, every result wrong
cluster inverses "$STEPS"
wait_steps inverses "$JOIN"
poke inverses-indefinite --member_id 31 --member_kind inv-indefinite --count 6 --wait_ms 5000
poke inverses-scaled --member_id 32 --member_kind inv-scaled --count 6 --wait_ms 5000
poke inverses-other --member_id 33 --member_kind inv-other --count 6 --wait_ms 5000
finish inverses "$STEPS"
n=$(metric kfac_invertd_distrusted_total)
[ "${n:-0}" -ge 3 ] || h_fail "inverses: kfac_invertd_distrusted_total is '${n:-}', expected 3"
for k in indefinite scaled other; do
  grep -q "shut out by kfac-ps" "$H_DIR/inverses-$k.log" ||
    h_fail "inverses: the inv-$k daemon was not shut out: $(tail -n 2 "$H_DIR/inverses-$k.log")"
done
grep -q "(pid $INV_PID[ ,)].*refused" "$H_DIR/inverses-ps.log" &&
  h_fail "inverses: the honest kfac-invertd (pid $INV_PID) had a result refused"
installed=$(metric kfac_inverses_installed_total)
[ "${installed:-0}" -gt 0 ] || h_fail "inverses: no inverse was installed"
judge inverses inverses "kfac_invertd_distrusted_total $n, kfac_inverses_refused_total $(metric kfac_inverses_refused_total)" \
  "invertd#[0-9]* \(pid [0-9]* .*refused \(1 of 3\)"
fi

if want scaled || want id; then
# scaled: 100 x the parameters, inside every rule but the per-layer bound;
# id, in the same run: Hello with the member id of a live worker
cluster scaled-id "$STEPS"
wait_steps scaled-id "$JOIN"
want scaled && poke scaled --member_id 41 --member_kind scaled --count 40 --wait_ms 5000
if want id; then
  h_start id "$BUILD/kfac-poke" --endpoint "$EP" --member_id 1 --member_kind examples --count 1 --wait_ms 3000
  h_wait "$H_PID" 30
  [ "$H_STATUS" = 1 ] || h_fail "id: the Hello with a live worker's id was not refused (kfac-poke status $H_STATUS)"
  grep -q "worker id 1 is in use by worker#" "$H_DIR/id.log" || h_fail "id: the answer does not say the id is in use"
fi
finish scaled-id "$STEPS"
if want scaled; then
  n=$(metric kfac_grad_clipped_total)
  r=$(metric 'kfac_rejected_messages_total{type="grad_push"}')
  [ $(( ${n:-0} + ${r:-0} )) -ge 1 ] || h_fail "scaled: nothing clipped or rejected (kfac_grad_clipped_total '${n:-}')"
  judge scaled-id scaled "kfac_grad_clipped_total $n, kfac_rejected_messages_total{type=grad_push} $r" \
    "worker#[0-9]* \(pid [0-9]* .*(clipped|median)"
fi
if want id; then
  r=$(metric 'kfac_rejected_messages_total{type="hello"}')
  [ "${r:-0}" -ge 1 ] || h_fail "id: kfac_rejected_messages_total{type=hello} is '${r:-}'"
  judge scaled-id id "kfac_rejected_messages_total{type=hello} $r" "refused a kfac-worker .*worker id 1 is in use"
fi
fi

if want bias; then
# bias: -0.02 x the parameters every round, a batch's examples: the mean
# of two workers moves the same way each step, and every norm rule passes
PS_EXTRA="--ps.heldout_n 256" # the reference gradient, off by default
cluster bias "$STEPS"
PS_EXTRA=""
wait_steps bias "$JOIN"
poke bias --member_id 49 --member_kind bias --bias 0.02 --bias_examples 64 --count 80 --wait_ms 5000
finish bias "$STEPS"
n=$(metric kfac_grads_drift_refused_total)
[ "${n:-0}" -ge 1 ] || h_fail "bias: kfac_grads_drift_refused_total is '${n:-}', expected at least 1"
grep -Eq "80 bias gradients pushed" "$H_DIR/bias.log" || h_fail "bias: the member did not push its 80 rounds: $(tail -n 1 "$H_DIR/bias.log")"
judge bias bias "kfac_grads_drift_refused_total $n" "worker#[0-9]* \(pid [0-9]* .*keep a direction of their own"
fi

clean clean2

if want poison || want stats; then
# poison: gradients no honest worker sends; stats, in the same run: more
# examples than a batch, two pushes for one version, indefinite factors
# With kfac-ps's reference gradient on: the indefinite factors of the
# stats attack drive the model where every honest batch's gradient points
# one way the reference lags; no honest worker may be refused for it
# (docs/security.md: a worker beyond the bound is refused only while
# another is within it).
PS_EXTRA="--ps.heldout_n 256 --ps.heldout_every 8" # a reference every 8 versions: half the default's arithmetic
cluster poison-stats "$STEPS"
PS_EXTRA=""
wait_steps poison-stats "$JOIN"
if want poison; then
  poke poison-examples --member_id 42 --member_kind examples --count 5 --wait_ms 5000
  poke poison-huge --member_id 43 --member_kind huge --count 5 --wait_ms 5000
  poke poison-nan --member_id 44 --member_kind nan --count 5 --wait_ms 5000
fi
want stats && poke stats --member_id 46 --member_kind stats --wait_ms 5000
finish poison-stats "$STEPS"
n=$(metric kfac_grads_drift_refused_total)
[ "${n:-x}" = 0 ] ||
  h_fail "poison-stats: kfac_grads_drift_refused_total is '${n:-}': an honest worker was refused against the reference gradient ($(grep -m 1 'direction of their own' "$H_DIR/poison-stats-ps.log"))"
SPARED=$(metric kfac_grads_drift_spared_total)
if want poison; then
  r=$(metric 'kfac_rejected_messages_total{type="grad_push"}')
  for k in examples huge nan; do
    grep -Eq "errors INVALID [1-9]" "$H_DIR/poison-$k.log" ||
      h_fail "poison: the $k member's pushes were not refused: $(tail -n 1 "$H_DIR/poison-$k.log")"
  done
  [ "${r:-0}" -ge 3 ] || h_fail "poison: kfac_rejected_messages_total{type=grad_push} is '${r:-}', expected at least 3"
  judge poison-stats poison "kfac_rejected_messages_total{type=grad_push} $r" \
    "rejected grad_push from worker#[0-9]* \(pid [0-9]*"
fi
if want stats; then
  r=$(metric 'kfac_rejected_messages_total{type="stats_push"}')
  [ "${r:-0}" -ge 2 ] || h_fail "stats: kfac_rejected_messages_total{type=stats_push} is '${r:-}', expected 2"
  grep -Eq "already pushed version [0-9]* \(one push per version\)|the Params last sent to this statistics worker were of version" "$H_DIR/stats.log" ||
    h_fail "stats: the second push for one version was not refused (kfac-poke's replies)"
  judge poison-stats stats "kfac_rejected_messages_total{type=stats_push} $r" \
    "rejected stats_push from statsd#[0-9]* \(pid [0-9]* .*n_examples = 1000000 is more than any statistics batch"
fi
fi

if want flood; then
# flood: 20,000 GetParams never read. The peak is measured over the flood
# alone (VmHWM reset through /proc/PID/clear_refs just before it): the
# clean runs' peaks differ by tens of MB (evaluation, heaps), far more than
# the bound (FLOOD_PARAMS above).
cluster flood "$STEPS"
wait_steps flood "$JOIN"
rss0=$(h_kb "$PS_PID" VmRSS)
reset=1
echo 5 >"/proc/$PS_PID/clear_refs" 2>/dev/null || reset=0
hwm0=$(h_kb "$PS_PID" VmHWM)
poke flood --member_id 45 --member_kind flood --count 20000 --wait_ms 3000
h_wait "$H_PID" 120
[ "$H_STATUS" = 0 ] || h_fail "flood: the flooding member exited with status $H_STATUS (not welcomed?)"
POKES=""
hwm1=$(h_kb "$PS_PID" VmHWM)
finish flood "$STEPS"
grep -q "20000 GetParams sent" "$H_DIR/flood.log" || h_fail "flood: the flood was not sent: $(tail -n 2 "$H_DIR/flood.log")"
bound=$(( rss0 + FLOOD_PARAMS * PARAMS_KB + STATS_KB + RESULT_KB + HOLDER_KB ))
[ "$reset" = 1 ] || bound=$(( bound > hwm0 ? bound : hwm0 ))
[ "$hwm1" -le "$bound" ] ||
  h_fail "flood: kfac-ps's peak resident memory during the flood, $hwm1 kB, is more than $rss0 kB before it plus $FLOOD_PARAMS Params messages, a statistics push, a job result and an inverse holder ($bound kB)"
r=$(metric 'kfac_rejected_messages_total{type="get_params"}')
[ "${r:-0}" -ge 1 ] || h_fail "flood: kfac_rejected_messages_total{type=get_params} is '${r:-}'"
judge flood flood "kfac_rejected_messages_total{type=get_params} $r; peak during the flood $hwm1 kB, $rss0 kB before it (+$((hwm1 - rss0)) kB, bound +$((FLOOD_PARAMS * PARAMS_KB + STATS_KB + RESULT_KB + HOLDER_KB)) kB)" \
  "rejected get_params from worker#[0-9]* .*more than 20 GetParams and JobRequest a second"
fi

clean clean3

if want slow; then
# slow: a member that only heartbeats, one that stalls every other round
cluster slow "$SLOW_STEPS"
wait_steps slow "$JOIN"
poke slow-stall --member_id 47 --member_kind stall --wait_ms 6000
poke slow-alternate --member_id 48 --member_kind alternate --count 8 --wait_ms 5000 --print 1000
finish slow "$SLOW_STEPS"
grep -q "stalled 3 times (\[ps\] stall_max_drops): it is no member" "$H_DIR/slow-alternate.log" ||
  h_fail "slow: the alternating member's later pushes were not refused (kfac-poke's replies)"
wc_=$(h_csv_col "$H_DIR/slow/out/steps.csv" wall_s) || h_fail "$wc_"
gap=$(awk -F, -v c="$wc_" -v j="$JOIN" 'NR > j + 1 { g = $c - prev; if (g > m) m = g } NR > 1 { prev = $c } END { printf "%.2f", m }' \
  "$H_DIR/slow/out/steps.csv")
h_ge 5 "$gap" || h_fail "slow: a step gap of $gap s after the members joined (at most 5 s)"
# drops: the silent member once, the alternating one 3 times (then it is
# no member); the log's drop lines are rate-limited, the counters are not
n_drop=$(metric kfac_workers_stalled_total)
n_dem=$(metric kfac_workers_demoted_total)
[ "${n_drop:-0}" -ge 4 ] ||
  h_fail "slow: kfac_workers_stalled_total is '${n_drop:-}', expected at least 4 (the silent member once, the alternating one 3 times)"
[ "${n_dem:-0}" -ge 1 ] || h_fail "slow: kfac_workers_demoted_total is '${n_dem:-}', expected 1 (the alternating member)"
grep -q "worker#[0-9]* (pid [0-9]* .*stalled 3 times (\[ps\] stall_max_drops): no member of the rounds again" \
  "$H_DIR/slow-ps.log" || h_fail "slow: the alternating member was not demoted after 3 drops (kfac-ps's log)"
judge slow slow "kfac_workers_stalled_total $n_drop, kfac_workers_demoted_total $n_dem, largest step gap $gap s" \
  "worker#[0-9]* \(pid [0-9]* .*heartbeats but has not pushed its gradient"
fi

# the verdict: each attack's accuracy against the clean runs' spread, on
# the Polyak average (the weights a run exports as params_polyak.npy, and
# the steadier figure: the raw parameters' accuracy at one step moves by up
# to a point between evaluations 50 steps apart) within $SLACK of the clean
# minimum, and on the raw parameters within $SLACK_RAW
spread() { # VAR_PREFIX VALUES...: sets <prefix>LO and <prefix>HI
  p=$1; shift
  eval "${p}LO=$(printf '%s\n' "$@" | sort -n | head -n 1)"
  eval "${p}HI=$(printf '%s\n' "$@" | sort -n | tail -n 1)"
}
spread P $PCLEANS
spread R $CLEANS
PFLOOR=$(awk -v a="$PLO" -v s="$SLACK" 'BEGIN { print a - s }')
RFLOOR=$(awk -v a="$RLO" -v s="$SLACK_RAW" 'BEGIN { print a - s }')
echo "58-hostile-suite: clean runs: Polyak$PCLEANS (spread $PLO-$PHI), raw$CLEANS (spread $RLO-$RHI); every attack must reach $PFLOOR (Polyak) and $RFLOOR (raw)"
# where ACC LO HI FLOOR SLACK: the word for where ACC lands
where() {
  if h_ge "$1" "$2" && h_ge "$3" "$1"; then echo "within"
  elif h_ge "$1" "$3"; then echo "above"
  elif h_ge "$1" "$4"; then echo "below, within $5 of"
  else echo "MORE THAN $5 BELOW"; fi
}
bad=""
while IFS="$(printf '\t')" read -r name pacc acc counted named; do
  pw=$(where "$pacc" "$PLO" "$PHI" "$PFLOOR" "$SLACK")
  rw=$(where "$acc" "$RLO" "$RHI" "$RFLOOR" "$SLACK_RAW")
  case "$pw$rw" in *MORE*) bad="$bad $name" ;; esac
  echo "58-hostile-suite: $name: Polyak accuracy $pacc, $pw the clean $PLO-$PHI; raw $acc, $rw the clean $RLO-$RHI; counted: $counted; named: $named"
done <"$RESULTS"
[ -z "$bad" ] || h_fail "attacks whose accuracy at step $STEPS fell more than $SLACK (Polyak) or $SLACK_RAW (raw) below the clean runs' $PLO-$PHI (Polyak), $RLO-$RHI (raw):$bad"
h_pass "$(echo $ATTACKS | wc -w) attacks on the demo model, each counted and named, each within $SLACK of the clean runs' Polyak accuracy $PLO-$PHI and $SLACK_RAW of their raw $RLO-$RHI at step $STEPS${SPARED:+; in the poisoned run no honest worker refused against the reference gradient ($SPARED pushes spared)}"
