#!/bin/sh
# tests/integration/80-slurm.sh — deploy/slurm/kfac.sbatch under a real Slurm
# started by the test itself on this one machine (not via systemd):
#
#   1. kfac-multiprog for a fake allocation (SLURM_JOB_NODELIST=node[03-05],
#      SLURM_JOB_ID=4242, no Slurm daemons needed): task 0 is kfac-ps bound
#      at port 20000 + 4242 % 10000, then 2 workers, 1 statsd and 2 invertd
#      with ids 1..N, every client pointed at tcp://node03:24242; a bad
#      override is refused before anything is written.
#   2. A private Slurm cluster in the test's temp dir: munged on its own
#      socket with a key generated there, slurmctld and slurmd (Debian's
#      slurm-wlm, run in the foreground as children of this test) from a
#      generated slurm.conf (one node = this host's short name, CPUs = nproc,
#      free SlurmctldPort/SlurmdPort, proctrack/linuxproc, task/none,
#      select/cons_tres, no accounting, auth/munge with AuthInfo=socket=...),
#      found by every Slurm command through SLURM_CONF.
#   3. sbatch -N 1 deploy/slurm/kfac.sbatch run.ini --invertd.max_n 200:
#      the MNIST MLP, K-FAC, 2 workers, 1 inverse daemon, [data] train_n =
#      2000, 30 steps, CURVE on (the job's throwaway keys). Steps wait for
#      their inverses (refresh every 10 steps, max_inverse_staleness 9), and
#      the job's inverse daemon takes no block larger than 200, so the run
#      cannot pass step 0 until another daemon inverts fc1's and fc2's
#      large factors (785, 256, 257).
#   4. Mid-run, the commands of docs/deployment.md ("Adding an inverse
#      daemon to a running CURVE job"): kfac-keygen into the job's invertd
#      allowlist folder (kfac-ps watches it and re-reads it, no signal),
#      srun --jobid --overlap deploy/slurm/kfac-task ...
#      kfac-invertd with its keys and the job's endpoint. Checked through
#      what the run reports: kfac-ps's metrics say 1 inverse daemon and step
#      0 before, its progress lines 2 inverse daemons after; the new daemon
#      was welcomed (ps.log), got jobs and sent results (its log), and every
#      block ended with an inverse (inverse_ages.csv: the large ones only it
#      takes).
#   5. Passes when the job COMPLETED with exit code 0, steps.csv has the 30
#      steps, ps.log ends with kfac-ps's "done:" line and every daemon's
#      status file says 0, the added daemon's too.
# Every wait is bounded; on exit the job is cancelled and slurmd, slurmctld
# and munged (by PID) are stopped. Exit 77 (skip) without Slurm or munge, or
# when not root (slurmd must be root to start jobs).
. tests/integration/harness.inc
h_init 80-slurm
BUILD_ABS=$(cd "$BUILD" && pwd)
root=$(pwd)

# ---- 1. the multi-prog file of a fake allocation ---------------------------------------
cat >"$H_DIR/fake.ini" <<EOF
[run]
out_dir = $H_DIR/fake-out
[model]
file = models/mnist-mlp.model
[cluster]
workers = 2
statsd = 1
invertd = 2
[ps]
bind = tcp://127.0.0.1:0
EOF
mp=$H_DIR/fake.multiprog
env -u KFAC_PORT -u KFAC_PS_HOST -u KFAC_PS_BIND SLURM_JOB_NODELIST='node[03-05]' SLURM_JOB_ID=4242 \
  KFAC_BIN="$BUILD_ABS" sh deploy/slurm/kfac-multiprog "$H_DIR/fake.ini" --kfac.damping 0.02 \
  --invertd.threads=2 >"$mp" 2>"$H_DIR/fake.log" || h_fail "kfac-multiprog failed on the fake allocation"
