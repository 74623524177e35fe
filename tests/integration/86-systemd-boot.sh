#!/bin/sh
# tests/integration/86-systemd-boot.sh — the shipped systemd units run, under
# their own hardening, in a booted systemd, set up as the docs say.
#
# A container (systemd-nspawn -b) boots this machine's systemd on an
# overlay of the host's root (a tmpfs takes every write; the host's files
# are never changed) with a private network of its own. Into it:
#   - `make install DESTDIR=<container root>` (the units, the binaries, the
#     example kfac.ini), the data bound read-only at /srv/kfac/data;
#   - the keys, by running docs/security.md's systemd key checklist
#     exactly as the doc holds it (the block "kfac key checklist (systemd)");
#   - /etc/kfac/kfac.ini copied from kfac.ini.example with the edits a user
#     of one host makes: [cluster] ps on loopback, a short run, checkpoints
#     every CKPT steps, [ps] metrics on.
# Then `systemctl enable` kfac-ps, kfac-worker@1, @2, kfac-statsd@1,
# kfac-invertd@1 and kfac.target, and `systemctl start kfac.target`.
# Checked, each by what the run reports:
#   - every unit starts and stays up (no abort under SystemCallFilter=,
#     no EACCES on the key folders): the metrics endpoint counts 2 workers,
#     1 statsd, 1 invertd, and steps go on;
#   - mid-run, docs/security.md's "one more daemon during a run" block adds
#     kfac-invertd@2 (key, allowlist, systemctl reload kfac-ps, start): the
#     metrics count 2 inverse daemons; kfac-invertd@1 is stopped: 1;
#   - kfac-ps is killed (systemctl kill -s KILL): systemd restarts it, and it
#     resumes from its checkpoint at the step the checkpoint holds (the
#     journal's "resumed from ...: step N" against the newest "checkpoint at
#     step N" line before the kill);
#   - the run ends: kfac-ps exits 0 (Result=success), steps.csv reaches the
#     last step, the final test accuracy is at least MIN_ACC, and no unit
#     was restarted by systemd except kfac-ps's one restart after the kill
#     (NRestarts), none logged an abort, "Operation not permitted" or
#     "Permission denied".
# Skipped (77, "skipped: <reason>") only where a container cannot boot:
# not root, no systemd-nspawn (Debian package systemd-container), no
# /sys/fs/cgroup (a chroot), no overlayfs, or the container's systemd never
# reaches a running state. Everything it makes (the container, its mounts)
# is removed on exit, also on failure; it stops only its own container, by
# the PID it started.
. tests/integration/harness.inc
h_init 86-systemd-boot
STEPS=600         # [run] steps
CKPT=50           # [checkpoint] every
MIN_ACC=0.93      # final test accuracy
BOOT_S=60         # bound on the container reaching "running"
RUN_S=150         # bound on the whole run inside

[ "$(id -u)" = 0 ] || h_skip "needs root to boot a container"
command -v systemd-nspawn >/dev/null 2>&1 || h_skip "systemd-nspawn is missing (Debian package systemd-container)"
command -v nsenter >/dev/null 2>&1 || h_skip "nsenter is missing (util-linux)"
command -v curl >/dev/null 2>&1 || h_fail "curl is missing (tools/deps.sh installs it): it reads the metrics endpoint"
[ -d /sys/fs/cgroup ] || h_skip "no /sys/fs/cgroup here (a chroot?): a container cannot boot"
[ -x /lib/systemd/systemd ] || h_skip "no /lib/systemd/systemd to boot"
grep -qw overlay /proc/filesystems 2>/dev/null || modprobe overlay 2>/dev/null ||
  grep -qw overlay /proc/filesystems 2>/dev/null || h_skip "no overlayfs for the container's root"

repo=$(pwd)
C=$H_DIR/c
M="kfac86-$$"
mkdir -p "$C/rw" "$C/root" || h_fail "mkdir $C"
nspawn_pid=""
mounted=""

