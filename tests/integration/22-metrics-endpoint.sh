#!/bin/sh
# tests/integration/22-metrics-endpoint.sh — watching a run live: a K-FAC
# cluster (deploy/kfac-launch: kfac-ps, 2 workers, 1 statsd, 2 invertd; the
# MNIST MLP) with [ps] metrics on a free 127.0.0.1 port. While it runs, curl
# reads GET /metrics. Passes when
#   - the reply is the Prometheus text format: every sample's metric has
#     "# HELP" and "# TYPE" lines before it, with the expected types
#     (kfac_step gauge, kfac_rejected_messages_total counter, ...);
#   - it carries step, loss, both test accuracies, steps/s, the inverse age
#     of every block of fc1..fc3, the clients by role and the rejected
#     messages by type;
#   - kfac_step and kfac_wall_seconds increase between two reads;
#   - the other gauges and counters hold what the run says: kfac_steps_target
#     its [run] steps, kfac_train_accuracy in [0, 1], both kfac_test_loss
#     above 0, kfac_robust_steps_total 0 (the plain mean), the curvature's
#     idle seconds (kfac_curvature_idle_seconds) under [ps] curvature_warn_s
#     (30 s, the warning no healthy run gives);
#   - every metric named in a query of the Grafana dashboard
#     (deploy/grafana/kfac-dashboard.json) is one the reply has a "# TYPE"
#     line for, and the dashboard is valid JSON (where python3 is there
#     to parse it); the same check on a copy with one name misspelt in a
#     rate() must fail, naming it;
#   - other paths get 404 and other methods 405; SIGTERM then ends the run
#     cleanly (the launcher exits 143) with its weights saved, and without
#     a curvature warning;
#   - the first read's figures are the run's files' own: kfac_train_loss
#     and kfac_train_accuracy are steps.csv's for step kfac_step, both
#     kfac_test_loss and kfac_test_accuracy eval.csv's for kfac_eval_step
#     (within 1e-5, the files' 6 digits), and kfac_wall_seconds is at most
#     the seconds since the launcher started;
#   - part 2, the same run with 3 workers and [ps] aggregate = median,
#     without kfac-statsd and kfac-invertd and with [ps] curvature_warn_s
#     = 1: the metrics show kfac_curvature_stale 1 for inverses and
#     statistics with at least 1 idle second each, and steps combined by
#     the median (kfac_robust_steps_total at least 1, at most kfac_step);
#     kfac-ps warned once about each (and once, at step 20, that no
#     kfac-statsd is connected), then SIGTERM.
. tests/integration/harness.inc
h_init 22-metrics-endpoint
command -v curl >/dev/null 2>&1 || h_skip "no curl (apt-get install curl)"
port=$(h_port) || exit 1
mport=$(h_port) || exit 1
[ "$mport" != "$port" ] || mport=$(h_port) || exit 1
cat >"$H_DIR/run.ini" <<EOF2
[run]
seed = 3
steps = 100000
eval_every = 50
eval_n = 1000
out_dir = $H_DIR/out
[model]
file = models/mnist-mlp.model
[data]
batch = 32
train_n = 5000
[optimizer]
kind = kfac
[cluster]
workers = 2
statsd = 1
invertd = 2
[ps]
metrics = 127.0.0.1:$mport
EOF2
t_launch=$(date +%s)
h_start launch env KFAC_BIN="$BUILD" sh deploy/kfac-launch "$H_DIR/run.ini" --port "$port" --nice 0 --quiet
url=http://127.0.0.1:$mport/metrics
step_of() { awk '$1 == "kfac_step" { print $2 }' "$1"; }
# value FILE SAMPLE: the value of SAMPLE (name with its labels) in a reply
value() { awk -v k="$2" '$1 == k { print $2 }' "$1"; }
# value_in FILE SAMPLE LO HI: SAMPLE is a number in [LO, HI], else the test fails
value_in() {
  v=$(value "$1" "$2")
  awk -v v="$v" -v lo="$3" -v hi="$4" 'BEGIN { exit !(v ~ /^-?[0-9.e+-]+$/ && v + 0 >= lo && v + 0 <= hi) }' ||
    h_fail "$2 is '$v' in ${1##*/}, not a number in [$3, $4]"
}
# csv_at FILE KEY VALUE COLUMN: COLUMN of the row of a CSV with a header
# whose column KEY is VALUE (nothing when there is none)
csv_at() {
  awk -F, -v k="$2" -v kv="$3" -v c="$4" 'NR == 1 { for (i = 1; i <= NF; i++) { if ($i == k) ki = i; if ($i == c) ci = i }; next }
    ki && ci && $ki == kv { v = $ci } END { print v }' "$1"
}
# same_as FILE SAMPLE CSV KEY VALUE COLUMN: SAMPLE in a reply equals COLUMN
# of CSV's row where KEY is VALUE (relative 1e-5: the files keep 6 digits),
# else the test fails
same_as() {
  a=$(value "$1" "$2")
  b=$(csv_at "$3" "$4" "$5" "$6")
  awk -v a="$a" -v b="$b" 'BEGIN { if (a !~ /^-?[0-9.e+-]+$/ || b !~ /^-?[0-9.e+-]+$/) exit 1
    d = a - b; if (d < 0) d = -d; m = b < 0 ? -b : b; exit !(d <= 1e-5 * m + 1e-9) }' ||
    h_fail "$2 is '$a' in ${1##*/}, but ${3##*/} has '$b' for $4 $5 ($6)"
}
# dash_metrics FILE: the metric names in a Grafana dashboard's queries (every
# "expr", and every "query" but the data source variable's plugin type),
# one per line: the identifiers of each query less its label matchers and
# values, ranges, grouping labels, functions (a name before "("), keywords,
# $variables and numbers; label_values(METRIC, LABEL) gives METRIC
dash_metrics() {
  grep -oE '"(expr|query)": *"([^"\\]|\\.)*"' "$1" | sed 's/^"[a-z]*": *"//; s/"$//; s/\\"/"/g; s/\\\\/\\/g' |
    awk '$0 == "prometheus" { next }
    { q = $0
      gsub(/"([^"\\]|\\.)*"/, "", q)
      gsub(/\{[^}]*\}/, "", q)
      gsub(/\[[^]]*\]/, "", q)
      gsub(/(by|without|on|ignoring|group_left|group_right) *\([^)]*\)/, "", q)
      if (q ~ /^ *label_values *\(/) sub(/, *[a-zA-Z_][a-zA-Z0-9_]* *\) *$/, ")", q)
      while (match(q, /[a-zA-Z_:][a-zA-Z0-9_:]*/)) {
        t = substr(q, RSTART, RLENGTH); before = substr(q, RSTART - 1, 1); rest = substr(q, RSTART + RLENGTH)
        q = rest
        if (before == "$" || before ~ /[0-9.]/) continue
        if (rest ~ /^ *\(/) continue
        if (t ~ /^(and|or|unless|bool|offset|by|without|on|ignoring|group_left|group_right|inf|nan|Inf|NaN)$/) continue
        print t
      } }' | sort -u
}
# dash_unknown DASHBOARD METRICS_TEXT: the dashboard's metric names that the
# reply has no "# TYPE" line for
dash_unknown() {
  awk '/^# TYPE / { print $3 }' "$2" >"$H_DIR/exported.txt"
  dash_metrics "$1" | grep -vxF -f "$H_DIR/exported.txt"
}

