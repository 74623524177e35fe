"""bench/gpu/torch_step.py — the gradient worker's step in PyTorch with cuDNN on
the same GPU, the figure bench/gpu/first-run.sh sets beside build/bench/bench_gpu's.
Prints figures; never passes or fails on time. Exits 77 (skipped) when torch
or a CUDA device is missing.

    python3 bench/gpu/torch_step.py [--batch 128] [--seconds 2] [--model mnist-cnn|resnet8-cifar ...]

One step is what kfac-worker does per batch on the GPU (bench_gpu's "step"):
the parameters arrive on the host (a flat float32 vector, as in a Params
message) and go to the device in one copy; the batch (N(0,1) inputs, uniform
labels) goes to the device; forward in training mode, softmax cross-entropy
(mean), backward; the gradient comes back to the host as one flat vector.
fp32, TF32 off for matrix products and convolutions, cudnn.benchmark on (what
a user tuning for speed sets). Host buffers are pinned, as the backend's
staging buffers are. Images/s = batch / mean step time after 5 warm-up steps.

The networks are those of models/mnist-cnn.model and models/resnet8-cifar.model,
layer by layer (conv bias, padding, pooling, batch norm, projections).
"""
import argparse
import sys
import time

try:
    import torch
    import torch.nn as nn
except ImportError as e:
    print(f"torch_step: skipped: torch is not importable ({e})")
    sys.exit(77)


def mnist_cnn() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 16, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))


class Stage(nn.Module):
    """conv-bn-relu-conv-bn + shortcut (identity, or 1x1 stride-2 conv + bn), add, relu."""

    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.a = nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
                               nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout))
        self.proj = None
        if stride != 1 or cin != cout:
            self.proj = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
        self.relu = nn.ReLU()

    def forward(self, x):
        return self.relu(self.a(x) + (self.proj(x) if self.proj is not None else x))


def resnet8() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
        Stage(16, 16, 1), Stage(16, 32, 2), Stage(32, 64, 2),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10))


MODELS = {"mnist-cnn": (mnist_cnn, (1, 28, 28)), "resnet8-cifar": (resnet8, (3, 32, 32))}


def bench(name: str, batch: int, seconds: float, dev) -> None:
    make, shape = MODELS[name]
    torch.manual_seed(1)
    net = make().to(dev).train()
    params = [p for p in net.parameters()]
    n_params = sum(p.numel() for p in params)
    h_params = torch.randn(n_params).pin_memory()
    h_grads = torch.empty(n_params).pin_memory()
    h_x = torch.randn(batch, *shape).pin_memory()
    h_y = torch.randint(0, 10, (batch,)).pin_memory()
    d_flat = torch.empty(n_params, device=dev)
    loss_fn = nn.CrossEntropyLoss()

    def step() -> None:
        d_flat.copy_(h_params, non_blocking=True)
        with torch.no_grad():
            off = 0
            for p in params:
                p.copy_(d_flat[off:off + p.numel()].view_as(p))
                off += p.numel()
        x = h_x.to(dev, non_blocking=True)
        y = h_y.to(dev, non_blocking=True)
        for p in params:
            p.grad = None
        loss_fn(net(x), y).backward()
        h_grads.copy_(torch.cat([p.grad.reshape(-1) for p in params]))  # one device->host copy; synchronizes

    for _ in range(5):
        step()
    torch.cuda.synchronize()
    k, t0 = 0, time.perf_counter()
    while k < 10 or time.perf_counter() - t0 < seconds:
        step()
        k += 1
    torch.cuda.synchronize()
    dt = (time.perf_counter() - t0) / k
    print(f"torch {name}: {n_params} parameters, batch {batch}: step {1e3 * dt:.3f} ms, {batch / dt:.0f} images/s "
          f"({k} steps)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--model", action="append", choices=sorted(MODELS))
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("torch_step: skipped: torch sees no CUDA device")
        return 77
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    dev = torch.device("cuda")
    print(f"torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, {torch.cuda.get_device_name(0)}, "
          f"TF32 off, cudnn.benchmark on")
    for m in a.model or ["mnist-cnn", "resnet8-cifar"]:
        bench(m, a.batch, a.seconds, dev)
    return 0


if __name__ == "__main__":
    sys.exit(main())