# Stop the container (poweroff inside, then SIGTERM to nspawn, which powers
# it off too, then SIGKILL), then unmount. H_DIR is removed only when every
# mount is gone: never rm -rf through a mounted root.
c_cleanup() {
  if [ -n "$nspawn_pid" ] && kill -0 "$nspawn_pid" 2>/dev/null; then
    l=$(c_leader) && nsenter -t "$l" -a systemctl poweroff >/dev/null 2>&1
    t=0
    while kill -0 "$nspawn_pid" 2>/dev/null && [ $t -lt 100 ]; do sleep 0.2; t=$((t + 1)); done
    kill -TERM "$nspawn_pid" 2>/dev/null
    t=0
    while kill -0 "$nspawn_pid" 2>/dev/null && [ $t -lt 50 ]; do sleep 0.2; t=$((t + 1)); done
    kill -KILL "$nspawn_pid" 2>/dev/null
    wait "$nspawn_pid" 2>/dev/null
  fi
  nspawn_pid=""
  for m in $mounted; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null; done
  for m in $mounted; do
    if mountpoint -q "$m" 2>/dev/null; then
      echo "$H_NAME: $m is still mounted; $H_DIR left in place"
      H_DIR=""
    fi
  done
  mounted=""
}
trap 'c_cleanup; h_cleanup' EXIT
trap 'c_cleanup; h_cleanup; exit 130' INT
trap 'c_cleanup; h_cleanup; exit 143' TERM
trap 'c_cleanup; h_cleanup; exit 129' HUP

# The container's PID 1 (systemd): nspawn's child once it runs systemd.
c_leader() {
  [ -n "$nspawn_pid" ] || return 1
  for p in $(pgrep -P "$nspawn_pid" 2>/dev/null); do
    [ "$(cat "/proc/$p/comm" 2>/dev/null)" = systemd ] && { echo "$p"; return 0; }
  done
  return 1
}
# c_sh SCRIPT: run a shell script inside the container, as its root.
c_sh() { nsenter -t "$leader" -a sh -c "$1"; }

# ---- the container's root: an overlay of / on a tmpfs --------------------------------
mount -t tmpfs -o size=1g,mode=755 "kfac86" "$C/rw" || h_skip "cannot mount a tmpfs (no CAP_SYS_ADMIN?)"
mounted="$C/rw"
mkdir "$C/rw/upper" "$C/rw/work" || h_fail "mkdir in the tmpfs"
mount -t overlay overlay -o "lowerdir=/,upperdir=$C/rw/upper,workdir=$C/rw/work" "$C/root" ||
  h_skip "cannot mount an overlay of / for the container's root"
mounted="$C/root $mounted"
R=$C/root
# The host's own services and timers stay off: the container boots to
# basic.target, with timers masked (a missed daily job would run at boot).
ln -sf /dev/null "$R/etc/systemd/system/timers.target" || h_fail "cannot write the container's /etc"
make --no-print-directory BUILD="$BUILD" install DESTDIR="$R" >"$H_DIR/install.log" 2>&1 ||
  h_fail "make install DESTDIR=$R failed"
[ -x "$R/usr/local/bin/kfac-ps" ] && [ -f "$R/usr/local/lib/systemd/system/kfac-ps.service" ] ||
  h_fail "make install put no kfac-ps or kfac-ps.service under $R/usr/local"
[ -f "$R/etc/kfac/kfac.ini.example" ] || h_fail "make install put no /etc/kfac/kfac.ini.example"
rm -rf "$R/var/lib/kfac" "$R/var/lib/private/kfac" "$R/etc/kfac/keys" "$R/etc/kfac/kfac.ini"