# first read: once the run has made a step and evaluated (bounded: 90 s)
i=0
first=""
while [ $i -lt 450 ]; do
  kill -0 "$H_PID" 2>/dev/null || h_fail "the run ended before the endpoint was read"
  if curl -s -m 5 -o "$H_DIR/m1.txt" "$url" 2>/dev/null; then
    s=$(step_of "$H_DIR/m1.txt")
    if [ -n "$s" ] && [ "$s" -ge 1 ] && grep -q '^kfac_eval_step [0-9]' "$H_DIR/m1.txt" &&
      grep -q '^kfac_inverse_age_steps{layer="fc3",factor="1"} [0-9]' "$H_DIR/m1.txt"; then
      first=$s
      break
    fi
  fi
  sleep 0.2
  i=$((i + 1))
done
[ -n "$first" ] || h_fail "no snapshot with a step, an evaluation and fc3's inverse from $url in 90 s"

# second read: kfac_step has moved on (bounded: 60 s)
i=0
second=""
while [ $i -lt 300 ]; do
  curl -s -m 5 -o "$H_DIR/m2.txt" "$url" 2>/dev/null || h_fail "the endpoint stopped answering during the run"
  s=$(step_of "$H_DIR/m2.txt")
  # the step moved on and a rate window with steps in it was measured (on
  # a loaded host a whole window can pass without a step: 0 steps/s until
  # the next one ends)
  if [ -n "$s" ] && [ "$s" -gt "$first" ] &&
    awk '$1 == "kfac_steps_per_second" && $2 > 0 { f = 1 } END { exit !f }' "$H_DIR/m2.txt"; then
    second=$s
    break
  fi
  sleep 0.2
  i=$((i + 1))
