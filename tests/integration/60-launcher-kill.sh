#!/bin/sh
# tests/integration/60-launcher-kill.sh — a daemon that will not stop is
# killed. deploy/kfac-launch runs a short SGD run (kfac-ps, 2 workers, 1
# kfac-invertd) where kfac-invertd is a wrapper that ignores SIGTERM and,
# once the real daemon has left at the end of the run, stays. After the
# clients' grace (KFAC_LAUNCH_GRACE_S = 2) the launcher sends it SIGTERM,
# and after the TERM grace (KFAC_LAUNCH_TERM_GRACE_S = 2) SIGKILL, and says
# so. Passes when the run finished its steps, the launcher named the daemon
# it killed and exited 1 (not every daemon stopped cleanly), within 60 s of
# the end of the run, and the wrapper is gone.
. tests/integration/harness.inc
h_init 60-launcher-kill
port=$(h_port) || exit 1
bin=$H_DIR/bin
mkdir "$bin" || h_fail "cannot make $bin"
real=$(cd "$BUILD" && pwd) || h_fail "no $BUILD"
for r in ps worker statsd; do ln -s "$real/kfac-$r" "$bin/kfac-$r" || h_fail "cannot link kfac-$r"; done
# the stubborn kfac-invertd: --help and --dump-config (the launcher's option
# table and checks) go to the real one; a daemon run ignores SIGTERM and
# outlives the real daemon
cat >"$bin/kfac-invertd" <<EOF2
#!/bin/sh
for a in "\$@"; do case \$a in --help | --dump-config) exec "$real/kfac-invertd" "\$@" ;; esac; done
trap '' TERM
"$real/kfac-invertd" "\$@"
echo "\$\$" >"$H_DIR/stubborn.pid"
while :; do sleep 1; done
EOF2
chmod +x "$bin/kfac-invertd"
cat >"$H_DIR/run.ini" <<EOF2
[run]
seed = 2
steps = 40
eval_every = 100000
eval_n = 500
out_dir = $H_DIR/out
[model]
file = models/mnist-mlp.model
[data]
batch = 32
train_n = 2000
[optimizer]
kind = sgd
[cluster]
workers = 2
statsd = 0
invertd = 1
EOF2
h_start launch env KFAC_BIN="$bin" KFAC_LAUNCH_GRACE_S=2 KFAC_LAUNCH_TERM_GRACE_S=2 \
  sh deploy/kfac-launch "$H_DIR/run.ini" --port "$port" --quiet
launch=$H_PID
h_wait_rows "$H_DIR/out/steps.csv" 40 120 "$launch" || h_fail "the run did not reach its 40 steps"
h_wait_log "$H_DIR/stubborn.pid" . 60 || h_fail "the real kfac-invertd did not leave at the end of the run"
stubborn=$(cat "$H_DIR/stubborn.pid")
H_PIDS="$H_PIDS $stubborn" # stopped on exit even if the launcher leaves it
t0=$(date +%s)
h_wait "$launch" 60
st=$H_STATUS
el=$(($(date +%s) - t0))
[ "$st" = 1 ] || h_fail "kfac-launch exited with status $st, want 1 (124: still running 60 s after the run ended)"
grep -q "invertd.* did not stop within 2s of SIGTERM: killing it" "$H_DIR/launch.log" ||
  h_fail "the launcher did not say it killed kfac-invertd: $(tail -n 3 "$H_DIR/launch.log")"
i=0
while kill -0 "$stubborn" 2>/dev/null; do
  i=$((i + 1))
  [ $i -lt 50 ] || h_fail "the stubborn kfac-invertd (pid $stubborn) is still running after the launcher exited"
  sleep 0.2
done
h_pass "a kfac-invertd that ignored SIGTERM was killed $el s after the run ended (grace 2 s, TERM grace 2 s); kfac-launch exited 1"
