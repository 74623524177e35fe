#!/bin/sh
# async-vs-sync-mnist: every run of the sweep, exactly as it was started, from the root of any checkout: the
# folder above this file that holds deploy/kfac-launch, or KFAC_ROOT.
# --model.file experiments/mnist-cnn-he-uniform.model: the initialization the study ran with
# (init=he_uniform bias_init=zero, before init= existed; models/README.md).
root=${KFAC_ROOT:-$(cd "$(dirname "$0")" && pwd)}
while [ "$root" != / ] && [ ! -f "$root/deploy/kfac-launch" ]; do root=$(dirname "$root"); done
cd "$root" || { echo "rerun.sh: no kfac checkout above $0 (set KFAC_ROOT)" >&2; exit 1; }
sh deploy/kfac-launch experiments/mnist-cnn.ini --port auto --quiet --run.seed 1 --run.out_dir runs/sweeps/async-vs-sync-mnist/async/1 --model.file experiments/mnist-cnn-he-uniform.model --run.steps 160 --run.eval_every 20 --kfac.max_inverse_staleness -1 --kfac.refresh continuous  # async, seed 1
sh deploy/kfac-launch experiments/mnist-cnn.ini --port auto --quiet --run.seed 1 --run.out_dir runs/sweeps/async-vs-sync-mnist/sync-every-20/1 --model.file experiments/mnist-cnn-he-uniform.model --run.steps 160 --run.eval_every 20 --kfac.max_inverse_staleness 19 --kfac.refresh every --kfac.inverse_every 20  # sync-every-20, seed 1
sh deploy/kfac-launch experiments/mnist-cnn.ini --port auto --quiet --run.seed 1 --run.out_dir runs/sweeps/async-vs-sync-mnist/sync-every-step/1 --model.file experiments/mnist-cnn-he-uniform.model --run.steps 160 --run.eval_every 20 --kfac.max_inverse_staleness 0 --run.steps 80  # sync-every-step, seed 1
sh deploy/kfac-launch experiments/mnist-cnn.ini --port auto --quiet --run.seed 2 --run.out_dir runs/sweeps/async-vs-sync-mnist/async/2 --model.file experiments/mnist-cnn-he-uniform.model --run.steps 160 --run.eval_every 20 --kfac.max_inverse_staleness -1 --kfac.refresh continuous  # async, seed 2
sh deploy/kfac-launch experiments/mnist-cnn.ini --port auto --quiet --run.seed 2 --run.out_dir runs/sweeps/async-vs-sync-mnist/sync-every-20/2 --model.file experiments/mnist-cnn-he-uniform.model --run.steps 160 --run.eval_every 20 --kfac.max_inverse_staleness 19 --kfac.refresh every --kfac.inverse_every 20  # sync-every-20, seed 2
sh deploy/kfac-launch experiments/mnist-cnn.ini --port auto --quiet --run.seed 2 --run.out_dir runs/sweeps/async-vs-sync-mnist/sync-every-step/2 --model.file experiments/mnist-cnn-he-uniform.model --run.steps 160 --run.eval_every 20 --kfac.max_inverse_staleness 0 --run.steps 80  # sync-every-step, seed 2
