#!/bin/sh
# sgd-default-init: every run of the sweep, exactly as it was started (from the repository root).
cd "${KFAC_ROOT:-/work/main}" || exit 1
/work/main/build/kfac-train --config experiments/mnist-cnn.ini --run.seed 1 --run.out_dir /work/main/runs/sweeps/sgd-default-init/base/1 --data.batch 128 --optimizer.kind sgd --optimizer.lr 0.05 --run.steps 1000 --run.eval_every 100 --run.eval_n 0  # base, seed 1
/work/main/build/kfac-train --config experiments/mnist-cnn.ini --run.seed 2 --run.out_dir /work/main/runs/sweeps/sgd-default-init/base/2 --data.batch 128 --optimizer.kind sgd --optimizer.lr 0.05 --run.steps 1000 --run.eval_every 100 --run.eval_n 0  # base, seed 2
/work/main/build/kfac-train --config experiments/mnist-cnn.ini --run.seed 3 --run.out_dir /work/main/runs/sweeps/sgd-default-init/base/3 --data.batch 128 --optimizer.kind sgd --optimizer.lr 0.05 --run.steps 1000 --run.eval_every 100 --run.eval_n 0  # base, seed 3
