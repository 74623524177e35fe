#!/bin/sh
# tests/integration/86-systemd-boot.sh — the shipped systemd units run, under
# their own hardening, on several hosts with booted systemd, set up as the
# docs say; hosts and daemons come and go during the run.
#
# Each host is a container (systemd-nspawn -b) that boots this machine's
# systemd on an overlay of the host's root (a tmpfs per container takes
# every write; the host's files are never changed), in a network namespace
# of its own. The PS host's namespace holds a bridge (10.86.0.1); every
# other host is joined to it by a veth pair (10.86.0.N). Hosts:
#   ps   kfac-ps                                   (metrics on its loopback),
#        kfac-invertd@1 (a client on the PS host itself)
#   wk   kfac-worker@1, kfac-worker@2, kfac-statsd@1
#   inv  kfac-invertd@1, kfac-invertd@2
#   inv2 kfac-invertd@1 (booted and admitted mid-run: a new host whose
#        daemon has the same instance number as one on inv)
# On each: `make install DESTDIR=<its root>`, the data bound read-only at
# /srv/kfac/data, the same /etc/kfac/kfac.ini (kfac.ini.example with the
# edits a user makes: [cluster] ps, a short run of the small model,
# checkpoints every CKPT steps, [ps] metrics on, [invertd] cpus = 0 to
# pin the inverse daemons), its own /etc/hostname (the container's name:
# kfac-keygen puts it in the public keys' names), and the keys made by
# running docs/security.md's blocks "kfac keys (systemd), 1/1b/2/3" and
# "..., during a run" (a look at kfac-ps's reload line: no signal is sent)
# as the doc holds them, each on the host it names; their `scp` lines run a
# stand-in that copies public keys through a folder of the test. Units are
# enabled (`systemctl enable`, kfac.target) and started with kfac.target.
# Checked, each by what the run reports (the metrics endpoint, the
# journals, the run folder):
#   - every unit starts and stays up under its hardening: the metrics count
#     2 workers, 1 statsd and 3 inverse daemons (2 on inv, 1 on the PS
#     host with the key of block 1b), and steps go on; the inverse daemons
#     log their pinning ([invertd] cpus);
#   - inv2 is booted, its key admitted by blocks 2 and 3 (kfac-ps watches
#     its allowlist folders: no SIGHUP) and its kfac-invertd@1 started:
#     inverse daemons 3 -> 4; the PS host's invertd folder holds
#     invertd-1@<ps>.pub, invertd-1@<inv>.pub and invertd-1@<inv2>.pub side
#     by side; kfac-invertd@2 on inv is stopped: 4 -> 3;
#   - kfac-ps is killed (systemctl kill -s KILL): systemd restarts it and it
#     resumes at the step of its newest checkpoint (the file before the
#     restart, the journal's "resumed from ...: step N");
#   - the worker host is powered off (the metrics count 0 workers) and
#     booted again: its enabled units start at boot, the metrics count 2
#     workers, and the run goes on at least 20 steps past that point;
#   - the run ends: kfac-ps exits 0, steps.csv reaches the last step, the
#     final test accuracy is at least MIN_ACC; no unit was restarted by
#     systemd except kfac-ps's one restart after the kill (NRestarts), every
#     stopped client ended with Result=success, and no journal has an
#     abort, "Operation not permitted" or "Permission denied".
# Skipped (77, "skipped: <reason>") only where a container cannot boot or
# be networked: not root, no systemd-nspawn (Debian package
# systemd-container), no /sys/fs/cgroup (a chroot), no overlayfs, no
# network namespaces or veth pairs, or a container's systemd that never
# reaches a running state. Everything it makes (containers, namespaces,
# mounts) is removed on exit, also on failure; it stops only its own
# containers, by the PIDs it started.
. tests/integration/harness.inc
h_init 86-systemd-boot
STEPS=300         # [run] steps
CKPT=50           # [checkpoint] every
MIN_ACC=0.90      # final test accuracy
BOOT_S=60         # bound on a container reaching "running"
RUN_S=150         # bound on the run's end after the last event