# ---- /etc/kfac/kfac.ini: the example, edited for one host ----------------------------
ini=$R/etc/kfac/kfac.ini
sed -e 's|^ps = tcp://ps.example.internal:5555$|ps = tcp://127.0.0.1:5555|' \
  -e "s|^steps = 2000\$|steps = $STEPS|" -e "s|^eval_every = 200\$|eval_every = $STEPS|" \
  -e 's|^eval_n = 0$|eval_n = 2000|' -e "s|^every = 100\$|every = $CKPT|" \
  -e 's|^file = /usr/local/share/kfac/models/mnist-cnn.model$|file = /usr/local/share/kfac/models/mnist-mlp.model|' \
  -e 's|^\[ps\]$|[ps]\nmetrics = 127.0.0.1:9464|' "$R/etc/kfac/kfac.ini.example" >"$ini" || h_fail "sed kfac.ini"
for want in "file = /usr/local/share/kfac/models/mnist-mlp.model" "ps = tcp://127.0.0.1:5555" "steps = $STEPS" "every = $CKPT" "metrics = 127.0.0.1:9464" \
  "bind = tcp://0.0.0.0:5555" "server_public_key = /etc/kfac/keys/ps.pub" "out_dir = runs/mnist-cnn-kfac"; do
  grep -qx "$want" "$ini" || h_fail "kfac.ini.example changed: the edit to '$want' found no line to change"
done
chmod 644 "$ini"
od=/var/lib/kfac/runs/mnist-cnn-kfac

# ---- the key checklists, as docs/security.md holds them ------------------------------
doc_block() { # the fenced block whose first line is "# $1"
  awk -v m="# $1" '$0 == m { on = 1 } on && /^```/ { exit } on { print }' docs/security.md
}
doc_block "kfac key checklist (systemd)" >"$H_DIR/keys.sh"
doc_block "kfac key checklist (systemd): one more daemon during a run" >"$H_DIR/keys-more.sh"
grep -q kfac-keygen "$H_DIR/keys.sh" || h_fail "docs/security.md has no block '# kfac key checklist (systemd)'"
grep -q "systemctl reload kfac-ps" "$H_DIR/keys-more.sh" ||
  h_fail "docs/security.md has no block '# kfac key checklist (systemd): one more daemon during a run'"
grep -q 'invertd@2' "$H_DIR/keys-more.sh" || h_fail "the 'one more daemon' checklist no longer adds kfac-invertd@2"

# ---- boot ----------------------------------------------------------------------------
systemd-nspawn --register=no --keep-unit -q -M "$M" -D "$R" --private-network \
  --bind-ro="$repo/data:/srv/kfac/data" -b systemd.unit=basic.target >"$H_DIR/console.log" 2>&1 </dev/null &
nspawn_pid=$!
state=""
t=0
while [ $t -lt $((BOOT_S * 5)) ]; do
  kill -0 "$nspawn_pid" 2>/dev/null || h_skip "the container did not boot: $(tail -n 3 "$H_DIR/console.log" | tr '\n' ' ')"
  if leader=$(c_leader); then
    state=$(nsenter -t "$leader" -a systemctl is-system-running 2>/dev/null)
    case $state in running | degraded) break ;; esac
  fi
  sleep 0.2
  t=$((t + 1))
done
case $state in running | degraded) ;; *) h_skip "the container's systemd did not come up in ${BOOT_S}s (state '$state')" ;; esac
echo "$H_NAME: container up ($state) in $(($(date +%s) - H_T0))s"

# Inside: journal since boot for a unit; a systemctl show property.
c_journal() { c_sh "journalctl -q -o cat --no-pager -u '$1'"; }
c_prop() { c_sh "systemctl show -P $2 '$1'"; }
metric() { # NAME_WITH_LABELS: its value, empty when the endpoint does not answer
  c_sh "curl -s -m 2 http://127.0.0.1:9464/metrics" 2>/dev/null | awk -v k="$1" '$1 == k { print $2 }'
}
# wait_metric KEY OP VALUE SECONDS: 0 once the metric compares true
wait_metric() {
  t=0
  while [ $t -lt $(($4 * 2)) ]; do
    v=$(metric "$1")
    [ -n "$v" ] && awk -v a="$v" -v b="$3" -v op="$2" \
      'BEGIN { exit !((op == "==" && a + 0 == b + 0) || (op == ">=" && a + 0 >= b + 0)) }' && return 0
    sleep 0.5
    t=$((t + 1))
  done
  return 1
}
UNITS="kfac-ps kfac-worker@1 kfac-worker@2 kfac-statsd@1 kfac-invertd@1"
unit_logs() { for u in $UNITS kfac-invertd@2; do echo "---- journal of $u"; c_journal "$u" | tail -n 12; done; }
c_fail() { unit_logs; h_fail "$@"; }

