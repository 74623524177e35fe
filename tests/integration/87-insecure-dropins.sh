#!/bin/sh
# tests/integration/87-insecure-dropins.sh — the insecure mode as
# docs/deployment.md ships it: the drop-ins in deploy/systemd/insecure/,
# each the unit's command line without keys, run the unchanged example
# /etc/kfac/kfac.ini (whose [security] names key files and allowlists):
#   1. every unit has a drop-in that clears LoadCredential= and ExecStart=
#      and starts the same program with the same --config (and --id %i);
#   2. each drop-in's command line passes --dump-config on the example file,
#      with insecure = true for kfac-ps and none of the keys it reads left
#      set (kfac-ps: its keys and the allowlists; a client: its keys and
#      the server's public key);
#   3. kfac-ps from its drop-in binds 0.0.0.0 (refused without keys unless
#      insecure), a worker from its drop-in joins it in plaintext, and a
#      short run ends with both exiting 0.
# (The example's paths are pointed at the build, the repository's model and
# data, and a free port; the security options are the drop-ins' own.)
. tests/integration/harness.inc
h_init 87-insecure-dropins
bin=$(cd "$BUILD" && pwd)
d=deploy/systemd/insecure
for u in kfac-ps.service kfac-worker@.service kfac-statsd@.service kfac-invertd@.service; do
  f=$d/$u.d/insecure.conf
  [ -f "$f" ] || h_fail "no drop-in $f"
  grep -qx "LoadCredential=" "$f" && grep -qx "ExecStart=" "$f" || h_fail "$f does not clear LoadCredential= and ExecStart="
  unit_cmd=$(sed -n 's/^ExecStart=\(.\)/\1/p' "deploy/systemd/$u" | awk '{ print $1, $2, $3 }')
  drop_cmd=$(sed -n 's/^ExecStart=\(.\)/\1/p' "$f" | awk '{ print $1, $2, $3 }')
  [ -n "$drop_cmd" ] && [ "$unit_cmd" = "$drop_cmd" ] || h_fail "$f starts '$drop_cmd', the unit '$unit_cmd'"
  case $u in *@.service) sed -n 's/^ExecStart=\(.\)/\1/p' "$f" | grep -q -- " --id %i" || h_fail "$f lacks --id %i" ;; esac
  sed -n 's/^ExecStart=\(.\)/\1/p' "$f" | grep -q -- "secret_key" && h_fail "$f still passes a secret key"
done

port=$(h_port) || exit 1
sed -e "s|^file = /usr/local/share/kfac/models/|file = models/|" -e "s|^dir = /srv/kfac/data|dir = data|" \
  -e "s|^ps = .*|ps = tcp://127.0.0.1:$port|" -e "s|^bind = .*|bind = tcp://0.0.0.0:$port|" \
  -e "s|^out_dir = .*|out_dir = $H_DIR/run|" deploy/examples/kfac.ini >"$H_DIR/kfac.ini"
cmd() { # unit -> its drop-in's command line for id 1, on this test's paths
  sed -n 's/^ExecStart=\(.\)/\1/p' "$d/$1.d/insecure.conf" |
    sed -e "s|/usr/local/bin/|$bin/|" -e "s|/etc/kfac/kfac.ini|$H_DIR/kfac.ini|" -e "s|%i|1|"
}
for u in kfac-ps.service kfac-worker@.service kfac-statsd@.service kfac-invertd@.service; do
  # shellcheck disable=SC2046 # the command line's words
  $(cmd "$u") --dump-config >"$H_DIR/dump.ini" 2>"$H_DIR/dump.err" ||
    h_fail "$u's drop-in rejects the example configuration: $(cat "$H_DIR/dump.err")"
  set_keys='^((server|client)_(secret|public)_key|allow_[a-z]*) =' # kfac-ps reads them all
  [ "$u" = kfac-ps.service ] || set_keys='^(server_public_key|client_(secret|public)_key) =' # a client: its keys
  sed -n '/^\[security\]/,/^\[/p' "$H_DIR/dump.ini" | grep -E "$set_keys" | grep -v '= ""$' &&
    h_fail "$u's drop-in leaves a key or allowlist set"
  [ "$u" = kfac-ps.service ] && { grep -q '^insecure = true$' "$H_DIR/dump.ini" || h_fail "kfac-ps's drop-in: insecure is not true"; }
done

small="--run.steps 20 --run.eval_every 1000 --run.eval_n 200 --data.train_n 2000 --data.batch 16 --cluster.workers 1
--cluster.statsd 0 --cluster.invertd 0 --optimizer.kind sgd --checkpoint.every 0 --model.file models/mnist-mlp.model"
# shellcheck disable=SC2046,SC2086
h_start ps $(cmd kfac-ps.service) $small
ps_pid=$H_PID
# shellcheck disable=SC2046
h_start worker $(cmd kfac-worker@.service)
w_pid=$H_PID
h_wait "$ps_pid" 120
[ "$H_STATUS" = 0 ] || h_fail "kfac-ps from its drop-in exited $H_STATUS"
h_wait "$w_pid" 30
[ "$H_STATUS" = 0 ] || h_fail "kfac-worker from its drop-in exited $H_STATUS"
grep -q "insecure = true" "$H_DIR/ps.log" || h_fail "kfac-ps did not warn that it runs without keys"
[ -s "$H_DIR/run/steps.csv" ] || h_fail "no steps.csv: the run did not train"
h_pass "4 drop-ins; the example kfac.ini unchanged runs without keys: kfac-ps bound 0.0.0.0, a worker joined in plaintext, 20 steps"
