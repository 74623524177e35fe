#!/bin/sh
# tests/integration/25-run-folder.sh — one run per folder, and the weights
# a run leaves behind, checked from outside kfac:
#   1. kfac-train (in-process, the MNIST MLP, 300 K-FAC steps on the first
#      10000 training examples) writes steps.csv (a row per step), eval.csv,
#      config.ini (which kfac-train reads back to the same configuration),
#      model.txt (the model file), params.npy, params_polyak.npy and
#      manifest.json into --run.out_dir;
#   2. a second run into the same folder is refused with exit 78 and the
#      message naming the folder and --force; with --force it runs;
#   3. kfac-ps and deploy/kfac-launch refuse the folder the same way,
#      before anything starts;
#      a kfac-ps that cannot bind its port leaves no run files behind;
#   4. Debian's python3 with NumPy loads the .npy files and the manifest,
#      runs the MLP's forward pass over the whole MNIST test set (10000
#      images) with the manifest's layer shapes, offsets and input
#      normalization, and gets the manifest's test accuracy for both the
#      current parameters and their Polyak average, within 0.05 points.
# Part 4 needs /usr/bin/python3 with numpy (Debian: python3-numpy); without
# it the test is a skip (exit 77) after parts 1-3 passed.
. tests/integration/harness.inc
h_init 25-run-folder
[ -x "$BUILD/kfac-train" ] || h_fail "missing $BUILD/kfac-train"
out=$H_DIR/run
train() { # extra args...
  "$BUILD/kfac-train" --model.file models/mnist-mlp.model --optimizer.kind kfac --data.train_n 10000 \
    --data.batch 64 --run.steps 300 --run.eval_every 100 --run.eval_n 2000 --run.seed 7 --run.out_dir "$out" "$@"
}
train >"$H_DIR/train1.log" 2>&1 || h_fail "kfac-train failed (status $?)"
for f in steps.csv eval.csv config.ini model.txt params.npy params_polyak.npy manifest.json; do
  [ -s "$out/$f" ] || h_fail "kfac-train wrote no $f"
done
rows=$(awk 'NR > 1' "$out/steps.csv" | wc -l)
[ "$rows" -eq 300 ] || h_fail "steps.csv has $rows rows, expected 300"
[ "$(head -n 1 "$out/steps.csv")" = "step,wall_s,train_loss,train_acc,step_size,inv_age_mean,inv_age_max,inv_age_ms_mean,stats_age_mean,inverses_installed,stats_folded,workers_present,wait_ms,curv_ms,update_ms,publish_ms,eval_busy,grad_age_mean,grad_age_max,damping,grad_weight_mean" ] ||
  h_fail "steps.csv header differs from kfac-ps's: $(head -n 1 "$out/steps.csv")"
inv=$(h_csv_last "$out/steps.csv" inverses_installed)
h_ge "$inv" 1 || h_fail "a K-FAC run recorded no inverse ($inv)"
erows=$(awk 'NR > 1' "$out/eval.csv" | wc -l)
[ "$erows" -eq 3 ] || h_fail "eval.csv has $erows rows, expected 3 (steps 100, 200, 300)"
cmp -s "$out/model.txt" models/mnist-mlp.model || h_fail "model.txt is not the model file"
# config.ini is the effective configuration: read back, it is the same run
"$BUILD/kfac-train" --config "$out/config.ini" --dump-config >"$H_DIR/dump.ini" 2>&1 ||
  h_fail "kfac-train cannot read config.ini back: $(head -n 3 "$H_DIR/dump.ini")"
grep -q '^steps = 300$' "$H_DIR/dump.ini" && grep -q '^seed = 7$' "$H_DIR/dump.ini" ||
  h_fail "config.ini does not hold the run's steps and seed"

# 2. the folder holds a run now
train --run.steps 5 >"$H_DIR/train2.log" 2>&1
st=$?
[ "$st" = 78 ] || h_fail "a second run into $out: expected exit 78, got $st"
grep -q "out_dir $out holds a previous run (steps.csv); use --force to overwrite it or choose another --run.out_dir" \
  "$H_DIR/train2.log" || h_fail "no clear refusal: $(head -n 3 "$H_DIR/train2.log")"
[ "$(awk 'NR > 1' "$out/steps.csv" | wc -l)" -eq 300 ] || h_fail "the refused run touched steps.csv"
cp -r "$out" "$H_DIR/keep"
out=$H_DIR/forced
cp -r "$H_DIR/keep" "$out"
train --run.steps 5 --force >"$H_DIR/train3.log" 2>&1 || h_fail "--force: kfac-train failed (status $?)"
[ "$(awk 'NR > 1' "$out/steps.csv" | wc -l)" -eq 5 ] || h_fail "--force did not start steps.csv afresh"
grep -q '^force = false$' "$out/config.ini" || h_fail "config.ini of a forced run keeps force = true"
out=$H_DIR/keep