c_sh "sh -e" <"$H_DIR/keys.sh" >"$H_DIR/keys.log" 2>&1 || { cat "$H_DIR/keys.log"; h_fail "docs/security.md's key checklist failed inside the container"; }
c_sh "systemctl enable $UNITS kfac.target" >"$H_DIR/enable.log" 2>&1 || { cat "$H_DIR/enable.log"; h_fail "systemctl enable failed"; }
c_sh "systemctl start kfac.target" || c_fail "systemctl start kfac.target failed"

# ---- up and training -----------------------------------------------------------------
wait_metric 'kfac_clients{role="worker"}' == 2 40 || c_fail "the metrics never counted 2 workers (now '$(metric 'kfac_clients{role="worker"}')')"
wait_metric 'kfac_clients{role="statsd"}' == 1 20 || c_fail "the metrics never counted 1 statsd"
wait_metric 'kfac_clients{role="invertd"}' == 1 20 || c_fail "the metrics never counted 1 invertd"
wait_metric kfac_step ">=" 10 40 || c_fail "no 10 steps (kfac_step '$(metric kfac_step)')"
wait_metric kfac_inverses_installed_total ">=" 1 30 || c_fail "no inverse installed from kfac-invertd@1"
c_sh "test -s $od/endpoint" || c_fail "no endpoint file in $od"
ep=$(c_sh "cat $od/endpoint")
case $ep in tcp://*:5555) ;; *) c_fail "endpoint file says '$ep', expected tcp://...:5555" ;; esac

# ---- mid-run: one more inverse daemon, then one less ---------------------------------
c_sh "sh -e" <"$H_DIR/keys-more.sh" >"$H_DIR/keys-more.log" 2>&1 ||
  { cat "$H_DIR/keys-more.log"; c_fail "docs/security.md's 'one more daemon' checklist failed"; }
wait_metric 'kfac_clients{role="invertd"}' == 2 30 ||
  c_fail "the metrics never counted 2 inverse daemons after kfac-invertd@2 was added (now '$(metric 'kfac_clients{role="invertd"}')')"
c_sh "systemctl stop kfac-invertd@1" || c_fail "systemctl stop kfac-invertd@1 failed"
wait_metric 'kfac_clients{role="invertd"}' == 1 30 ||
  c_fail "the metrics never counted 1 inverse daemon after kfac-invertd@1 stopped"
[ "$(c_prop kfac-invertd@1 Result)" = success ] || c_fail "kfac-invertd@1 did not stop cleanly: Result=$(c_prop kfac-invertd@1 Result)"

# ---- kfac-ps killed, restarted by systemd, resumed from its checkpoint ---------------
t=0
until c_journal kfac-ps | grep -Eq "checkpoint at step [0-9]+ \([^)]*\): "; do
  [ $t -lt 120 ] || c_fail "no checkpoint in 60s"
  sleep 0.5
  t=$((t + 1))
done
c_sh "systemctl kill -s KILL kfac-ps" || c_fail "systemctl kill -s KILL kfac-ps failed"
# What a restart can resume from: the newest checkpoint file (systemd waits
# RestartSec=5s before it starts kfac-ps again).
saved=$(c_sh "ls $od/checkpoints" | sed -n 's/^ckpt-0*\([0-9][0-9]*\)\.kfc$/\1/p' | sort -n | tail -n 1)
logged=$(c_journal kfac-ps | sed -n 's/.*checkpoint at step \([0-9]*\) ([^)]*): .*/\1/p' | tail -n 1)
[ -n "$saved" ] && [ "$saved" = "$logged" ] ||
  c_fail "after the kill: newest checkpoint file at step '$saved', newest logged checkpoint at step '$logged'"