grep -q '^# kfac: tasks=6$' "$mp" || h_fail "fake allocation: expected 6 tasks: $(cat "$mp")"
ep=tcp://node03:24242
awk -v ep="$ep" -v b="$BUILD_ABS" -v t="$root/deploy/slurm/kfac-task" -v cfg="$H_DIR/fake.ini" '
  /^#/ { next }
  { n++
    want_name = $1 == 0 ? "ps" : $1 <= 2 ? "worker-" $1 : $1 == 3 ? "statsd-1" : "invertd-" ($1 - 3)
    role = want_name; sub(/-.*/, "", role)
    if ($1 != n - 1 || $2 != t || $3 != want_name || $5 != b "/kfac-" role || $7 != cfg) { print "bad line: " $0; bad = 1 }
    if ($NF != "--cluster.ps=" ep) { print "no endpoint last: " $0; bad = 1 }
    if (index($0, " --kfac.damping=0.02 ") == 0) { print "no shared override: " $0; bad = 1 }
    if ((role == "invertd") != (index($0, " --invertd.threads=2 ") > 0)) { print "[invertd] override misrouted: " $0; bad = 1 }
    if (role == "ps" && index($0, " --ps.bind=tcp://0.0.0.0:24242 ") == 0) { print "ps does not bind: " $0; bad = 1 }
    if (role != "ps" && index($0, " --" role ".id=" substr(want_name, length(role) + 2) " ") == 0) { print "no id: " $0; bad = 1 }
  }
  END { exit bad || n != 6 }' "$mp" >"$H_DIR/fake-check.log" ||
  h_fail "fake allocation: wrong multi-prog file: $(cat "$H_DIR/fake-check.log")"
if SLURM_JOB_NODELIST=node1 KFAC_BIN="$BUILD_ABS" sh deploy/slurm/kfac-multiprog "$H_DIR/fake.ini" \
  --invertd.thread 2 >"$H_DIR/bad.multiprog" 2>"$H_DIR/bad.log"; then
  h_fail "kfac-multiprog accepted --invertd.thread"
