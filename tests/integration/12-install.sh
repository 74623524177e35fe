#!/bin/sh
# tests/integration/12-install.sh — `make install` puts everything under the
# prefix it is given and never writes /etc for a private prefix:
#   1. PREFIX=<tmp>/prefix (no DESTDIR): the example configuration lands in
#      <tmp>/prefix/etc/kfac, the units read <tmp>/prefix/etc/kfac/kfac.ini
#      and start <tmp>/prefix/bin/..., the data fetch script, the
#      Grafana dashboard and the GPU hosts' drop-ins are installed;
#   2. DESTDIR=<tmp>/stage PREFIX=/usr/local: every file is under the stage,
#      with /etc paths inside it;
#   3. SYSCONFDIR given explicitly wins;
#   4. the installed example run files name the installed models (each one
#      exists) and the data folder (KFAC_DATA, default /srv/kfac/data), never
#      the repository's models/ and data; the installed kfac-train runs the
#      installed MLP example from another folder;
#   4a. the installed fetch-data.sh fetches what it is asked for: with MNIST
#      in place and no Fashion-MNIST package, `fetch-data.sh mnist` and the
#      bare call succeed (the latter with a note naming the package), and
#      `fetch-data.sh fashion-mnist` fails naming the Debian package (never
#      `make deps`, which an installed host lacks);
#   4b. make uninstall removes every file of an install;
#   5. on a fresh build tree, `make install` asks tools/deps.sh for the
#      build's packages only (never the test stack: a worker host set up
#      by docs/deployment.md gets no test package); `make check` for them;
# and in no case does anything appear in or change /etc/kfac.
set -u
t0=$(date +%s)
BUILD=${BUILD:-build}
dir=$(mktemp -d "${TMPDIR:-/tmp}/kfac-install.XXXXXX") || exit 1
trap 'rm -rf "$dir"' EXIT
fail() { echo "12-install: FAIL: $*"; exit 1; }
etc_before=$(ls -la --time-style=+%s /etc/kfac 2>/dev/null | md5sum)
# 5: what a fresh tree's make install and make check would ask for (make -n)
want_deps() { # target groups: the tools/deps.sh groups make -n TARGET runs, one line
  got=$(make -n --no-print-directory BUILD="$dir/fresh" CUDA=0 "$1" 2>/dev/null |
    sed -n 's/^sh tools\/deps.sh \([a-z]*\)$/\1/p' | sort -u | tr '\n' ' ')
  [ "$got" = "$2 " ] || fail "make $1 on a fresh tree runs tools/deps.sh '${got% }', expected '$2'"
}
want_deps install build
want_deps all build
want_deps data data
want_deps check test
make --no-print-directory BUILD="$BUILD" install PREFIX="$dir/prefix" >"$dir/1.log" 2>&1 || { tail -n 20 "$dir/1.log"; fail "make install PREFIX=$dir/prefix failed"; }
p=$dir/prefix
[ -f "$p/etc/kfac/kfac.ini.example" ] || fail "no $p/etc/kfac/kfac.ini.example"
[ -x "$p/bin/kfac-ps" ] && [ -x "$p/bin/kfac-launch" ] || fail "binaries missing under $p/bin"
[ -x "$p/share/kfac/fetch-data.sh" ] || fail "fetch-data.sh not installed"
cmp -s deploy/grafana/kfac-dashboard.json "$p/share/kfac/grafana/kfac-dashboard.json" || fail "the Grafana dashboard is not installed"
for u in kfac-worker kfac-statsd; do
  grep -qx "PrivateDevices=no" "$p/share/kfac/systemd/gpu/$u@.service.d/gpu.conf" 2>/dev/null || fail "the GPU drop-in of $u@ is not installed"
done
grep -q "ExecStart=$p/bin/kfac-ps --config $p/etc/kfac/kfac.ini" "$p/lib/systemd/system/kfac-ps.service" ||
  fail "kfac-ps.service does not point at $p: $(grep ExecStart "$p/lib/systemd/system/kfac-ps.service")"
