#!/bin/sh
# tests/integration/10-systemd-units.sh — the systemd units in deploy/systemd
# are valid and hardened, checked offline:
#   - systemd-analyze verify on copies whose ExecStart= points at the built
#     binaries (so "not executable" errors are real ones);
#   - systemd-analyze security --offline=true --threshold=15 on every
#     service: an overall exposure above 1.5 (15 on the tool's 0-100 scale)
#     fails. The units score 1.2; what remains is network access, which a
#     distributed trainer needs (docs/deployment.md, "Security").
# Skipped (exit 77, "skipped: <why>") where systemd-analyze is missing or
# too old for --offline (systemd < 250).
set -u
BUILD=${BUILD:-build}
NAME=10-systemd-units
THRESHOLD=15
command -v systemd-analyze >/dev/null 2>&1 || { echo "$NAME: skipped: systemd-analyze not installed"; exit 77; }
ver=$(systemd-analyze --version | awk 'NR == 1 { print $2 }')
case $ver in *[!0-9]*) ver=0 ;; esac
[ "$ver" -ge 250 ] || { echo "$NAME: skipped: systemd $ver has no 'security --offline'"; exit 77; }
for b in kfac-ps kfac-worker kfac-statsd kfac-invertd; do
  [ -x "$BUILD/$b" ] || { echo "$NAME: FAIL: missing $BUILD/$b"; exit 1; }
done
bin=$(cd "$BUILD" && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kfac-units.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
n=0
for u in deploy/systemd/*.service deploy/systemd/*.target; do
  [ -f "$u" ] || continue
  sed "s|/usr/local/bin/|$bin/|g" "$u" >"$tmp/${u##*/}"
  n=$((n + 1))
done
[ "$n" -ge 5 ] || { echo "$NAME: FAIL: expected 5 units in deploy/systemd, found $n"; exit 1; }
for want in kfac-ps.service kfac-worker@.service kfac-statsd@.service kfac-invertd@.service kfac.target; do
  [ -f "$tmp/$want" ] || { echo "$NAME: FAIL: deploy/systemd/$want is missing"; exit 1; }
done
fail=0
for u in "$tmp"/*; do
  if ! out=$(systemd-analyze verify --man=no "$u" 2>&1) || [ -n "$out" ]; then
    echo "$NAME: FAIL: systemd-analyze verify ${u##*/}:"
    printf '%s\n' "$out" | sed 's/^/    /'
    fail=1
  fi
done
for u in "$tmp"/*.service; do
  grep -q -- "--config /etc/kfac/kfac.ini" "$u" || { echo "$NAME: FAIL: ${u##*/} does not read /etc/kfac/kfac.ini"; fail=1; }
  case ${u##*/} in *@.service) grep -q -- "--id %i" "$u" || { echo "$NAME: FAIL: ${u##*/} does not pass --id %i"; fail=1; } ;; esac
  # kfac-ps binds, and libzmq lists the interfaces (netlink) to do so.
  families="AF_INET AF_INET6 AF_UNIX"
  [ "${u##*/}" = kfac-ps.service ] && families="$families AF_NETLINK"
  for d in NoNewPrivileges=yes ProtectSystem=strict ProtectHome=yes PrivateTmp=yes Restart=on-failure \
    "RestrictAddressFamilies=$families" SystemCallFilter=@system-service; do
    grep -qx "$d" "$u" || { echo "$NAME: FAIL: ${u##*/} lacks $d"; fail=1; }
  done
  if ! out=$(systemd-analyze security --offline=true --threshold=$THRESHOLD "$u" 2>&1); then
    echo "$NAME: FAIL: ${u##*/} is more exposed than $THRESHOLD/100:"
    printf '%s\n' "$out" | grep -E "✗|Overall" | sed 's/^/    /'
    fail=1
  else
    printf '%s\n' "$out" | awk -v u="${u##*/}" '/Overall exposure/ { print "    " u ": exposure " $(NF - 2) }' | sed 's/:$//'
  fi
done
[ "$fail" = 0 ] || exit 1
echo "$NAME: ok: $n units verified, every service at or below exposure $THRESHOLD/100"
