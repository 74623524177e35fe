#!/bin/sh
# tests/integration/27-new-run-folders.sh — runs that name no [run] out_dir
# each get a new folder of their own under runs/, and runs/latest (a link)
# names the newest (common/run/runpick.h). In a temp working directory:
#   1. two kfac-train runs (MNIST MLP, SGD, 3 steps) write two distinct
#      folders runs/YYYYMMDD-HHMMSS[-N], each with its steps.csv, and
#      runs/latest is a link to the second;
#   2. deploy/kfac-launch (kfac-ps and one worker, 10 steps, a checkpoint
#      every 5) takes a third, with its logs in it, and moves runs/latest;
#   3. kfac-ps --resume with --run.steps 20 and no out_dir goes on in the
#      folder runs/latest names: no new folder, its steps.csv reaches step 20;
#   4. kfac-ps on its own: a start that fails (a missing model) takes no
#      folder and leaves runs/latest alone; a run (3 steps) takes a fourth;
#   5. a runs/latest that is a real folder (older versions' default
#      out_dir) is left as it is, with a warning, and the run gets a new folder.
. tests/integration/harness.inc
h_init 27-new-run-folders
root=$(pwd)
case $BUILD in /*) bin=$BUILD ;; *) bin=$root/$BUILD ;; esac
[ -x "$bin/kfac-train" ] || h_fail "missing $bin/kfac-train"
W=$H_DIR/work
mkdir -p "$W" || h_fail "cannot create $W"
cat >"$H_DIR/run.ini" <<EOF2
[run]
seed = 3
steps = 3
eval_every = 100
eval_n = 200
[model]
file = $root/models/mnist-mlp.model
[data]
dir = $root/data
batch = 32
train_n = 512
[optimizer]
kind = sgd
lr = 0.05
[cluster]
workers = 1
statsd = 0
invertd = 0
EOF2
folders() { # the run folders under $W/runs, one a line, sorted
  for d in "$W"/runs/*; do basename "$d"; done | grep -E '^[0-9]{8}-[0-9]{6}(-[0-9]+)?$' | sort
}
latest() { readlink "$W/runs/latest"; }

# 1. two runs of kfac-train
for i in 1 2; do
  (cd "$W" && "$bin/kfac-train" --config "$H_DIR/run.ini") >"$H_DIR/train$i.log" 2>&1 ||
    h_fail "kfac-train run $i failed (status $?)"
done
n=$(folders | wc -l)
[ "$n" -eq 2 ] || h_fail "two kfac-train runs left $n run folders under runs/: $(folders | tr '\n' ' ')"
first=$(folders | head -n 1)
second=$(folders | tail -n 1)
[ "$first" != "$second" ] || h_fail "both runs in one folder $first"
grep -q "this run's folder is runs/$second " "$H_DIR/train2.log" ||
  h_fail "the second run does not name its folder runs/$second: $(grep -m 1 'out_dir' "$H_DIR/train2.log")"
for f in "$first" "$second"; do
  [ "$(awk 'NR > 1' "$W/runs/$f/steps.csv" 2>/dev/null | wc -l)" -eq 3 ] || h_fail "runs/$f/steps.csv does not hold 3 steps"
  grep -q "^out_dir = runs/$f\$" "$W/runs/$f/config.ini" || h_fail "runs/$f/config.ini does not name its folder"
done
[ -L "$W/runs/latest" ] || h_fail "runs/latest is not a link"
[ "$(latest)" = "$second" ] || h_fail "runs/latest points at '$(latest)', expected the second run $second"

# 2. the launcher: a third folder, its logs in it, a checkpoint at step 10
port=$(h_port) || exit 1
(cd "$W" && KFAC_BIN="$bin" sh "$root/deploy/kfac-launch" "$H_DIR/run.ini" --port "$port" --quiet \
  --run.steps 10 --checkpoint.every 5) >"$H_DIR/launch.log" 2>&1 || h_fail "kfac-launch failed (status $?)"
third=$(latest)
[ "$(folders | wc -l)" -eq 3 ] || h_fail "after kfac-launch: $(folders | wc -l) run folders, expected 3"
[ "$third" != "$second" ] && [ "$third" != "$first" ] || h_fail "runs/latest still points at an older run ($third)"
[ -d "$W/runs/$third" ] || h_fail "runs/latest points at $third, which is not a folder"
[ -s "$W/runs/$third/logs/ps.log" ] || h_fail "kfac-launch's logs are not in runs/$third/logs"
[ "$(h_csv_last "$W/runs/$third/steps.csv" step)" = 10 ] || h_fail "runs/$third/steps.csv does not end at step 10"
ls "$W/runs/$third/checkpoints/"ckpt-*.kfc >/dev/null 2>&1 || h_fail "no checkpoint in runs/$third/checkpoints"

# 3. kfac-ps --resume without out_dir: on in runs/latest's folder, to step 20
port=$(h_port) || exit 1
h_start resume-ps sh -c "cd '$W' && exec '$bin/kfac-ps' --config '$H_DIR/run.ini' --resume --run.steps 20 \
  --ps.bind tcp://127.0.0.1:$port"
ps_pid=$H_PID
h_wait_log "$H_DIR/resume-ps.log" "listening on" 30 || h_fail "the resumed kfac-ps does not listen"
h_start resume-worker "$bin/kfac-worker" --config "$H_DIR/run.ini" --worker.id 1 --cluster.ps "tcp://127.0.0.1:$port"
h_wait "$ps_pid" 60
[ "$H_STATUS" = 0 ] || h_fail "the resumed kfac-ps exited with status $H_STATUS (124: still running after 60 s)"
grep -q "going on in the newest run's folder runs/$third " "$H_DIR/resume-ps.log" ||
  h_fail "kfac-ps --resume does not say it goes on in runs/$third"
grep -q "resumed from runs/$third/checkpoints/ckpt-0000000010.kfc: step 10" "$H_DIR/resume-ps.log" ||
  h_fail "kfac-ps --resume did not resume from runs/$third's checkpoint of step 10"
[ "$(folders | wc -l)" -eq 3 ] || h_fail "kfac-ps --resume made a new folder: $(folders | tr '\n' ' ')"
[ "$(latest)" = "$third" ] || h_fail "after --resume runs/latest points at '$(latest)', expected $third"
[ "$(h_csv_last "$W/runs/$third/steps.csv" step)" = 20 ] || h_fail "runs/$third/steps.csv does not go on to step 20"
[ "$(awk 'NR > 1' "$W/runs/$third/steps.csv" | wc -l)" -eq 20 ] || h_fail "runs/$third/steps.csv does not hold 20 rows"

# 4. kfac-ps alone: a start that fails takes no folder; a run takes a fourth
(cd "$W" && "$bin/kfac-ps" --config "$H_DIR/run.ini" --model.file missing.model) >"$H_DIR/ps-fail.log" 2>&1
st=$?
[ "$st" = 78 ] || h_fail "kfac-ps with a missing model: expected exit 78, got $st"
[ "$(folders | wc -l)" -eq 3 ] && [ "$(latest)" = "$third" ] ||
  h_fail "kfac-ps that failed to start took a folder or moved runs/latest: $(folders | tr '\n' ' ') latest -> $(latest)"
port=$(h_port) || exit 1
h_start new-ps sh -c "cd '$W' && exec '$bin/kfac-ps' --config '$H_DIR/run.ini' --ps.bind tcp://127.0.0.1:$port"
ps_pid=$H_PID
h_wait_log "$H_DIR/new-ps.log" "listening on" 30 || h_fail "kfac-ps without out_dir does not listen"
h_start new-worker "$bin/kfac-worker" --config "$H_DIR/run.ini" --worker.id 1 --cluster.ps "tcp://127.0.0.1:$port"
h_wait "$ps_pid" 60
[ "$H_STATUS" = 0 ] || h_fail "kfac-ps without out_dir exited with status $H_STATUS (124: still running after 60 s)"
fourth=$(latest)
[ "$(folders | wc -l)" -eq 4 ] && [ "$fourth" != "$third" ] || h_fail "kfac-ps took no new folder: $(folders | tr '\n' ' ')"
grep -q "this run's folder is runs/$fourth " "$H_DIR/new-ps.log" || h_fail "kfac-ps does not name its folder runs/$fourth"
[ "$(h_csv_last "$W/runs/$fourth/steps.csv" step)" = 3 ] && [ -s "$W/runs/$fourth/endpoint" ] ||
  h_fail "runs/$fourth does not hold kfac-ps's run (3 steps, endpoint)"

# 5. an older version's runs/latest folder is never touched
O=$H_DIR/old
mkdir -p "$O/runs/latest" && echo "step" >"$O/runs/latest/steps.csv" || h_fail "cannot set up $O"
(cd "$O" && "$bin/kfac-train" --config "$H_DIR/run.ini") >"$H_DIR/train-old.log" 2>&1 ||
  h_fail "kfac-train beside an old runs/latest folder failed (status $?)"
[ -d "$O/runs/latest" ] && [ ! -L "$O/runs/latest" ] && [ "$(cat "$O/runs/latest/steps.csv")" = step ] ||
  h_fail "the old runs/latest folder was changed"
grep -q "runs/latest is a folder (the run folder of an older kfac), not a link: left as it is" "$H_DIR/train-old.log" ||
  h_fail "no warning about the old runs/latest folder"
[ "$(for d in "$O"/runs/*; do basename "$d"; done | grep -cE '^[0-9]{8}-[0-9]{6}$')" -eq 1 ] ||
  h_fail "no new folder beside the old runs/latest"
h_pass "runs/$first, runs/$second (kfac-train), runs/$third (launcher, then --resume to step 20), runs/$fourth (kfac-ps), runs/latest -> the newest; an old runs/latest folder kept"