fi
grep -q "did you mean '--invertd.threads'" "$H_DIR/bad.log" || h_fail "no suggestion for --invertd.thread: $(cat "$H_DIR/bad.log")"
# A boolean given bare means true, as in the daemons; --key false still works.
for args in "--data.augment:true" "--data.augment --kfac.damping 0.02:true" "--data.augment false:false"; do
  # shellcheck disable=SC2086
  SLURM_JOB_NODELIST=node1 KFAC_BIN="$BUILD_ABS" sh deploy/slurm/kfac-multiprog "$H_DIR/fake.ini" ${args%:*} \
    >"$H_DIR/bool.multiprog" 2>"$H_DIR/bool.log" || h_fail "kfac-multiprog ${args%:*} failed: $(cat "$H_DIR/bool.log")"
  [ "$(grep -c -- " --data.augment=${args##*:} " "$H_DIR/bool.multiprog")" = 6 ] ||
    h_fail "kfac-multiprog ${args%:*}: not --data.augment=${args##*:} on every task: $(cat "$H_DIR/bool.multiprog")"
done
echo "80-slurm: multi-prog file of a fake 3-node allocation ok"

# ---- 2. a private Slurm cluster ------------------------------------------------------------
skip() { echo "80-slurm: skipped: $* (the multi-prog check passed)"; exit 77; }
for c in slurmctld slurmd sbatch scontrol scancel sinfo srun munged mungekey; do
  command -v "$c" >/dev/null 2>&1 || PATH=$PATH:/usr/sbin:/sbin command -v "$c" >/dev/null 2>&1 ||
    skip "$c is missing (Debian packages slurm-wlm and munge; tools/deps.sh installs them)"
done
PATH=$PATH:/usr/sbin:/sbin
[ "$(id -u)" = 0 ] || skip "slurmd must run as root to start jobs"
grep -qs ' /sys/fs/cgroup ' /proc/mounts ||
  skip "no cgroup file system is mounted at /sys/fs/cgroup (slurmd will not start without one: a chroot or a container?)"
host=$(hostname -s)
cport=$(h_port) || exit 1
dport=$(h_port) || exit 1
while [ "$dport" = "$cport" ]; do dport=$(h_port) || exit 1; done
kport=$(h_port) || exit 1
S=$H_DIR/slurm
mkdir -p "$S/state" "$S/spool" "$S/munge" || h_fail "mkdir"
# munged insists that every folder above its socket is searchable by all.
chmod 711 "$H_DIR" "$S" "$S/munge"
mungekey --create --keyfile="$S/munge.key" --bits=1024 >"$H_DIR/mungekey.log" 2>&1 || h_fail "mungekey failed"
h_start munged munged --foreground --force --socket="$S/munge/munge.sock" --key-file="$S/munge.key" \
  --pid-file="$S/munged.pid" --log-file="$S/munged.log" --seed-file="$S/munged.seed"
munged_pid=$H_PID
t=0
until [ -S "$S/munge/munge.sock" ]; do
  kill -0 "$munged_pid" 2>/dev/null || h_fail "munged exited"
  [ $t -lt 50 ] || h_fail "munged has no socket after 10 s"
  sleep 0.2
  t=$((t + 1))
done

cat >"$S/slurm.conf" <<EOF
ClusterName=kfactest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$cport
SlurmdPort=$dport
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$S/munge/munge.sock
StateSaveLocation=$S/state
SlurmdSpoolDir=$S/spool
SlurmctldPidFile=$S/slurmctld.pid
SlurmdPidFile=$S/slurmd.pid
SlurmctldLogFile=$S/slurmctld.log
SlurmdLogFile=$S/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
ReturnToService=2
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
NodeName=$host NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
PartitionName=kfactest Nodes=$host Default=YES MaxTime=10 State=UP
EOF
SLURM_CONF=$S/slurm.conf
export SLURM_CONF
job=""
cleanup_slurm() { # cancel our job while slurmd is still there to stop its processes
  if [ -n "$job" ]; then
    # The job's processes (slurmstepd's children) outlive slurmd: note their
    # PIDs first, and kill what scancel leaves.
    jpids=$(timeout 5 scontrol listpids "$job" 2>/dev/null | awk 'NR > 1 && $1 ~ /^[0-9]+$/ { print $1 }')
    timeout 5 scancel "$job" >/dev/null 2>&1
    t=0
    while [ $t -lt 25 ] && timeout 5 squeue -h -j "$job" 2>/dev/null | grep -q .; do sleep 0.2; t=$((t + 1)); done
    for p in $jpids; do kill -KILL "$p" 2>/dev/null; done
  fi
  h_cleanup
}
trap 'cleanup_slurm' EXIT
trap 'cleanup_slurm; exit 130' INT
trap 'cleanup_slurm; exit 143' TERM
trap 'cleanup_slurm; exit 129' HUP

h_start slurmctld slurmctld -D -i -f "$S/slurm.conf"
ctld_pid=$H_PID
h_start slurmd slurmd -D -f "$S/slurm.conf"
slurmd_pid=$H_PID
t=0
deadline=$(($(date +%s) + 20))
until [ "$(timeout 5 sinfo -h -n "$host" -o %t 2>/dev/null)" = idle ]; do
  kill -0 "$ctld_pid" 2>/dev/null || h_fail "slurmctld exited (see $S/slurmctld.log)"
  kill -0 "$slurmd_pid" 2>/dev/null || h_fail "slurmd exited: $(tail -n 5 "$S/slurmd.log" 2>/dev/null)"
  [ $t -lt 100 ] && [ "$(date +%s)" -lt "$deadline" ] || h_fail "node $host is not idle after 20 s: $(timeout 5 sinfo 2>&1)"
  sleep 0.2
  t=$((t + 1))
done
echo "80-slurm: slurmctld (port $cport), slurmd (port $dport) and munged up ($(($(date +%s) - H_T0))s)"

# ---- 3. the run -------------------------------------------------------------------------------
# The clients find kfac-ps by the node's name; kfac-ps binds the address that
# name resolves to (a loopback one here), so nothing listens beyond this host.
addr=$(getent hosts "$host" 2>/dev/null | awk '{ print $1; exit }')
case $addr in
  127.*) ps_bind=$addr; unset KFAC_PS_HOST ;;
  *) ps_bind=127.0.0.1; KFAC_PS_HOST=127.0.0.1; export KFAC_PS_HOST ;;
