#!/bin/sh
# kfac-vs-sgd-mnist: every run of the sweep, exactly as it was started (from the repository root).
cd "${KFAC_ROOT:-/work/main}" || exit 1
sh deploy/kfac-launch experiments/mnist-cnn.ini --port auto --quiet --run.seed 1 --run.out_dir /work/main/runs/sweeps/kfac-vs-sgd-mnist/kfac/1 --run.target_acc 0.99 --kfac.kl_zeta 0.5 --kfac.kl_decay_every 150 --optimizer.kind kfac --run.steps 1500  # kfac, seed 1
sh deploy/kfac-launch experiments/mnist-cnn.ini --port auto --quiet --run.seed 1 --run.out_dir /work/main/runs/sweeps/kfac-vs-sgd-mnist/sgd-lr0.01/1 --run.target_acc 0.99 --kfac.kl_zeta 0.5 --kfac.kl_decay_every 150 --optimizer.kind sgd --optimizer.lr 0.01 --cluster.statsd 0 --cluster.invertd 0 --run.steps 2500  # sgd-lr0.01, seed 1
sh deploy/kfac-launch experiments/mnist-cnn.ini --port auto --quiet --run.seed 2 --run.out_dir /work/main/runs/sweeps/kfac-vs-sgd-mnist/kfac/2 --run.target_acc 0.99 --kfac.kl_zeta 0.5 --kfac.kl_decay_every 150 --optimizer.kind kfac --run.steps 1500  # kfac, seed 2
sh deploy/kfac-launch experiments/mnist-cnn.ini --port auto --quiet --run.seed 2 --run.out_dir /work/main/runs/sweeps/kfac-vs-sgd-mnist/sgd-lr0.01/2 --run.target_acc 0.99 --kfac.kl_zeta 0.5 --kfac.kl_decay_every 150 --optimizer.kind sgd --optimizer.lr 0.01 --cluster.statsd 0 --cluster.invertd 0 --run.steps 2500  # sgd-lr0.01, seed 2
