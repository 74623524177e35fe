#!/usr/bin/python3
"""bench/gloo_allreduce.py — what a user would pick instead of kfac-ps for
data-parallel SGD: torch.distributed's gloo all-reduce (sum) of one float32
tensor of --floats elements between --procs processes on this host (TCP on
127.0.0.1), each process on one thread. Prints figures; never passes or
fails on time.

    /usr/bin/python3 bench/gloo_allreduce.py --floats 215370 --procs 2 [--reps 20]

Each process makes its tensor once, then runs 3 untimed all-reduces and
--reps timed ones, each started after a barrier; the time of one is the
slowest process's (a max-reduce of the times). Prints the median and the
best in ms, and then one line a script reads:
    gloo floats=N procs=P median_ms=... best_ms=...
With --procs 1 there is nothing to exchange (gloo returns at once): the
figure is then gloo's own overhead. Exit 77 when torch or its distributed
package is missing (Debian: apt-get install python3-torch).
"""
import argparse
import os
import socket
import sys
import time

try:
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
except ImportError as e:  # the caller prints "skipped"
    print(f"gloo_allreduce: no torch here ({e})")
    sys.exit(77)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(rank, procs, port, floats, reps, out):
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=procs)
    x = torch.full((floats,), float(rank + 1), dtype=torch.float32)
    times = []
    for i in range(3 + reps):
        dist.barrier()
        t0 = time.perf_counter()
        dist.all_reduce(x)
        t = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        if i >= 3:
            times.append(t.item() * 1e3)
    if rank == 0:
        out.put(times)
    dist.barrier()
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--floats", type=int, required=True)
    ap.add_argument("--procs", type=int, required=True)
    ap.add_argument("--reps", type=int, default=20)
    a = ap.parse_args()
    if a.floats < 1 or not 1 <= a.procs <= 64 or not 1 <= a.reps <= 10000:
        ap.error("--floats >= 1, --procs 1..64, --reps 1..10000")
    if not (dist.is_available() and dist.is_gloo_available()):
        print("gloo_allreduce: this torch has no gloo backend")
        sys.exit(77)
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    port = _free_port()
    ps = [ctx.Process(target=_run, args=(r, a.procs, port, a.floats, a.reps, out)) for r in range(a.procs)]
    for p in ps:
        p.start()
    times = out.get(timeout=300)
    for p in ps:
        p.join(timeout=60)
        if p.is_alive():
            p.terminate()
    times.sort()
    med, best = times[len(times) // 2], times[0]
    print(f"gloo all-reduce of {a.floats} floats between {a.procs} processes: median {med:.3f} ms, "
          f"best {best:.3f} ms over {a.reps} (torch {torch.__version__})")
    print(f"gloo floats={a.floats} procs={a.procs} median_ms={med:.4f} best_ms={best:.4f}")


if __name__ == "__main__":
    main()