esac
cat >"$H_DIR/run.ini" <<EOF
[run]
seed = 1
steps = 30
eval_every = 30
eval_n = 1000
out_dir = $H_DIR/out
[model]
file = models/mnist-mlp.model
[data]
batch = 64
train_n = 2000
[optimizer]
kind = kfac
[kfac]
stats = sync
refresh = every
inverse_every = 10
max_inverse_staleness = 9
[cluster]
workers = 2
statsd = 0
invertd = 1
[ps]
progress_every = 10
metrics = 127.0.0.1:0
EOF
job=$(KFAC_BIN=$BUILD_ABS KFAC_PORT=$kport KFAC_PS_BIND=$ps_bind \
  timeout 20 sbatch --parsable -N 1 -D "$root" -o "$H_DIR/job.out" -t 5 \
  deploy/slurm/kfac.sbatch "$H_DIR/run.ini" --invertd.max_n 200 2>"$H_DIR/sbatch.log") ||
  h_fail "sbatch failed: $(cat "$H_DIR/sbatch.log")"
job=${job%%;*}
OUT=$H_DIR/out
logs=$OUT/logs

# ---- 4. an inverse daemon added to the running job (docs/deployment.md) -----------------------
h_wait_log "$logs/ps.log" "listening on" 30 || h_fail "kfac-ps of job $job does not listen after 30 s: $(cat "$H_DIR/job.out")"
h_wait_log "$logs/ps.log" "invertd#[0-9]+ .*joined" 20 || h_fail "the job's inverse daemon did not join"
murl=$(sed -n 's|.*metrics (Prometheus text format) on \(http://[^ ]*\).*|\1|p' "$logs/ps.log" | head -n 1)
[ -n "$murl" ] || h_fail "kfac-ps logged no metrics address"
metric() { curl -s -m 5 "$murl" | awk -v m="$1" '$1 == m { print $2; exit }'; }
sleep 1 # the workers' gradients of step 0 come in; the step waits for fc1's and fc2's inverses
inv_before=$(metric 'kfac_clients{role="invertd"}')
step_before=$(metric kfac_step)
[ "$inv_before" = 1 ] || h_fail "before: kfac-ps's metrics say '$inv_before' inverse daemons, expected 1"
[ "$step_before" = 0 ] || h_fail "before: the run is at step '$step_before'; it should wait for the large blocks' inverses"
# The commands of docs/deployment.md, as a user types them (but with this
# test's folders): a key, kfac-ps told, the daemon as a step of the job.
ID=10
"$BUILD_ABS/kfac-keygen" --out "$OUT/keys/invertd/invertd-$ID" >"$H_DIR/keygen.log" 2>&1 || h_fail "kfac-keygen failed"
timeout 30 sh -c "until grep -q 'allowlists reloaded (a change in .*2 invertd keys' '$logs/ps.log'; do sleep 0.5; done" ||
  h_fail "kfac-ps did not re-read its allowlists within 30 s of the new key (no signal sent)"
grep -q "allowlists reloaded (a change in .*: .* 2 invertd keys" "$logs/ps.log" ||
  h_fail "kfac-ps's reloaded allowlists do not hold 2 invertd keys: $(grep 'allowlists reloaded' "$logs/ps.log")"
ep=$(sed -n 's/^# kfac: endpoint=//p' "$logs/tasks.multiprog")
h_start srun-invertd timeout 120 srun --jobid="$job" --overlap -N 1 -n 1 deploy/slurm/kfac-task "invertd-$ID" "$logs" \
  "$BUILD_ABS/kfac-invertd" --config "$H_DIR/run.ini" --invertd.id "$ID" --cluster.ps "$ep" \
  --security.client_secret_key "$OUT/keys/invertd/invertd-$ID.secret" --security.server_public_key "$OUT/keys/ps.pub"
srun_pid=$H_PID
h_wait_log "$logs/invertd-$ID.log" "first job" 30 ||
  h_fail "the added inverse daemon got no job within 30 s: $(tail -n 5 "$logs/invertd-$ID.log" 2>/dev/null)"