[ "$(id -u)" = 0 ] || h_skip "needs root to boot containers"
command -v systemd-nspawn >/dev/null 2>&1 || h_skip "systemd-nspawn is missing (Debian package systemd-container)"
command -v nsenter >/dev/null 2>&1 || h_skip "nsenter is missing (util-linux)"
command -v ip >/dev/null 2>&1 || h_skip "ip(8) is missing (Debian package iproute2)"
command -v curl >/dev/null 2>&1 || h_fail "curl is missing (tools/deps.sh installs it): it reads the metrics endpoint"
[ -d /sys/fs/cgroup ] || h_skip "no /sys/fs/cgroup here (a chroot?): a container cannot boot"
[ -x /lib/systemd/systemd ] || h_skip "no /lib/systemd/systemd to boot"
grep -qw overlay /proc/filesystems 2>/dev/null || modprobe overlay 2>/dev/null ||
  grep -qw overlay /proc/filesystems 2>/dev/null || h_skip "no overlayfs for the containers' roots"

repo=$(pwd)
C=$H_DIR/c
X=$H_DIR/xfer     # public keys in transit: X/HOST/etc/kfac/keys/*.pub
HOSTS="ps wk inv inv2"
mounted=""        # mount points, newest first
netns_made=""
running=""        # hosts whose container runs
for h in $HOSTS; do eval "pid_$h="; done

