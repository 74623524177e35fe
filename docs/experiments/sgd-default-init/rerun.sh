#!/bin/sh
# sgd-default-init: every run of the sweep, exactly as it was started, from the root of any checkout: the
# folder above this file that holds deploy/kfac-launch, or KFAC_ROOT.
root=${KFAC_ROOT:-$(cd "$(dirname "$0")" && pwd)}
while [ "$root" != / ] && [ ! -f "$root/deploy/kfac-launch" ]; do root=$(dirname "$root"); done
cd "$root" || { echo "rerun.sh: no kfac checkout above $0 (set KFAC_ROOT)" >&2; exit 1; }
build/kfac-train --config experiments/mnist-cnn.ini --run.seed 1 --run.out_dir runs/sweeps/sgd-default-init/base/1 --data.batch 128 --optimizer.kind sgd --optimizer.lr 0.05 --run.steps 1000 --run.eval_every 100 --run.eval_n 0  # base, seed 1
build/kfac-train --config experiments/mnist-cnn.ini --run.seed 2 --run.out_dir runs/sweeps/sgd-default-init/base/2 --data.batch 128 --optimizer.kind sgd --optimizer.lr 0.05 --run.steps 1000 --run.eval_every 100 --run.eval_n 0  # base, seed 2
build/kfac-train --config experiments/mnist-cnn.ini --run.seed 3 --run.out_dir runs/sweeps/sgd-default-init/base/3 --data.batch 128 --optimizer.kind sgd --optimizer.lr 0.05 --run.steps 1000 --run.eval_every 100 --run.eval_n 0  # base, seed 3
