#!/bin/sh
# tests/integration/26-kfac-plot.sh — tools/kfac-plot draws one run: a short
# in-process K-FAC run of the MNIST MLP (kfac-train, 80 steps), then
# kfac-plot on its folder. Passes when BASE.png is a PNG and BASE.svg an
# SVG with the six panels' titles and a curve per block (fc1.0 ... fc3.1)
# in the inverse-age panel; a folder without a run is an error (1), a
# missing folder argument a usage error (2), and without gnuplot on the
# PATH the tool says so and exits 77. Needs gnuplot (else a skip).
. tests/integration/harness.inc
h_init 26-kfac-plot
command -v gnuplot >/dev/null 2>&1 || h_skip "no gnuplot (apt-get install gnuplot-nox)"
out=$H_DIR/run
"$BUILD/kfac-train" --model.file models/mnist-mlp.model --optimizer.kind kfac --data.train_n 5000 \
  --run.steps 80 --run.eval_every 20 --run.eval_n 1000 --run.out_dir "$out" >"$H_DIR/train.log" 2>&1 ||
  h_fail "kfac-train failed"
sh tools/kfac-plot "$out" --out "$H_DIR/fig" >"$H_DIR/plot.log" 2>&1 || h_fail "kfac-plot failed: $(cat "$H_DIR/plot.log")"
[ "$(head -c 4 "$H_DIR/fig.png" | od -An -c | tr -d ' ')" = '211PNG' ] || h_fail "fig.png is not a PNG"
for want in "training loss vs steps" "error vs steps" "inverse age of every block vs steps" \
  "training loss vs wall time" "error vs wall time" "curvature supply vs wall time" \
  "fc1.0" "fc1.1" "fc2.0" "fc2.1" "fc3.0" "fc3.1" "test, Polyak average"; do
  grep -q "$want" "$H_DIR/fig.svg" || h_fail "fig.svg lacks '$want'"
done
mkdir "$H_DIR/empty"
sh tools/kfac-plot "$H_DIR/empty" >"$H_DIR/empty.log" 2>&1
[ $? = 1 ] || h_fail "a folder without a run: expected exit 1"
grep -q "holds no run" "$H_DIR/empty.log" || h_fail "no clear message for a folder without a run"
sh tools/kfac-plot >/dev/null 2>&1
[ $? = 2 ] || h_fail "no argument: expected exit 2"
mkdir "$H_DIR/bin"
for t in sh awk sed head wc mkdir dirname basename cat od tr; do
  p=$(command -v "$t") && ln -s "$p" "$H_DIR/bin/$t"
done
PATH=$H_DIR/bin sh tools/kfac-plot "$out" --out "$H_DIR/none" >"$H_DIR/nognuplot.log" 2>&1
st=$?
[ "$st" = 77 ] || h_fail "without gnuplot: expected exit 77, got $st ($(cat "$H_DIR/nognuplot.log"))"
grep -q "gnuplot not found" "$H_DIR/nognuplot.log" || h_fail "without gnuplot: no clear message"
[ ! -e "$H_DIR/none.png" ] || h_fail "without gnuplot a figure appeared"
h_pass "PNG and SVG with six panels and a curve per block; no run: 1, usage: 2, no gnuplot: 77"
