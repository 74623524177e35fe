#!/bin/sh
# tests/integration/15-launcher-args.sh — deploy/kfac-launch turns one
# command line into the right command line for every daemon (--dry-run
# prints them, nothing is started):
#   - a shared key goes to every daemon, qualified (--batch -> --data.batch);
#   - a daemon's own key goes only to that daemon (--max-n -> only the
#     inverse daemons get --invertd.max_n), so no daemon sees an option it
#     would reject; a key in two daemons' sections goes to both (--delay-ms
#     -> --worker.delay_ms and --invertd.delay_ms);
#   - a key only in daemons' own sections goes to each (--threads);
#   - the counts come from the configuration and the overrides (--workers 3
#     gives 3 workers with ids 1..3), --port N points everybody at port N;
#   - every option reaches each daemon whose option table (its --help) has
#     it and no other, one key from every section (so [checkpoint], no
#     role's name, reaches kfac-ps: --checkpoint.every and the bare --every);
#   - options may come before or after CONFIG (the same command lines
#     either way; --check CONFIG works), a second file is refused;
#   - a boolean option given bare means true (--resume, --augment,
#     --insecure, --force), before CONFIG, after it and last on the line;
#     --key false, --key=false and --key no still say false, and a bare
#     key that is not a boolean still needs its value;
#   - an unknown option, --id and a bad --port are usage errors (exit 2).
. tests/integration/harness.inc
h_init 15-launcher-args
cfg=deploy/examples/mnist-cnn-kfac.ini
out="$H_DIR/cmds"
KFAC_BIN="$BUILD" sh deploy/kfac-launch "$cfg" --dry-run --port 23456 --workers 3 --statsd 1 --invertd 2 \
  --batch 32 --max-n 4096 --delay-ms 5 --threads 2 --kfac.damping=0.01 >"$out" 2>"$H_DIR/err.log" ||
  h_fail "--dry-run failed: $(cat "$H_DIR/err.log")"
[ "$(grep -c '' "$out")" = 7 ] || h_fail "expected 7 daemons (1 ps, 3 workers, 1 statsd, 2 invertd), got: $(cat "$out")"
[ "$(grep -c 'kfac-worker ' "$out")" = 3 ] || h_fail "expected 3 workers"
for i in 1 2 3; do grep "kfac-worker " "$out" | grep -q -- "--worker.id=$i" || h_fail "no worker with id $i"; done
grep -q -- "--data.batch=32" "$out" || h_fail "--batch did not become --data.batch"
[ "$(grep -c -- '--data.batch=32' "$out")" = 7 ] || h_fail "--data.batch did not reach every daemon"
[ "$(grep -c -- '--kfac.damping=0.01' "$out")" = 7 ] || h_fail "--kfac.damping did not reach every daemon"
[ "$(grep -c -- '--invertd.max_n=4096' "$out")" = 2 ] || h_fail "--max-n should reach exactly the 2 inverse daemons"
grep -v "kfac-invertd " "$out" | grep -q -- "max_n" && h_fail "a daemon other than kfac-invertd got max_n"
[ "$(grep -c -- '--invertd.delay_ms=5' "$out")" = 2 ] || h_fail "--delay-ms should reach the 2 inverse daemons"
[ "$(grep -c -- '--worker.delay_ms=5' "$out")" = 3 ] || h_fail "--delay-ms should reach the 3 workers"
grep -E "kfac-(ps|statsd) " "$out" | grep -q -- "delay_ms" && h_fail "kfac-ps or kfac-statsd got delay_ms"
grep "kfac-ps " "$out" | grep -q -- "--ps.threads=2" || h_fail "kfac-ps did not get --ps.threads"
grep "kfac-worker " "$out" | grep -q -- "--worker.threads=2" || h_fail "the workers did not get --worker.threads"
grep "kfac-ps " "$out" | grep -q -- "--ps.bind=tcp://127.0.0.1:23456" || h_fail "kfac-ps does not bind port 23456"
[ "$(grep -c -- '--cluster.ps=tcp://127.0.0.1:23456' "$out")" = 7 ] || h_fail "not every daemon points at port 23456"
grep "kfac-statsd " "$out" | grep -q "^nice -n 10 " || h_fail "kfac-statsd does not run at nice 10"

