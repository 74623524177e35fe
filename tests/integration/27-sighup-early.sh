#!/bin/sh
# tests/integration/27-sighup-early.sh — a SIGHUP (a reload: systemctl
# reload kfac-ps) that arrives before kfac-ps has installed its signal
# watcher must not kill it: kfac-ps ignores SIGHUP from the first line of
# main until the watcher takes over. kfac-ps is started 4 times, each time
# sent SIGHUP 0, 10, 50 and 100 ms after its first log line (while it
# reads its model and binds its socket, about 200 ms more on this machine,
# or just after); then SIGTERM once it listens.
# Passes when every kfac-ps was still running after the SIGHUP, listened,
# and exited 0 on SIGTERM, and at least one SIGHUP came before the watcher:
# the watcher logs each SIGHUP it handles ("SIGHUP: nothing to reload"), so
# a log without that line is a signal that came earlier (else the test
# would pass without having sent one early).
. tests/integration/harness.inc
h_init 27-sighup-early
early=""
late=""
for d in 0 0.01 0.05 0.1; do
  port=$(h_port) || exit 1
  h_start "ps-$d" "$BUILD/kfac-ps" --model.file models/mnist-mlp.model --run.out_dir "$H_DIR/out-$d" \
    --ps.bind "tcp://127.0.0.1:$port"
  pid=$H_PID
  # its first log line (main has run: the signal could not reach the
  # dynamic loader, which no program can guard); the watcher comes later
  # (polled every 5 ms, at most 10 s: the model is read in about 200 ms)
  i=0
  while ! grep -q "OpenBLAS threads" "$H_DIR/ps-$d.log" 2>/dev/null && [ "$i" -lt 2000 ]; do sleep 0.005; i=$((i + 1)); done
  grep -q "OpenBLAS threads" "$H_DIR/ps-$d.log" || h_fail "kfac-ps did not start: $(tail -n 3 "$H_DIR/ps-$d.log")"
  sleep "$d"
  kill -HUP "$pid" 2>/dev/null || h_fail "kfac-ps was gone before the SIGHUP after $d s: $(tail -n 3 "$H_DIR/ps-$d.log")"
  # until it listens or is gone (polled every 0.1 s, at most 30 s)
  i=0
  while kill -0 "$pid" 2>/dev/null && ! grep -q "listening on" "$H_DIR/ps-$d.log" && [ "$i" -lt 300 ]; do
    sleep 0.1
    i=$((i + 1))
  done
  kill -0 "$pid" 2>/dev/null || h_fail "kfac-ps died of a SIGHUP $d s after its first log line"
  grep -q "listening on" "$H_DIR/ps-$d.log" || h_fail "kfac-ps did not come up within 30 s of a SIGHUP after $d s"
  kill -TERM "$pid"
  h_wait "$pid" 20
  [ "$H_STATUS" = 0 ] || h_fail "kfac-ps sent SIGHUP after $d s exited $H_STATUS (129: killed by SIGHUP)"
  if grep -q "SIGHUP: nothing to reload" "$H_DIR/ps-$d.log"; then late="$late $d"; else early="$early $d"; fi
done
[ -n "$early" ] || h_fail "every SIGHUP (after$late s) reached the watcher: none came before it, nothing early was tested"
h_pass "kfac-ps survived a SIGHUP 0, 10, 50 and 100 ms after its first log line and exited 0 on SIGTERM; before the watcher:$early s, after it:${late:- none}"
