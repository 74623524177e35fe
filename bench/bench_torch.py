#!/usr/bin/python3
"""bench/bench_torch.py — forward+backward images/s of the MNIST CNN of
models/mnist-cnn.model in PyTorch (Debian's python3-torch), the figure that
bench/bench_framework.sh sets beside build/bench/bench_nn's. Prints
figures; never passes or fails on time. Exits 77 (skipped) when torch is
not importable.

    /usr/bin/python3 bench/bench_torch.py [--batch 128] [--threads 2] [--seconds 3]

The net, layer by layer as models/mnist-cnn.model describes it (input
1x28x28): conv 16 5x5 pad 2, relu, maxpool 2, conv 32 5x5 pad 2, relu,
maxpool 2, flatten, fc 128, relu, fc 10, softmax cross-entropy (mean over
the batch). One iteration: forward in training mode on a fixed random batch
(N(0,1) inputs, uniform labels), the loss, zeroing the gradients, backward:
what net_forward + net_backward do. No optimizer step. torch.set_num_threads
sets the intra-op threads; inter-op threads are 1. After 3 warm-up
iterations, iterations run for --seconds; printed: best and median
images/s over the iterations, like bench_nn.
"""
import argparse
import statistics
import sys
import time

try:
    import torch
    import torch.nn as nn
except ImportError as e:  # the framework is optional
    print(f"bench_torch: skipped: python3-torch is not installed ({e}); apt-get install python3-torch")
    sys.exit(77)


def build() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 16, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=3.0)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass  # already set
    torch.manual_seed(1)
    net = build().train()
    loss_fn = nn.CrossEntropyLoss()
    x = torch.randn(a.batch, 1, 28, 28)
    y = torch.randint(0, 10, (a.batch,))

    def step() -> None:
        net.zero_grad(set_to_none=False)
        loss_fn(net(x), y).backward()

    for _ in range(3):
        step()
    times = []
    t_end = time.perf_counter() + a.seconds
    while time.perf_counter() < t_end or len(times) < 5:
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    best, med = min(times), statistics.median(times)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, batch {a.batch}: "
          f"best {a.batch / best:.0f} img/s, median {a.batch / med:.0f} img/s, {len(times)} iterations")
    return 0


if __name__ == "__main__":
    sys.exit(main())