t=0
until c_journal kfac-ps | grep -q "resumed from .*: step"; do
  [ $t -lt 60 ] || c_fail "kfac-ps was not restarted and resumed within 30s (NRestarts=$(c_prop kfac-ps NRestarts))"
  sleep 0.5
  t=$((t + 1))
done
resumed=$(c_journal kfac-ps | sed -n 's/.*resumed from .*: step \([0-9]*\),.*/\1/p' | tail -n 1)
[ "$resumed" = "$saved" ] || c_fail "kfac-ps resumed at step '$resumed', its newest checkpoint before the kill was step $saved"
echo "$H_NAME: kfac-ps killed, restarted by systemd, resumed at step $resumed (its checkpoint)"

# ---- the run ends --------------------------------------------------------------------
t=0
while [ "$(c_prop kfac-ps ActiveState)" != inactive ] || [ "$(c_prop kfac-ps SubState)" != dead ]; do
  [ $t -lt $((RUN_S * 2)) ] || c_fail "kfac-ps still runs after ${RUN_S}s (step $(metric kfac_step))"
  sleep 0.5
  t=$((t + 1))
done
[ "$(c_prop kfac-ps Result)" = success ] && [ "$(c_prop kfac-ps ExecMainStatus)" = 0 ] ||
  c_fail "kfac-ps ended with Result=$(c_prop kfac-ps Result), status $(c_prop kfac-ps ExecMainStatus)"
c_sh "cat $od/steps.csv" >"$H_DIR/steps.csv" || c_fail "no $od/steps.csv"
c_sh "cat $od/eval.csv" >"$H_DIR/eval.csv" || c_fail "no $od/eval.csv"
last=$(h_csv_last "$H_DIR/steps.csv" step)
[ "$last" = "$STEPS" ] || c_fail "steps.csv ends at step '$last', expected $STEPS"
acc=$(h_csv_last "$H_DIR/eval.csv" test_acc)
h_ge "$acc" "$MIN_ACC" || c_fail "final test accuracy $acc < $MIN_ACC"

# The clients leave when the run ends; give them a bounded while, then look
# at every unit: how it ended, how often systemd restarted it, its journal.
for u in kfac-worker@1 kfac-worker@2 kfac-statsd@1 kfac-invertd@2; do
  t=0
  while [ "$(c_prop "$u" ActiveState)" = active ] && [ $t -lt 40 ]; do sleep 0.5; t=$((t + 1)); done
done
for u in $UNITS kfac-invertd@2; do
  n=$(c_prop "$u" NRestarts)
  want=0
  [ "$u" = kfac-ps ] && want=1
  [ "$n" = "$want" ] || c_fail "$u: systemd restarted it $n times (expected $want)"
  [ "$(c_prop "$u" ActiveState)" = inactive ] || c_fail "$u is still $(c_prop "$u" ActiveState) after the run ended"
  [ "$u" = kfac-ps ] || [ "$(c_prop "$u" Result)" = success ] || c_fail "$u ended with Result=$(c_prop "$u" Result)"
  if c_journal "$u" | grep -E "Operation not permitted|Permission denied|Assertion|SIGABRT|core-dump|dumped core" >"$H_DIR/bad.log"; then
    c_fail "$u's journal: $(head -n 3 "$H_DIR/bad.log")"
  fi
done
h_pass "kfac-ps, 2 workers, statsd and invertd ran under their units in a booted systemd with the docs' keys; invertd 1 -> 2 -> 1; kfac-ps killed at step >= $saved and resumed there; $STEPS steps, test accuracy $acc"