grep -q "RestartPreventExitStatus=2 78" "$p/lib/systemd/system/kfac-worker@.service" || fail "units do not stop restarting on exit 78"
grep -q "file = $p/share/kfac/models/mnist-cnn.model" "$p/etc/kfac/kfac.ini.example" || fail "the example's model path is not under $p"
# 4: the example run files
ex=$p/share/kfac/examples
n_ex=0
for f in "$ex"/*.ini; do
  [ -f "$f" ] || fail "no example run files under $ex"
  n_ex=$((n_ex + 1))
  ! grep -Eq '^(file = models/|dir = data$)' "$f" || fail "$f still names the repository: $(grep -E '^(file|dir) =' "$f")"
  for m in $(sed -n 's/^file = //p' "$f"); do
    case $m in "$p"/share/kfac/models/*) ;; *) fail "$f: model $m is not under $p/share/kfac/models" ;; esac
    [ -r "$m" ] || fail "$f names $m, which was not installed"
  done
  d=$(sed -n 's/^dir = //p' "$f")
  [ -z "$d" ] || [ "$d" = /srv/kfac/data ] || fail "$f: data folder $d, expected /srv/kfac/data"
done
[ "$n_ex" -ge 3 ] || fail "expected at least 3 example run files, found $n_ex"
repo=$(pwd)
(cd "$dir" && "$p/bin/kfac-train" --config "$ex/mnist-mlp-sgd.ini" --data.dir "$repo/data" --steps 3 --train-n 500 \
  --eval-every 3 --eval-n 200 >"$dir/train.log" 2>&1) || { tail -n 5 "$dir/train.log"; fail "the installed kfac-train did not run the installed MLP example from $dir"; }
grep -q "^done: 3 steps" "$dir/train.log" || fail "the installed example did not train: $(tail -n 2 "$dir/train.log")"
# The installed kfac-plot finds its gnuplot files from any folder (77: no gnuplot here).
plot_skip=""
st=0
(cd "$dir" && "$p/bin/kfac-plot" runs/mnist-mlp-sgd >"$dir/plot.log" 2>&1) || st=$?
case $st in
  0) ls "$dir"/runs/mnist-mlp-sgd/*.png >/dev/null 2>&1 || fail "the installed kfac-plot drew no .png: $(tail -n 3 "$dir/plot.log")" ;;
  77) plot_skip="gnuplot is missing, so the installed kfac-plot drew nothing" ;;
  *) fail "the installed kfac-plot failed (status $st): $(tail -n 3 "$dir/plot.log")" ;;
esac
make --no-print-directory BUILD="$BUILD" install PREFIX="$dir/p4" KFAC_DATA=/opt/kfac-data >"$dir/4.log" 2>&1 || fail "make install KFAC_DATA failed"
grep -q '^dir = /opt/kfac-data$' "$dir/p4/share/kfac/examples/mnist-mlp-sgd.ini" || fail "KFAC_DATA was not honoured in the examples"
grep -q '^dir = /opt/kfac-data$' "$dir/p4/etc/kfac/kfac.ini.example" || fail "KFAC_DATA was not honoured in kfac.ini.example"
make --no-print-directory BUILD="$BUILD" install DESTDIR="$dir/stage" PREFIX=/usr/local >"$dir/2.log" 2>&1 || fail "make install DESTDIR failed"
[ -f "$dir/stage/etc/kfac/kfac.ini.example" ] || fail "DESTDIR: no stage/etc/kfac/kfac.ini.example"
[ -x "$dir/stage/usr/local/bin/kfac-ps" ] || fail "DESTDIR: no stage/usr/local/bin/kfac-ps"
grep -q "ExecStart=/usr/local/bin/kfac-ps --config /etc/kfac/kfac.ini" "$dir/stage/usr/local/lib/systemd/system/kfac-ps.service" ||
  fail "DESTDIR: the unit should name the final paths"
make --no-print-directory BUILD="$BUILD" install PREFIX="$dir/p3" SYSCONFDIR="$dir/conf" >"$dir/3.log" 2>&1 || fail "make install SYSCONFDIR failed"
[ -f "$dir/conf/kfac/kfac.ini.example" ] && [ ! -e "$dir/p3/etc" ] || fail "SYSCONFDIR was not honoured"
# 4a: an installed host's data folder, MNIST already in place (no network)
fd=$p/share/kfac/fetch-data.sh
if [ -r data/mnist/train-images-idx3-ubyte ]; then
  mkdir -p "$dir/data/mnist" && cp data/mnist/*-ubyte "$dir/data/mnist/"
  KFAC_DATA="$dir/data" KFAC_FASHION_SRC="$dir/none" sh "$fd" mnist >"$dir/fd1.log" 2>&1 ||
    fail "fetch-data.sh mnist with MNIST in place failed: $(cat "$dir/fd1.log")"
  KFAC_DATA="$dir/data" KFAC_FASHION_SRC="$dir/none" sh "$fd" >"$dir/fd2.log" 2>&1 ||
    fail "fetch-data.sh without Fashion-MNIST's package failed: $(cat "$dir/fd2.log")"
  grep -q "dataset-fashion-mnist" "$dir/fd2.log" || fail "fetch-data.sh did not name the missing package: $(cat "$dir/fd2.log")"
  KFAC_DATA="$dir/data" KFAC_FASHION_SRC="$dir/none" sh "$fd" fashion-mnist >"$dir/fd3.log" 2>&1 &&
    fail "fetch-data.sh fashion-mnist without its package succeeded"
  grep -q "apt-get install dataset-fashion-mnist" "$dir/fd3.log" && ! grep -q "make deps" "$dir/fd3.log" ||
    fail "fetch-data.sh fashion-mnist: the fix should be the Debian package: $(cat "$dir/fd3.log")"
  [ ! -e "$dir/data/fashion-mnist" ] || fail "fetch-data.sh mnist made a fashion-mnist folder"
fi
# make uninstall takes back every file make install put under the prefix
make --no-print-directory BUILD="$BUILD" uninstall PREFIX="$dir/p3" SYSCONFDIR="$dir/conf" >"$dir/u.log" 2>&1 ||
  fail "make uninstall failed: $(tail -n 5 "$dir/u.log")"
left=$(find "$dir/p3" "$dir/conf" -type f 2>/dev/null)
[ -z "$left" ] || fail "make uninstall left files behind: $left"
etc_after=$(ls -la --time-style=+%s /etc/kfac 2>/dev/null | md5sum)
[ "$etc_before" = "$etc_after" ] || fail "/etc/kfac changed"
if [ -n "$plot_skip" ]; then
  echo "12-install: skipped: $plot_skip (every other check passed; tools/deps.sh installs gnuplot-nox)"
  exit 77
fi
echo "12-install: ok: private prefix, DESTDIR and SYSCONFDIR installs stay where they are told, the $n_ex example run files name installed models and the data folder and run from anywhere, kfac-plot draws ($(($(date +%s) - t0))s)"