# One key of every section; who must get it comes from the daemons' --help.
keys="run.seed=3 model.file=models/mnist-cnn.model data.batch=32 optimizer.momentum=0.8 kfac.damping=0.01
cluster.workers=2 ps.progress_every=10 checkpoint.every=50 worker.threads=1 statsd.threads=1 invertd.max_n=0
security.insecure=false"
secs=$(for r in ps worker statsd invertd; do "$BUILD/kfac-$r" --help | sed -n 's/^  --\([a-z0-9_]*\)\.[a-z0-9_]*=.*/\1/p'; done | sort -u)
for sec in $secs; do
  echo "$keys" | tr ' ' '\n' | grep -q "^$sec\." || h_fail "section [$sec] (in a daemon's --help) has no key in this test"
done
set --
for kv in $keys; do set -- "$@" "--$kv"; done
KFAC_BIN="$BUILD" sh deploy/kfac-launch "$cfg" --dry-run "$@" >"$out" 2>"$H_DIR/err.log" ||
  h_fail "--dry-run with one key per section failed: $(cat "$H_DIR/err.log")"
for kv in $keys; do
  k=${kv%%=*}
  for r in ps worker statsd invertd; do
    # every command line of kfac-$r has it, or none does
    n=$(grep -c "^[^ ]*kfac-$r \|^nice -n [0-9]* [^ ]*kfac-$r " "$out")
    [ "$n" -ge 1 ] || h_fail "no kfac-$r in the dry run: $(cat "$out")"
    want=0
    "$BUILD/kfac-$r" --help | grep -q -- "^  --$k=" && want=$n
    got=$(grep "^[^ ]*kfac-$r \|^nice -n [0-9]* [^ ]*kfac-$r " "$out" | grep -c -- " --$kv\( \|\$\)")
    [ "$got" = "$want" ] || h_fail "--$kv reached $got of the $n kfac-$r, its --help says $want should: $(grep "kfac-$r " "$out")"
  done
done
grep "kfac-ps " "$out" | grep -q -- "--checkpoint.every=50" || h_fail "--checkpoint.every did not reach kfac-ps"
KFAC_BIN="$BUILD" sh deploy/kfac-launch "$cfg" --dry-run --every 7 >"$out" 2>"$H_DIR/err.log" || h_fail "--every 7 failed: $(cat "$H_DIR/err.log")"
[ "$(grep -c -- '--checkpoint.every=7' "$out")" = 1 ] && grep "kfac-ps " "$out" | grep -q -- "--checkpoint.every=7" ||
  h_fail "the bare --every did not reach kfac-ps alone: $(cat "$out")"

# Options before CONFIG: the same command lines as after it.
KFAC_BIN="$BUILD" sh deploy/kfac-launch "$cfg" --dry-run --port 23456 --workers 3 --batch 32 >"$H_DIR/after" 2>&1 ||
  h_fail "options after CONFIG failed: $(cat "$H_DIR/after")"
KFAC_BIN="$BUILD" sh deploy/kfac-launch --dry-run --port 23456 --workers 3 "$cfg" --batch 32 >"$H_DIR/before" 2>&1 ||
  h_fail "options before CONFIG failed: $(cat "$H_DIR/before")"
cmp -s "$H_DIR/after" "$H_DIR/before" || h_fail "options before CONFIG gave other command lines: $(diff "$H_DIR/after" "$H_DIR/before")"
KFAC_BIN="$BUILD" sh deploy/kfac-launch --check "$cfg" >"$H_DIR/check.log" 2>&1 ||
  h_fail "kfac-launch --check CONFIG failed: $(cat "$H_DIR/check.log")"
grep -q "accept it" "$H_DIR/check.log" || h_fail "kfac-launch --check CONFIG did not check: $(cat "$H_DIR/check.log")"

