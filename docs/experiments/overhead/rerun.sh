#!/bin/sh
# overhead: every run of the sweep, exactly as it was started, from the root of any checkout: the
# folder above this file that holds deploy/kfac-launch, or KFAC_ROOT.
root=${KFAC_ROOT:-$(cd "$(dirname "$0")" && pwd)}
while [ "$root" != / ] && [ ! -f "$root/deploy/kfac-launch" ]; do root=$(dirname "$root"); done
cd "$root" || { echo "rerun.sh: no kfac checkout above $0 (set KFAC_ROOT)" >&2; exit 1; }
sh deploy/kfac-launch experiments/mnist-cnn.ini --port auto --quiet --run.seed 1 --run.out_dir runs/sweeps/overhead/sgd-pinned/1 --cluster.workers 1 --run.steps 200 --run.eval_every 200 --optimizer.kind sgd --optimizer.lr 0.01 --cluster.statsd 0 --cluster.invertd 0 --ps.cpus 0 --worker.cpus 0  # sgd-pinned, seed 1
sh deploy/kfac-launch experiments/mnist-cnn.ini --port auto --quiet --run.seed 1 --run.out_dir runs/sweeps/overhead/kfac-pinned/1 --cluster.workers 1 --run.steps 200 --run.eval_every 200 --optimizer.kind kfac --ps.cpus 0 --worker.cpus 0 --statsd.cpus 1 --invertd.cpus 1  # kfac-pinned, seed 1
sh deploy/kfac-launch experiments/mnist-cnn.ini --port auto --quiet --run.seed 1 --run.out_dir runs/sweeps/overhead/sgd-shared/1 --cluster.workers 1 --run.steps 200 --run.eval_every 200 --optimizer.kind sgd --optimizer.lr 0.01 --cluster.statsd 0 --cluster.invertd 0  # sgd-shared, seed 1
sh deploy/kfac-launch experiments/mnist-cnn.ini --port auto --quiet --run.seed 1 --run.out_dir runs/sweeps/overhead/kfac-shared/1 --cluster.workers 1 --run.steps 200 --run.eval_every 200 --optimizer.kind kfac  # kfac-shared, seed 1
sh deploy/kfac-launch experiments/mnist-cnn.ini --port auto --quiet --run.seed 2 --run.out_dir runs/sweeps/overhead/sgd-pinned/2 --cluster.workers 1 --run.steps 200 --run.eval_every 200 --optimizer.kind sgd --optimizer.lr 0.01 --cluster.statsd 0 --cluster.invertd 0 --ps.cpus 0 --worker.cpus 0  # sgd-pinned, seed 2
sh deploy/kfac-launch experiments/mnist-cnn.ini --port auto --quiet --run.seed 2 --run.out_dir runs/sweeps/overhead/kfac-pinned/2 --cluster.workers 1 --run.steps 200 --run.eval_every 200 --optimizer.kind kfac --ps.cpus 0 --worker.cpus 0 --statsd.cpus 1 --invertd.cpus 1  # kfac-pinned, seed 2
sh deploy/kfac-launch experiments/mnist-cnn.ini --port auto --quiet --run.seed 2 --run.out_dir runs/sweeps/overhead/sgd-shared/2 --cluster.workers 1 --run.steps 200 --run.eval_every 200 --optimizer.kind sgd --optimizer.lr 0.01 --cluster.statsd 0 --cluster.invertd 0  # sgd-shared, seed 2
sh deploy/kfac-launch experiments/mnist-cnn.ini --port auto --quiet --run.seed 2 --run.out_dir runs/sweeps/overhead/kfac-shared/2 --cluster.workers 1 --run.steps 200 --run.eval_every 200 --optimizer.kind kfac  # kfac-shared, seed 2