# 3. kfac-ps: the same rule, before it binds
port=$(h_port) || exit 1
"$BUILD/kfac-ps" --model.file models/mnist-mlp.model --run.out_dir "$out" --ps.bind "tcp://127.0.0.1:$port" \
  >"$H_DIR/ps.log" 2>&1
st=$?
[ "$st" = 78 ] || h_fail "kfac-ps on a folder holding a run: expected exit 78, got $st"
grep -q "holds a previous run" "$H_DIR/ps.log" || h_fail "kfac-ps: no clear refusal: $(head -n 3 "$H_DIR/ps.log")"
# deploy/kfac-launch: refused before any daemon starts (no logs/ made)
printf '[run]\nout_dir = %s\n[model]\nfile = models/mnist-mlp.model\n' "$out" >"$H_DIR/launch.ini"
KFAC_BIN="$BUILD" sh deploy/kfac-launch "$H_DIR/launch.ini" --port auto --quiet >"$H_DIR/launch.log" 2>&1
st=$?
[ "$st" = 78 ] || h_fail "kfac-launch on a folder holding a run: expected exit 78, got $st"
grep -q "kfac-launch: out_dir $out holds a previous run (steps.csv); use --force" "$H_DIR/launch.log" ||
  h_fail "kfac-launch: no clear refusal: $(head -n 3 "$H_DIR/launch.log")"
[ ! -d "$out/logs" ] || h_fail "kfac-launch created $out/logs before refusing"
# a start that fails (the port is taken) leaves no run behind: the same
# command, once the port is free, is not refused
h_start ps-a "$BUILD/kfac-ps" --model.file models/mnist-mlp.model --run.out_dir "$H_DIR/ps-a" \
  --ps.bind "tcp://127.0.0.1:$port"
h_wait_log "$H_DIR/ps-a.log" "listening on" 30 || h_fail "kfac-ps (a) does not listen"
"$BUILD/kfac-ps" --model.file models/mnist-mlp.model --run.out_dir "$H_DIR/ps-b" --ps.bind "tcp://127.0.0.1:$port" \
  >"$H_DIR/ps-b.log" 2>&1
st=$?
[ "$st" = 1 ] || h_fail "kfac-ps on a taken port: expected exit 1, got $st"
for f in steps.csv eval.csv manifest.json; do
  [ ! -e "$H_DIR/ps-b/$f" ] || h_fail "kfac-ps that could not bind left $f behind"
done

# 4. the weights, outside kfac
py=/usr/bin/python3
[ -x "$py" ] || h_skip "parts 1-3 passed; no /usr/bin/python3 for the NumPy check (apt-get install python3-numpy)"
"$py" -c 'import numpy' 2>/dev/null ||
  h_skip "parts 1-3 passed; python3 has no numpy for the NumPy check (apt-get install python3-numpy)"
"$py" - "$out" data/mnist >"$H_DIR/numpy.log" 2>&1 <<'EOF'
import gzip, json, os, sys
import numpy as np

run, data = sys.argv[1], sys.argv[2]
man = json.load(open(os.path.join(run, "manifest.json")))

def idx(name):
    p = os.path.join(data, name)
    raw = gzip.open(p + ".gz").read() if not os.path.exists(p) else open(p, "rb").read()
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)

x = idx("t10k-images-idx3-ubyte").astype(np.float32)
y = idx("t10k-labels-idx1-ubyte").astype(np.int64)
norm = man["input_normalization"]
x = (x / np.float32(255.0) - np.float32(norm["mean"][0])) / np.float32(norm["std"][0])
x = x.reshape(x.shape[0], -1)

def forward(flat):
    assert flat.dtype == np.float32 and flat.ndim == 1 and flat.size == man["n_params"], (flat.dtype, flat.shape)
    h = x
    for layer in man["layers"]:
        p = {q["name"]: flat[q["offset"]:q["offset"] + q["count"]].reshape(q["shape"]) for q in layer["params"]}
        k = layer["kind"]
        if k == "flatten":
            h = h.reshape(h.shape[0], -1)
        elif k == "fc":
            h = h @ p["w"].T + (p["b"] if "b" in p else 0)
        elif k == "relu":
            h = np.maximum(h, 0)
        elif k == "softmax_xent":
            pass
        else:
            sys.exit("layer kind %s is not in this reference" % k)
    return float(np.mean(np.argmax(h, axis=1) == y))

fin = man["final"]
assert fin["test_examples"] == y.size, fin
ok = True
for fname, key in (("params.npy", "test_acc"), ("params_polyak.npy", "polyak_acc")):
    acc = forward(np.load(os.path.join(run, fname)))
    print("%s: NumPy accuracy %.4f, manifest %.4f" % (fname, acc, fin[key]))
    if abs(acc - fin[key]) > 0.0005:
        ok = False
sys.exit(0 if ok else 1)
EOF
st=$?
cat "$H_DIR/numpy.log"
[ "$st" = 0 ] || h_fail "the NumPy forward pass does not match the manifest: $(tail -n 3 "$H_DIR/numpy.log")"
h_pass "run folder complete, reuse refused (78) and forced, weights reproduce the manifest's accuracies in NumPy"