# Bare booleans: true; an explicit value is kept (the daemons read it).
bare_is() { # WANT KEY ARGS... -> the dry run with ARGS gives kfac-ps --KEY=WANT
  want=$1
  key=$2
  shift 2
  KFAC_BIN="$BUILD" sh deploy/kfac-launch "$@" >"$out" 2>"$H_DIR/err.log" ||
    h_fail "'$*' failed: $(cat "$H_DIR/err.log")"
  grep "kfac-ps " "$out" | grep -q -- " --$key=$want\( \|\$\)" ||
    h_fail "'$*' did not give kfac-ps --$key=$want: $(grep "kfac-ps " "$out")"
}
bare_is true checkpoint.resume "$cfg" --dry-run --resume
bare_is true checkpoint.resume --resume "$cfg" --dry-run
bare_is true data.augment "$cfg" --augment --dry-run --workers 2
bare_is true security.insecure "$cfg" --dry-run --insecure
bare_is true run.force --force "$cfg" --dry-run
bare_is false checkpoint.resume "$cfg" --dry-run --resume false
bare_is no checkpoint.resume "$cfg" --resume no --dry-run
bare_is false checkpoint.resume "$cfg" --dry-run --resume=false
grep "kfac-ps " "$out" | grep -q -- "--cluster.workers" && h_fail "--resume=false took the next argument"
KFAC_BIN="$BUILD" sh deploy/kfac-launch "$cfg" --dry-run --augment --workers 3 >"$out" 2>"$H_DIR/err.log" ||
  h_fail "--augment --workers 3 failed: $(cat "$H_DIR/err.log")"
[ "$(grep -c 'kfac-worker ' "$out")" = 3 ] || h_fail "a bare --augment before --workers 3 did not leave it 3 workers"
KFAC_BIN="$BUILD" "$BUILD/kfac-ps" --config "$cfg" --resume --augment --dump-config >"$out" 2>"$H_DIR/err.log" ||
  h_fail "kfac-ps --resume --augment (bare, last) failed: $(cat "$H_DIR/err.log")"
grep -q "^resume = true" "$out" && grep -q "^augment = true" "$out" || h_fail "kfac-ps: bare booleans did not mean true"
KFAC_BIN="$BUILD" sh deploy/kfac-launch "$cfg" --dry-run --steps >/dev/null 2>"$H_DIR/err.log"
[ $? = 2 ] && grep -q "needs a value" "$H_DIR/err.log" || h_fail "a bare --steps (not a boolean) was not a usage error"

for bad in "--bogus 1" "--checkpoint.bogus 1" "--id 3" "--port 70000" "--nice 40" "$cfg"; do
  # shellcheck disable=SC2086
  KFAC_BIN="$BUILD" sh deploy/kfac-launch "$cfg" --dry-run $bad >/dev/null 2>&1
  st=$?
  [ "$st" = 2 ] || h_fail "'$bad' exited with $st, expected 2 (usage error)"
done
KFAC_BIN="$BUILD" sh deploy/kfac-launch /nonexistent.ini --dry-run >/dev/null 2>&1
[ $? = 2 ] || h_fail "a missing configuration file is not a usage error"
# a value with a line break would become an option of its own (here
# --data.dir for every daemon): refused
st=0
KFAC_BIN="$BUILD" sh deploy/kfac-launch "$cfg" --dry-run --run.out_dir "$H_DIR/x
--data.dir=/elsewhere" >"$H_DIR/nl.log" 2>&1 || st=$?
[ "$st" = 2 ] || h_fail "a value with a line break exited with $st, expected 2"
grep -q "a value with a line break is refused" "$H_DIR/nl.log" || h_fail "the refusal does not say why: $(cat "$H_DIR/nl.log")"
if grep -q -- "--data.dir=/elsewhere" "$H_DIR/nl.log"; then h_fail "the injected option reached a command line"; fi
h_pass "overrides routed to exactly the daemons that read them, [checkpoint] included; options before or after CONFIG; bare booleans true; usage errors exit 2; a value with a line break refused"