hostname_of() { echo "$1-$$"; }
# The container's PID 1 (systemd): the nspawn process's child running systemd.
c_leader() {
  eval "np=\$pid_$1"
  [ -n "$np" ] || return 1
  for p in $(pgrep -P "$np" 2>/dev/null); do
    [ "$(cat "/proc/$p/comm" 2>/dev/null)" = systemd ] && { echo "$p"; return 0; }
  done
  return 1
}
# c_sh HOST SCRIPT: run a shell script inside the container, as its root.
c_sh() {
  l=$(c_leader "$1") || { echo "$H_NAME: host $1 is not running" >&2; return 1; }
  nsenter -t "$l" -a sh -c "$2"
}
# c_stop HOST: power the container off (then SIGTERM, then SIGKILL to nspawn).
c_stop() {
  eval "np=\$pid_$1"
  [ -n "$np" ] || return 0
  if kill -0 "$np" 2>/dev/null; then
    l=$(c_leader "$1") && nsenter -t "$l" -a systemctl poweroff >/dev/null 2>&1
    t=0
    while kill -0 "$np" 2>/dev/null && [ $t -lt 100 ]; do sleep 0.2; t=$((t + 1)); done
    kill -TERM "$np" 2>/dev/null
    t=0
    while kill -0 "$np" 2>/dev/null && [ $t -lt 50 ]; do sleep 0.2; t=$((t + 1)); done
    # Last resort: the container's PID 1 first (its PID namespace dies with
    # it; checked again to be nspawn's child), then nspawn.
    if kill -0 "$np" 2>/dev/null; then
      l=$(c_leader "$1") && kill -KILL "$l" 2>/dev/null
      kill -KILL "$np" 2>/dev/null
    fi
  fi
  wait "$np" 2>/dev/null
  eval "pid_$1="
  running=$(echo "$running" | tr ' ' '\n' | grep -vx "$1" | tr '\n' ' ')
}
# Everything down; H_DIR is removed only when every mount is gone: never
# rm -rf through a mounted root.
c_cleanup() {
  for h in $running; do c_stop "$h"; done
  for n in $netns_made; do ip netns del "$n" 2>/dev/null; done
  netns_made=""
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

# ---- the network: a bridge in the PS host's namespace, a veth pair per host ----------
P="kfac86-$$"
for h in $HOSTS; do
  out=$(ip netns add "$P-$h" 2>&1) || h_skip "cannot create a network namespace: $out"
  netns_made="$netns_made $P-$h"
  out=$(ip -n "$P-$h" link set lo up 2>&1) || h_skip "cannot configure a network namespace here: $out"
done
ip -n "$P-ps" link add br0 type bridge 2>/dev/null || h_skip "cannot create a bridge in a network namespace"
ip -n "$P-ps" addr add 10.86.0.1/24 dev br0 && ip -n "$P-ps" link set br0 up || h_fail "cannot configure br0"
i=2
for h in wk inv inv2; do
  out=$(ip link add "to-$h" netns "$P-ps" type veth peer name eth0 netns "$P-$h" 2>&1) ||
    h_skip "cannot create a veth pair: $out"
  ip -n "$P-ps" link set "to-$h" master br0 && ip -n "$P-ps" link set "to-$h" up &&
    ip -n "$P-$h" addr add "10.86.0.$i/24" dev eth0 && ip -n "$P-$h" link set eth0 up ||
    h_fail "cannot configure the link to $h"
  i=$((i + 1))
done

# ---- each host's root: an overlay of / on a tmpfs, the project installed --------------
doc_block() { # the fenced block (indented or not) whose first line is "# $1"
  awk -v m="# $1" '{ l = $0; sub(/^ +/, "", l) } l == m { on = 1; ind = length($0) - length(l) }
    on && l ~ /^```/ { exit } on { print substr($0, ind + 1) }' docs/security.md
}
for n in 1 1b 2 3 4; do
  case $n in
    1) b="kfac keys (systemd), 1: the PS host" ;;
    1b) b="kfac keys (systemd), 1b: the PS host's own daemons" ;;
    2) b="kfac keys (systemd), 2: every other host" ;;
    3) b="kfac keys (systemd), 3: the PS host, for each other host" ;;
    4) b="kfac keys (systemd), during a run: the PS host, after step 3" ;;
  esac
  doc_block "$b" >"$H_DIR/keys$n.sh"
  [ "$(grep -c '' "$H_DIR/keys$n.sh")" -ge 2 ] || h_fail "docs/security.md has no block '# $b'"
done
grep -q "allowlists reloaded" "$H_DIR/keys4.sh" || h_fail "docs/security.md's block for a key added during a run no longer shows the reload"
grep -Eq "kill|reload kfac-ps|SIGHUP" "$H_DIR/keys4.sh" && h_fail "docs/security.md's block for a key added during a run signals kfac-ps (the folder watch needs no signal)"
# What the doc's scp lines do here: HOST:PATH comes from the public keys the
# test has carried over from HOST (X is bound at /run/kfac-xfer).
SCP='scp() { h=${1%%:*}; f=${1#*:}; cp "/run/kfac-xfer/$h$f" "$2"; }'

ini_make() { # the example, edited as a user of these hosts edits it
  sed -e 's|^ps = tcp://ps.example.internal:5555$|ps = tcp://10.86.0.1:5555|' \
    -e "s|^steps = 2000\$|steps = $STEPS|" -e "s|^eval_every = 200\$|eval_every = $STEPS|" \
    -e 's|^eval_n = 0$|eval_n = 2000|' -e "s|^every = 100\$|every = $CKPT|" \
    -e 's|^file = /usr/local/share/kfac/models/mnist-cnn.model$|file = /usr/local/share/kfac/models/mnist-mlp.model|' \
    -e 's|^\[ps\]$|[ps]\nmetrics = 127.0.0.1:9464|' -e 's|^\[invertd\]$|[invertd]\ncpus = 0|' "$1" >"$2" || return 1
  for want in "file = /usr/local/share/kfac/models/mnist-mlp.model" "ps = tcp://10.86.0.1:5555" "steps = $STEPS" \
    "every = $CKPT" "metrics = 127.0.0.1:9464" "cpus = 0" "bind = tcp://0.0.0.0:5555" "out_dir = runs/mnist-cnn-kfac" \
    "server_public_key = /etc/kfac/keys/ps.pub" "allow_invertd = /etc/kfac/keys/allow/invertd"; do
    grep -qx "$want" "$2" || { echo "kfac.ini.example changed: the edit to '$want' found no line to change"; return 1; }
  done
  chmod 644 "$2"
}

root_make() { # HOST
  d=$C/$1
  mkdir -p "$d/rw" "$d/root" "$X/$(hostname_of "$1")/etc/kfac/keys" || h_fail "mkdir $d"
  mount -t tmpfs -o size=512m,mode=755 "kfac86-$1" "$d/rw" || h_skip "cannot mount a tmpfs (no CAP_SYS_ADMIN?)"
  mounted="$d/rw $mounted"
  mkdir "$d/rw/upper" "$d/rw/work" || h_fail "mkdir in the tmpfs"
  mount -t overlay overlay -o "lowerdir=/,upperdir=$d/rw/upper,workdir=$d/rw/work" "$d/root" ||
    h_skip "cannot mount an overlay of / for a container's root"
  mounted="$d/root $mounted"
  r=$d/root
  # The machine's own services and timers stay off: the containers boot to
  # kfac86-boot.target, which stands for multi-user.target without them
  # (basic.target, then kfac.target with whatever is enabled in it), with
  # timers masked (a missed daily job would run at boot).
  ln -sf /dev/null "$r/etc/systemd/system/timers.target" || h_fail "cannot write $1's /etc"
  printf '%s\n' "[Unit]" "Description=a kfac host: the basic system and kfac.target" \
    "Wants=basic.target kfac.target" "After=basic.target" "AllowIsolate=yes" \
    >"$r/etc/systemd/system/kfac86-boot.target" || h_fail "cannot write $1's /etc"
  rm -rf "$r/var/lib/kfac" "$r/var/lib/private/kfac" "$r/etc/kfac"
  make --no-print-directory BUILD="$BUILD" install DESTDIR="$r" >"$H_DIR/install-$1.log" 2>&1 ||
    h_fail "make install DESTDIR=$r failed"
  [ -x "$r/usr/local/bin/kfac-ps" ] && [ -f "$r/usr/local/lib/systemd/system/kfac-ps.service" ] ||
    h_fail "make install put no kfac-ps or kfac-ps.service under $r/usr/local"
  msg=$(ini_make "$r/etc/kfac/kfac.ini.example" "$r/etc/kfac/kfac.ini") || h_fail "$msg"
  # Each host its own name, as real hosts have (systemd sets it from here at
  # boot; the host's own /etc/hostname would name every container alike).
  hostname_of "$1" >"$r/etc/hostname" || h_fail "cannot write $1's /etc/hostname"
}

c_boot() { # HOST: boot its container, wait until systemd runs
  h=$1
  systemd-nspawn --register=no --keep-unit -q -M "$(hostname_of "$h")" -D "$C/$h/root" \
    --network-namespace-path="/run/netns/$P-$h" --bind-ro="$repo/data:/srv/kfac/data" --bind-ro="$X:/run/kfac-xfer" \
    -b systemd.unit=kfac86-boot.target >>"$H_DIR/console-$h.log" 2>&1 </dev/null &
  eval "pid_$h=$!"
  running="$running $h"
}
# c_wait_up HOST [fail]: wait until the container's systemd runs. A
# container whose systemd never started (nspawn refused here) is a skip, or
# with "fail" (a boot mid-run) a failure; one whose systemd started and then
# died, went to maintenance (emergency mode) or did not come up in time is
# a failure either way: that is the boot this test is about.
c_wait_up() {
  out=h_skip
  [ "${2:-}" = fail ] && out=h_fail
  state=""
  started=""
  t=0
  while [ $t -lt $((BOOT_S * 5)) ]; do
    eval "np=\$pid_$1"
    if ! kill -0 "$np" 2>/dev/null; then
      [ -n "$started" ] && h_fail "the systemd of container $1 started and then exited (last state '$state'): $(tail -n 3 "$H_DIR/console-$1.log" | tr '\n' ' ')"
      $out "container $1 did not boot: $(tail -n 3 "$H_DIR/console-$1.log" | tr '\n' ' ')"
    fi
    if l=$(c_leader "$1"); then
      started=1
      state=$(nsenter -t "$l" -a systemctl is-system-running 2>/dev/null)
      case $state in
        running | degraded) return 0 ;;
        maintenance | stopping) h_fail "the systemd of container $1 started and failed to boot (state '$state'): $(tail -n 3 "$H_DIR/console-$1.log" | tr '\n' ' ')" ;;
      esac
    fi
    sleep 0.2
    t=$((t + 1))
  done
  [ -n "$started" ] && h_fail "the systemd of container $1 started and did not come up in ${BOOT_S}s (state '$state')"
  $out "container $1 did not start systemd in ${BOOT_S}s"
}
# keys_run HOST N VARS: docs/security.md's block N inside HOST, after VARS
# (shell assignments) and the scp stand-in; then carry HOST's public keys.
keys_run() {
  { echo "set -e"; echo "$SCP"; echo "$3"; cat "$H_DIR/keys$2.sh"; } >"$H_DIR/run-keys$2-$1.sh"
  c_sh "$1" "sh" <"$H_DIR/run-keys$2-$1.sh" >>"$H_DIR/keys-$1.log" 2>&1 ||
    c_fail "docs/security.md's key block $2 failed on host $1: $(tail -n 3 "$H_DIR/keys-$1.log")"
  for f in "$C/$1/root/etc/kfac/keys"/*.pub; do
    [ -f "$f" ] && cp "$f" "$X/$(hostname_of "$1")/etc/kfac/keys/"
  done
  return 0
}

# Inside a host: journal since boot for a unit; a systemctl show property.
c_journal() { c_sh "$1" "journalctl -q -o cat --no-pager -u '$2'"; }
c_prop() { c_sh "$1" "systemctl show -P $3 '$2'"; }
metric() { # NAME_WITH_LABELS: its value on the PS host, empty when no answer
  c_sh ps "curl -s -m 2 http://127.0.0.1:9464/metrics" 2>/dev/null | awk -v k="$1" '$1 == k { print $2 }'
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
UNITS_ps="kfac-ps kfac-invertd@1"
UNITS_wk="kfac-worker@1 kfac-worker@2 kfac-statsd@1"
UNITS_inv="kfac-invertd@1 kfac-invertd@2"
UNITS_inv2="kfac-invertd@1"
c_fail() {
  for h in $running; do
    eval "us=\$UNITS_$h"
    for u in $us; do echo "---- journal of $u on $h"; c_journal "$h" "$u" 2>/dev/null | tail -n 10; done
  done
  h_fail "$@"
}
wm() { wait_metric "$@" || c_fail "the metrics never had $1 $2 $3 in $4s (now '$(metric "$1")')"; }

for h in ps wk inv; do root_make "$h"; done
for h in ps wk inv; do c_boot "$h"; done
for h in ps wk inv; do c_wait_up "$h"; done
echo "$H_NAME: hosts ps, wk, inv up in $(($(date +%s) - H_T0))s"
PSN=$(hostname_of ps)

# ---- keys, by the docs' blocks, each on its host -----------------------------------------
keys_run ps 1 ""
keys_run ps 1b "KEYS='invertd-1'"
keys_run wk 2 "KEYS='worker-1 worker-2 statsd-1' PS_HOST=$PSN"
keys_run inv 2 "KEYS='invertd-1 invertd-2' PS_HOST=$PSN"
keys_run ps 3 "HOST=$(hostname_of wk) KEYS='worker-1 worker-2 statsd-1'"
keys_run ps 3 "HOST=$(hostname_of inv) KEYS='invertd-1 invertd-2'"

# ---- start: kfac-ps, then the clients ------------------------------------------------
for h in ps wk inv; do
  eval "us=\$UNITS_$h"
  c_sh "$h" "systemctl enable $us kfac.target" >>"$H_DIR/enable.log" 2>&1 || c_fail "systemctl enable on $h failed"
  c_sh "$h" "systemctl start kfac.target" || c_fail "systemctl start kfac.target on $h failed"
done
wm 'kfac_clients{role="worker"}' == 2 40
wm 'kfac_clients{role="statsd"}' == 1 20
wm 'kfac_clients{role="invertd"}' == 3 20
wm kfac_step ">=" 10 40
wm kfac_inverses_installed_total ">=" 1 30
od=/var/lib/kfac/runs/mnist-cnn-kfac
ep=$(c_sh ps "cat $od/endpoint") || c_fail "no endpoint file in $od on the PS host"
case $ep in tcp://*:5555) ;; *) c_fail "endpoint file says '$ep', expected tcp://...:5555" ;; esac
# [invertd] cpus = 0: pinning (sched_setaffinity) works under the filter.
c_journal inv kfac-invertd@1 | grep -q "pinned to CPU 0 " ||
  c_fail "kfac-invertd@1 on inv did not log its pinning to CPU 0 ([invertd] cpus = 0)"
echo "$H_NAME: training: 2 workers, 1 statsd, 3 inverse daemons (one on the PS host), pinned (step $(metric kfac_step))"

# ---- a new host with one more inverse daemon, then one less on inv -------------------
root_make inv2
c_boot inv2
c_wait_up inv2 fail
keys_run inv2 2 "KEYS='invertd-1' PS_HOST=$PSN"
keys_run ps 3 "HOST=$(hostname_of inv2) KEYS='invertd-1'"
keys_run ps 4 ""
c_sh inv2 "systemctl enable --now kfac-invertd@1 kfac.target" >>"$H_DIR/enable.log" 2>&1 ||
  c_fail "systemctl enable --now kfac-invertd@1 on inv2 failed"
wm 'kfac_clients{role="invertd"}' == 4 30
inv_keys=$(c_sh ps "ls /etc/kfac/keys/allow/invertd" | tr '\n' ' ')
for k in "invertd-1@$PSN.pub" "invertd-1@$(hostname_of inv).pub" "invertd-1@$(hostname_of inv2).pub"; do
  case " $inv_keys" in *" $k "*) ;; *) c_fail "the PS host's allow/invertd lacks $k (it holds: $inv_keys)" ;; esac
done
c_journal ps kfac-ps | grep -q "allowlists reloaded (a change in /etc/kfac/keys/allow/invertd): .*: 1 added, 0 removed" ||
  c_fail "kfac-ps did not log reading inv2's key from its watched folder"
c_sh inv "systemctl stop kfac-invertd@2" || c_fail "systemctl stop kfac-invertd@2 on inv failed"
wm 'kfac_clients{role="invertd"}' == 3 30
[ "$(c_prop inv kfac-invertd@2 Result)" = success ] ||
  c_fail "kfac-invertd@2 on inv did not stop cleanly: Result=$(c_prop inv kfac-invertd@2 Result)"
echo "$H_NAME: inverse daemons 3 -> 4 (new host inv2) -> 3 (step $(metric kfac_step))"

# ---- kfac-ps killed, restarted by systemd, resumed from its checkpoint ---------------
t=0
until c_journal ps kfac-ps | grep -Eq "checkpoint at step [0-9]+ \([^)]*\): "; do
  [ $t -lt 120 ] || c_fail "no checkpoint in 60s"
  sleep 0.5
  t=$((t + 1))
done
c_sh ps "systemctl kill -s KILL kfac-ps" || c_fail "systemctl kill -s KILL kfac-ps failed"
# What a restart can resume from: the newest checkpoint file (systemd waits
# RestartSec=5s before it starts kfac-ps again).
saved=$(c_sh ps "ls $od/checkpoints" | sed -n 's/^ckpt-0*\([0-9][0-9]*\)\.kfc$/\1/p' | sort -n | tail -n 1)
logged=$(c_journal ps kfac-ps | sed -n 's/.*checkpoint at step \([0-9]*\) ([^)]*): .*/\1/p' | tail -n 1)
[ -n "$saved" ] && [ "$saved" = "$logged" ] ||
  c_fail "after the kill: newest checkpoint file at step '$saved', newest logged checkpoint at step '$logged'"
[ "$saved" -lt "$STEPS" ] || c_fail "the run ended before the kill (checkpoint at step $saved)"
t=0
until c_journal ps kfac-ps | grep -q "resumed from .*: step"; do
  [ $t -lt 60 ] || c_fail "kfac-ps was not restarted and resumed within 30s (NRestarts=$(c_prop ps kfac-ps NRestarts))"
  sleep 0.5
  t=$((t + 1))
done
resumed=$(c_journal ps kfac-ps | sed -n 's/.*resumed from .*: step \([0-9]*\),.*/\1/p' | tail -n 1)
[ "$resumed" = "$saved" ] || c_fail "kfac-ps resumed at step '$resumed', its newest checkpoint before the kill was step $saved"
wm 'kfac_clients{role="worker"}' == 2 40
wm kfac_step ">=" $((saved + 10)) 40
echo "$H_NAME: kfac-ps killed, restarted by systemd, resumed at step $resumed (its checkpoint)"

# ---- the worker host powered off and booted again -------------------------------------
c_stop wk
wm 'kfac_clients{role="worker"}' == 0 30
wm 'kfac_clients{role="statsd"}' == 0 30
c_boot wk
c_wait_up wk fail
wm 'kfac_clients{role="worker"}' == 2 40
back=$(metric kfac_step)
wm kfac_step ">=" $((back + 20)) 40
[ "$back" -lt "$STEPS" ] || c_fail "the run ended before the worker host came back"
echo "$H_NAME: worker host powered off and booted: its units started at boot, 2 workers back at step $back"

# ---- the run ends ------------------------------------------------------------------
t=0
while [ "$(c_prop ps kfac-ps ActiveState)" != inactive ]; do
  [ $t -lt $((RUN_S * 2)) ] || c_fail "kfac-ps still runs after ${RUN_S}s (step $(metric kfac_step))"
  sleep 0.5
  t=$((t + 1))
done
[ "$(c_prop ps kfac-ps Result)" = success ] && [ "$(c_prop ps kfac-ps ExecMainStatus)" = 0 ] ||
  c_fail "kfac-ps ended with Result=$(c_prop ps kfac-ps Result), status $(c_prop ps kfac-ps ExecMainStatus)"
c_sh ps "cat $od/steps.csv" >"$H_DIR/steps.csv" || c_fail "no $od/steps.csv"
c_sh ps "cat $od/eval.csv" >"$H_DIR/eval.csv" || c_fail "no $od/eval.csv"
last=$(h_csv_last "$H_DIR/steps.csv" step)
[ "$last" = "$STEPS" ] || c_fail "steps.csv ends at step '$last', expected $STEPS"
acc=$(h_csv_last "$H_DIR/eval.csv" test_acc)
h_ge "$acc" "$MIN_ACC" || c_fail "final test accuracy $acc < $MIN_ACC"

# The clients leave when the run ends; give them a bounded while, then look
# at every unit of every host: how it ended, how often systemd restarted
# it, its journal.
for h in ps wk inv inv2; do
  eval "us=\$UNITS_$h"
  for u in $us; do
    t=0
    while [ "$(c_prop "$h" "$u" ActiveState)" = active ] && [ $t -lt 40 ]; do sleep 0.5; t=$((t + 1)); done
  done
done
for h in ps wk inv inv2; do
  eval "us=\$UNITS_$h"
  for u in $us; do
    n=$(c_prop "$h" "$u" NRestarts)
    want=0
    [ "$u" = kfac-ps ] && want=1
    [ "$n" = "$want" ] || c_fail "$u on $h: systemd restarted it $n times (expected $want)"
    [ "$(c_prop "$h" "$u" ActiveState)" = inactive ] || c_fail "$u on $h is still $(c_prop "$h" "$u" ActiveState) after the run"
    [ "$(c_prop "$h" "$u" Result)" = success ] || c_fail "$u on $h ended with Result=$(c_prop "$h" "$u" Result)"
    if c_journal "$h" "$u" | grep -E "Operation not permitted|Permission denied|Assertion|SIGABRT|core-dump|dumped core" >"$H_DIR/bad.log"; then
      c_fail "$u on $h, journal: $(head -n 3 "$H_DIR/bad.log")"
    fi
  done
done
# The floor of priority = yield needs LimitNICE=+10, which systemd applies
# only up to its own hard limit: say which this host gave the units.
if c_journal inv kfac-invertd@1 | grep -q "the floor is off here"; then
  floor="floor off (this host's RLIMIT_NICE hard limit is below the units' LimitNICE=+10)"
else
  floor="floor available"
fi
h_pass "$floor; 4 hosts under systemd with the docs' keys (an inverse daemon on the PS host too): inverse daemons 3 -> 4 (new host) -> 3; kfac-ps killed and resumed at its checkpoint (step $saved); worker host off and back (step $back); $STEPS steps, test accuracy $acc"