grep -Eq "invertd#[0-9]+ .*joined \(asked for id $ID;" "$logs/ps.log" || h_fail "kfac-ps did not welcome the added daemon"
echo "80-slurm: an inverse daemon added to job $job (kfac-keygen into the watched folder, srun --overlap): welcomed and given jobs ($(($(date +%s) - H_T0))s)"
state=""
t=0
deadline=$(($(date +%s) + 60)) # at most 300 polls and 60 s, however slow scontrol answers
while [ $t -lt 300 ] && [ "$(date +%s)" -lt "$deadline" ]; do
  info=$(timeout 5 scontrol show job -o "$job" 2>/dev/null)
  state=$(printf '%s\n' "$info" | sed -n 's/.* JobState=\([A-Z_]*\).*/\1/p')
  case $state in COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY | PREEMPTED | BOOT_FAIL | DEADLINE) break ;; esac
  sleep 0.2
  t=$((t + 1))
done
exit_code=$(printf '%s\n' "$info" | sed -n 's/.* ExitCode=\([0-9:]*\).*/\1/p')
[ "$state" = COMPLETED ] && [ "$exit_code" = 0:0 ] ||
  h_fail "job $job: state '$state', exit code '$exit_code' (still running after 60 s if empty); job output: $(cat "$H_DIR/job.out" 2>/dev/null)"
steps=$H_DIR/out/steps.csv
[ -r "$steps" ] || h_fail "no steps.csv"
rows=$(awk 'NR > 1' "$steps" | wc -l)
[ "$rows" -eq 30 ] || h_fail "steps.csv has $rows steps, expected 30"
# kfac-ps's last lines: the "done:" summary, then the Shutdown it sent.
tail -n 2 "$logs/ps.log" | grep -q '^done: 30 steps' && tail -n 1 "$logs/ps.log" | grep -q 'exiting with code 0' ||
  h_fail "ps.log does not end with 'done: 30 steps' and 'exiting with code 0': $(tail -n 3 "$logs/ps.log")"
for n in ps worker-1 worker-2 invertd-1; do
  [ "$(cat "$logs/$n.status" 2>/dev/null)" = 0 ] || h_fail "$n: exit status '$(cat "$logs/$n.status" 2>/dev/null)'"
done
grep -q "4 of 4 daemons exited cleanly" "$H_DIR/job.out" || h_fail "no clean summary in the job output: $(cat "$H_DIR/job.out")"
# the added daemon: its step ended with the run, it sent results, kfac-ps counted it
h_wait "$srun_pid" 30
[ "$H_STATUS" = 0 ] && [ "$(cat "$logs/invertd-$ID.status" 2>/dev/null)" = 0 ] ||
  h_fail "the added daemon's step: srun status $H_STATUS, daemon status '$(cat "$logs/invertd-$ID.status" 2>/dev/null)'"
sent=$(sed -n 's/.*), \([0-9]*\) results sent;.*/\1/p' "$logs/invertd-$ID.log" | tail -n 1)
h_ge "${sent:-0}" 1 || h_fail "the added daemon sent no results: $(tail -n 3 "$logs/invertd-$ID.log")"
grep -Eq "step [0-9]+/30 .* invertd 2 " "$logs/ps.log" ||
  h_fail "kfac-ps's progress lines never say 2 inverse daemons: $(grep 'step [0-9]*/30' "$logs/ps.log" | tail -n 3)"
ages=$H_DIR/out/inverse_ages.csv
[ "$(awk 'NR > 1' "$ages" 2>/dev/null | wc -l)" -ge 1 ] || h_fail "no inverse_ages.csv rows"
tail -n 1 "$ages" | awk -F, '{ for (i = 2; i <= NF; i++) if ($i < 0) exit 1 }' ||
  h_fail "a block ended without an inverse: $(head -n 1 "$ages"); $(tail -n 1 "$ages")"
grep -q "^0 .*/kfac-ps .*--ps.bind=tcp://$ps_bind:$kport " "$logs/tasks.multiprog" || h_fail "task 0 is not kfac-ps on port $kport"
inv=$(h_csv_last "$steps" inverses_installed)
h_pass "Slurm job $job: kfac-ps, 2 workers, 1 inverse daemon on $host, 30 steps, $inv inverses installed, every daemon exited 0; an inverse daemon added mid-run (kfac-ps's count 1 -> 2) sent $sent results"