done
[ -n "$second" ] || h_fail "kfac_step did not increase past $first with a positive kfac_steps_per_second in 60 s (last: step $s, $(grep '^kfac_steps_per_second' "$H_DIR/m2.txt"))"

f=$H_DIR/m1.txt
# the exposition format: HELP and TYPE precede a metric's samples
awk '
  /^# HELP / { help[$3] = 1; next }
  /^# TYPE / { type[$3] = $4; if (!($4 == "gauge" || $4 == "counter")) { print "bad type: " $0; bad = 1 }; next }
  /^#/ || /^$/ { next }
  { name = $1; sub(/\{.*/, "", name)
    if (!help[name] || !type[name]) { print "no HELP/TYPE before: " $0; bad = 1 }
    if (NF != 2 || $2 !~ /^(-?[0-9.e+-]+|NaN|[+-]Inf)$/) { print "not NAME VALUE: " $0; bad = 1 } }
  END { exit bad }' "$f" >"$H_DIR/format.log" || h_fail "not the Prometheus text format: $(head -n 3 "$H_DIR/format.log")"
for want in "kfac_step gauge" "kfac_train_loss gauge" "kfac_test_accuracy gauge" "kfac_steps_per_second gauge" \
  "kfac_inverse_age_steps gauge" "kfac_clients gauge" "kfac_rejected_messages_total counter" \
  "kfac_inverses_installed_total counter" "kfac_stats_folded_total counter" "kfac_curvature_stale gauge"; do
  grep -q "^# TYPE $want\$" "$f" || h_fail "no '# TYPE $want' in the reply"
done
for want in 'kfac_test_accuracy{params="current"} 0\.' 'kfac_test_accuracy{params="polyak"} 0\.' \
  'kfac_train_loss [0-9]' 'kfac_clients{role="worker"} 2' 'kfac_clients{role="invertd"} 2' \
  'kfac_clients{role="statsd"} 1' 'kfac_rejected_messages_total{type="grad_push"} 0' \
  'kfac_inverse_age_steps{layer="fc1",factor="0"} ' 'kfac_inverse_age_steps{layer="fc2",factor="1"} '; do
  grep -q "^$want" "$f" || h_fail "no line matching '$want' in the reply"
done

# the Grafana dashboard queries only what kfac-ps exports
dash=deploy/grafana/kfac-dashboard.json
n_dash=$(dash_metrics "$dash" | grep -c .)
[ "$n_dash" -ge 20 ] || h_fail "only $n_dash metric names found in the queries of $dash"
unknown=$(dash_unknown "$dash" "$f")
[ -z "$unknown" ] || h_fail "$dash queries metrics kfac-ps does not export: $(printf '%s' "$unknown" | tr '\n' ' ')"
if command -v python3 >/dev/null 2>&1; then
  python3 -m json.tool "$dash" >/dev/null 2>"$H_DIR/json.log" || h_fail "$dash is not valid JSON: $(cat "$H_DIR/json.log")"
fi
sed 's/rate(kfac_stats_folded_total{/rate(kfac_stats_folds_total{/' "$dash" >"$H_DIR/planted.json"
[ "$(dash_unknown "$H_DIR/planted.json" "$f")" = kfac_stats_folds_total ] ||
  h_fail "the dashboard check does not catch a misspelt metric (kfac_stats_folds_total planted in a rate())"
awk '$1 == "kfac_steps_per_second" && $2 > 0 { f = 1 } END { exit !f }' "$H_DIR/m2.txt" ||
  h_fail "no positive steps/s in the second reply: $(grep '^kfac_steps_per_second' "$H_DIR/m2.txt")"
[ "$(value "$f" kfac_steps_target)" = 100000 ] || h_fail "kfac_steps_target is '$(value "$f" kfac_steps_target)', not [run] steps = 100000"
value_in "$f" kfac_wall_seconds 0.001 $(($(date +%s) - t_launch + 1))
awk -v a="$(value "$f" kfac_wall_seconds)" -v b="$(value "$H_DIR/m2.txt" kfac_wall_seconds)" 'BEGIN { exit !(b + 0 > a + 0) }' ||
  h_fail "kfac_wall_seconds did not increase between the two reads"
value_in "$f" kfac_train_accuracy 0 1
value_in "$f" 'kfac_test_loss{params="current"}' 0.000001 100
value_in "$f" 'kfac_test_loss{params="polyak"}' 0.000001 100
[ "$(value "$f" kfac_robust_steps_total)" = 0 ] || h_fail "kfac_robust_steps_total is '$(value "$f" kfac_robust_steps_total)' with the plain mean, not 0"
value_in "$f" 'kfac_curvature_idle_seconds{what="inverses"}' 0 30
value_in "$f" 'kfac_curvature_idle_seconds{what="statistics"}' 0 30
# the curvature thread's time: positive once statistics were folded on it
# (the second read: every fold before it ran there), and a queue that empties
value_in "$H_DIR/m2.txt" kfac_stats_folded_total 1 100000000
value_in "$H_DIR/m2.txt" kfac_curvature_thread_seconds_total 0.0000001 100000
value_in "$f" kfac_curvature_tasks_pending 0 1000

code=$(curl -s -m 5 -o /dev/null -w '%{http_code}' "http://127.0.0.1:$mport/nothing")
[ "$code" = 404 ] || h_fail "GET /nothing: expected 404, got $code"
code=$(curl -s -m 5 -o /dev/null -w '%{http_code}' -X POST -d 'x=1' "$url")
[ "$code" = 405 ] || h_fail "POST /metrics: expected 405, got $code"

# the run is long on purpose: SIGTERM ends it (the launcher exits 143 when
# every daemon stopped cleanly), and kfac-ps saves the weights on that path
kill -TERM "$H_PID"
h_wait "$H_PID" 60
[ "$H_STATUS" = 143 ] || h_fail "kfac-launch after SIGTERM: expected 143, got $H_STATUS (124: still running after 60 s)"
grep -q "weights of step [0-9]* saved" "$H_DIR/out/logs/ps.log" || h_fail "kfac-ps did not save the weights on SIGTERM"
[ -s "$H_DIR/out/manifest.json" ] || h_fail "no manifest.json after SIGTERM"
# (the 20-step warning is not checked here: a stats worker slow to connect
# makes it true)
grep -q "no inverse\|no statistics were folded" "$H_DIR/out/logs/ps.log" &&
  h_fail "a curvature warning in a healthy run: $(grep "no inverse\|no statistics were folded" "$H_DIR/out/logs/ps.log")"
# the first read against the run's own files, complete now that it ended
s1=$(step_of "$f")
e1=$(value "$f" kfac_eval_step)
same_as "$f" kfac_train_loss "$H_DIR/out/steps.csv" step "$s1" train_loss
same_as "$f" kfac_train_accuracy "$H_DIR/out/steps.csv" step "$s1" train_acc
same_as "$f" 'kfac_test_loss{params="current"}' "$H_DIR/out/eval.csv" step "$e1" test_loss
same_as "$f" 'kfac_test_loss{params="polyak"}' "$H_DIR/out/eval.csv" step "$e1" polyak_loss
same_as "$f" 'kfac_test_accuracy{params="current"}' "$H_DIR/out/eval.csv" step "$e1" test_acc
same_as "$f" 'kfac_test_accuracy{params="polyak"}' "$H_DIR/out/eval.csv" step "$e1" polyak_acc

# part 2: K-FAC without inverse daemons or a stats worker must not degrade
# silently: one warning each ([ps] curvature_warn_s = 1), and the metrics
# show it; 3 workers combined by the median (it needs 3) count robust steps
h_start launch2 env KFAC_BIN="$BUILD" sh deploy/kfac-launch "$H_DIR/run.ini" --port "$port" --nice 0 --quiet \
  --workers 3 --ps.aggregate median --statsd 0 --invertd 0 --ps.curvature_warn_s 1 --run.out_dir "$H_DIR/out2"
i=0
stale=""
while [ $i -lt 300 ]; do
  if curl -s -m 5 -o "$H_DIR/m3.txt" "$url" 2>/dev/null &&
    grep -q '^kfac_curvature_stale{what="inverses"} 1$' "$H_DIR/m3.txt" &&
    grep -q '^kfac_curvature_stale{what="statistics"} 1$' "$H_DIR/m3.txt" &&
    awk '$1 == "kfac_robust_steps_total" && $2 >= 1 { f = 1 } END { exit !f }' "$H_DIR/m3.txt"; then
    stale=1
    break
  fi
  kill -0 "$H_PID" 2>/dev/null || break
  sleep 0.2
  i=$((i + 1))
done
[ -n "$stale" ] || h_fail "the metrics never showed kfac_curvature_stale 1 for both inverses and statistics with a robust step ($(grep '^kfac_robust_steps_total' "$H_DIR/m3.txt"))"
value_in "$H_DIR/m3.txt" kfac_robust_steps_total 1 "$(step_of "$H_DIR/m3.txt")"
value_in "$H_DIR/m3.txt" 'kfac_curvature_idle_seconds{what="inverses"}' 1 100000
value_in "$H_DIR/m3.txt" 'kfac_curvature_idle_seconds{what="statistics"}' 1 100000
log2=$H_DIR/out2/logs/ps.log
h_wait_log "$log2" "no statistics were folded for" 30 && h_wait_log "$log2" "no inverse has been installed" 30 ||
  h_fail "part 2: kfac-ps did not warn about the missing curvature"
sleep 1.5 # a second look: one warning each, not one per check
kill -TERM "$H_PID"
h_wait "$H_PID" 60
[ "$H_STATUS" = 143 ] || h_fail "part 2: kfac-launch after SIGTERM: expected 143, got $H_STATUS"
[ "$(grep -c 'no inverse has been installed since the first step' "$log2")" = 1 ] ||
  h_fail "part 2: expected one 'no inverse' warning, got: $(grep -c 'no inverse' "$log2")"
[ "$(grep -c 'no statistics were folded for' "$log2")" = 1 ] || h_fail "part 2: expected one 'no statistics were folded' warning"
[ "$(grep -c 'no statistics after 20 steps and no kfac-statsd connected' "$log2")" = 1 ] ||
  h_fail "part 2: expected the 20-step warning once (no kfac-statsd at all)"
h_pass "Prometheus text at $url, kfac_step $first -> $second, the dashboard's $n_dash metrics all exported, 404/405 for other requests, weights saved on SIGTERM, losses and accuracies those of steps.csv and eval.csv; without curvature daemons one warning each and kfac_curvature_stale 1, $(value "$H_DIR/m3.txt" kfac_robust_steps_total) steps by the median"
