#!/bin/sh
# sgd-lr: every run of the sweep, exactly as it was started (from the repository root).
cd "${KFAC_ROOT:-/work/main}" || exit 1
sh deploy/kfac-launch experiments/mnist-cnn.ini --port auto --quiet --run.seed 1 --run.out_dir /work/main/runs/sweeps/sgd-lr/sgd-lr0.005/1 --run.target_acc 0.99 --optimizer.kind sgd --cluster.statsd 0 --cluster.invertd 0 --run.steps 1000 --optimizer.lr 0.005  # sgd-lr0.005, seed 1
sh deploy/kfac-launch experiments/mnist-cnn.ini --port auto --quiet --run.seed 1 --run.out_dir /work/main/runs/sweeps/sgd-lr/sgd-lr0.01/1 --run.target_acc 0.99 --optimizer.kind sgd --cluster.statsd 0 --cluster.invertd 0 --run.steps 1000 --optimizer.lr 0.01  # sgd-lr0.01, seed 1
sh deploy/kfac-launch experiments/mnist-cnn.ini --port auto --quiet --run.seed 1 --run.out_dir /work/main/runs/sweeps/sgd-lr/sgd-lr0.02/1 --run.target_acc 0.99 --optimizer.kind sgd --cluster.statsd 0 --cluster.invertd 0 --run.steps 1000 --optimizer.lr 0.02  # sgd-lr0.02, seed 1
sh deploy/kfac-launch experiments/mnist-cnn.ini --port auto --quiet --run.seed 1 --run.out_dir /work/main/runs/sweeps/sgd-lr/sgd-lr0.05/1 --run.target_acc 0.99 --optimizer.kind sgd --cluster.statsd 0 --cluster.invertd 0 --run.steps 1000 --optimizer.lr 0.05  # sgd-lr0.05, seed 1
