#!/bin/sh
# tests/integration/12-install.sh — `make install` puts everything under the
# prefix it is given and never writes /etc for a private prefix:
#   1. PREFIX=<tmp>/prefix (no DESTDIR): the example configuration lands in
#      <tmp>/prefix/etc/kfac, the units read <tmp>/prefix/etc/kfac/kfac.ini
#      and start <tmp>/prefix/bin/..., the data fetch script is installed;
#   2. DESTDIR=<tmp>/stage PREFIX=/usr/local: every file is under the stage,
#      with /etc paths inside it;
#   3. SYSCONFDIR given explicitly wins;
# and in no case does anything appear in or change /etc/kfac.
set -u
t0=$(date +%s)
BUILD=${BUILD:-build}
dir=$(mktemp -d "${TMPDIR:-/tmp}/kfac-install.XXXXXX") || exit 1
trap 'rm -rf "$dir"' EXIT
fail() { echo "12-install: FAIL: $*"; exit 1; }
etc_before=$(ls -la --time-style=+%s /etc/kfac 2>/dev/null | md5sum)
make --no-print-directory BUILD="$BUILD" install PREFIX="$dir/prefix" >"$dir/1.log" 2>&1 || { tail -n 20 "$dir/1.log"; fail "make install PREFIX=$dir/prefix failed"; }
p=$dir/prefix
[ -f "$p/etc/kfac/kfac.ini.example" ] || fail "no $p/etc/kfac/kfac.ini.example"
[ -x "$p/bin/kfac-ps" ] && [ -x "$p/bin/kfac-launch" ] || fail "binaries missing under $p/bin"
[ -x "$p/share/kfac/fetch-data.sh" ] || fail "fetch-data.sh not installed"
grep -q "ExecStart=$p/bin/kfac-ps --config $p/etc/kfac/kfac.ini" "$p/lib/systemd/system/kfac-ps.service" ||
  fail "kfac-ps.service does not point at $p: $(grep ExecStart "$p/lib/systemd/system/kfac-ps.service")"
grep -q "RestartPreventExitStatus=2 78" "$p/lib/systemd/system/kfac-worker@.service" || fail "units do not stop restarting on exit 78"
grep -q "file = $p/share/kfac/models/mnist-cnn.model" "$p/etc/kfac/kfac.ini.example" || fail "the example's model path is not under $p"
make --no-print-directory BUILD="$BUILD" install DESTDIR="$dir/stage" PREFIX=/usr/local >"$dir/2.log" 2>&1 || fail "make install DESTDIR failed"
[ -f "$dir/stage/etc/kfac/kfac.ini.example" ] || fail "DESTDIR: no stage/etc/kfac/kfac.ini.example"
[ -x "$dir/stage/usr/local/bin/kfac-ps" ] || fail "DESTDIR: no stage/usr/local/bin/kfac-ps"
grep -q "ExecStart=/usr/local/bin/kfac-ps --config /etc/kfac/kfac.ini" "$dir/stage/usr/local/lib/systemd/system/kfac-ps.service" ||
  fail "DESTDIR: the unit should name the final paths"
make --no-print-directory BUILD="$BUILD" install PREFIX="$dir/p3" SYSCONFDIR="$dir/conf" >"$dir/3.log" 2>&1 || fail "make install SYSCONFDIR failed"
[ -f "$dir/conf/kfac/kfac.ini.example" ] && [ ! -e "$dir/p3/etc" ] || fail "SYSCONFDIR was not honoured"
etc_after=$(ls -la --time-style=+%s /etc/kfac 2>/dev/null | md5sum)
[ "$etc_before" = "$etc_after" ] || fail "/etc/kfac changed"
echo "12-install: ok: private prefix, DESTDIR and SYSCONFDIR installs stay where they are told ($(($(date +%s) - t0))s)"
