#!/usr/bin/env python3
"""bench/scaling_model.py -- the scale model of docs/scaling.md, as a program.

Prints the prediction tables of docs/scaling.md from the measured inputs
below (each with where it was measured). Nothing here is measured: change
an input, rerun, and the tables follow. Standard library only.

    python3 bench/scaling_model.py            # every table of docs/scaling.md
    python3 bench/scaling_model.py --ps-cpu-ms-per-mb 2.3    # veth's kernel cost everywhere
    python3 bench/scaling_model.py --factor-bytes models/mnist-mlp.model   # "F N"

Units: ms, bytes, Gbit/s. A "message" is a GradPush or a Params: 4 x P
bytes of float32 plus an envelope of under 100 bytes (docs/protocol.md),
taken as 64 here.
"""
import math
import sys

# ---- inputs -----------------------------------------------------------------------------

# Parameters and inverted blocks (n of each n x n factor): kfac-ps's start-up
# line "N parameters, M blocks to invert (largest n=...)" of this build, the
# n of every block from the model files (fc: A = in + 1, G = out; conv: A =
# in_c k k + 1, G = out_c; doubly-factored fc: K = positions, Psi = channels,
# G and Gbias = out).
MODELS = {
    "mlp": dict(file="models/mnist-mlp.model", P=235_146, blocks=[785, 256, 257, 128, 129, 10]),
    "cnn": dict(file="models/mnist-cnn.model", P=215_370, blocks=[26, 16, 401, 32, 1569, 128, 129, 10]),
    "wide": dict(file="models/mnist-cnn-wide.model", P=3_274_634,
                 blocks=[26, 32, 801, 64, 49, 64, 1024, 1024, 1025, 10]),
}

# A worker's step (forward + backward of its batch of 64, parameters in,
# gradient out of the device), ms.
#   gpu: bench/RESULTS.md "GPU: NVIDIA H200": the MNIST CNN at 79,609-89,000
#        images/s at batch 128 (1.4-1.6 ms), and "a worker's step is about
#        1 ms" (bench_cluster with GPU workers). The MLP and the wide model
#        were not measured on a GPU: 1 and 2 ms are ASSUMPTIONS (the MLP has
#        the CNN's parameter count and no convolution; the wide model has
#        4x the CNN's conv2 work; ResNet-8 took 3.8 ms per 128 images).
#   cpu: one core of this kind of machine (AMD EPYC, 2 logical CPUs):
#        mlp: the worker's own "ms compute each on average" in the W = 1
#        run of bench/scaling_validate.sh at 100 Mbit/s (docs/scaling.md
#        section 6; load 7-8); cnn: about 2,000 images/s per core
#        (bench/RESULTS.md, "The network core's system time": "the
#        single-thread speed of the layers (about 2,000 img/s per core)") =
#        32 ms per 64 images; wide: the PS's wait for 2 CPU workers' round
#        on the quiet machine, 136.4 ms (bench/RESULTS.md "The critical path
#        in one run", part 2, sgd arm: an upper bound of one worker's step;
#        the loaded W = 1 run of section 6 took 427 ms).
WORKER_MS = {
    "gpu": {"mlp": 1.0, "cnn": 1.0, "wide": 2.0},
    "cpu": {"mlp": 3.6, "cnn": 32.0, "wide": 136.4},
}

# The PS's update, ms per step, one round's mean gradient in hand.
#   sgd: steps.csv update_ms with 1 worker (bench/scaling_validate.sh W = 1
#        runs for mlp and wide; bench/RESULTS.md "The critical path in one
#        run", sgd arm, 0.3 ms, for cnn).
#   kfac: bench/RESULTS.md: cnn 6.2 ms and wide 53.1 ms ("The critical path
#        in one run", 2 update threads, quiet 2-core machine); 4.6-4.8 and
#        31.0-31.1 ms on the 16-vCPU host of the H200 (GPU section); mlp
#        7.6 ms (bench_update min, 1 thread, this machine at load 7,
#        docs/scaling.md section 2). The 16-vCPU figures are used.
UPDATE_MS = {
    "sgd": {"mlp": 1.0, "cnn": 0.3, "wide": 5.8},
    "kfac": {"mlp": 7.6, "cnn": 4.7, "wide": 31.0},
}
# Averaging: the update above holds one gradient; each further gradient adds
# one pass over 4P bytes at the step (ps_round_state_average). SUM_GBPS is
# that pass's rate: steps.csv's update_ms rose by 0.3-0.4 ms per added
# worker (1.3, 1.9, 2.2 and 0.9, 2.1, 2.1 ms at W = 1, 2, 4; MLP, 0.94 MB)
# in the two 1 Gbit/s calls of docs/scaling.md section 6: 2.4-3.1 GB/s.
SUM_GBPS = 3.0
# Encoding the Params once per version into one shared buffer and handing
# it to the workers' connections (steps.csv publish_ms): mlp 1.1 ms with 1
# worker (scaling_validate, 100 Mbit/s, W = 1); cnn 1.3 ms (bench/
# RESULTS.md GPU section, cluster run, sgd arm, 2 workers, 16-vCPU host);
# wide 7.3 ms (bench/RESULTS.md "Page faults of kfac-ps per step", sgd
# arm, 2 workers; the GPU section's cluster run gave 25-27 ms).
PUBLISH_MS = {"mlp": 1.1, "cnn": 1.3, "wide": 7.3}
# kfac-ps's CPU per byte moved (receive + decode of a gradient, send of a
# Params; libzmq, protobuf-c and the kernel's TCP), ms per MB of gradient
# in + Params out: the slope of kfac-ps's CPU ms per step against W over the
# veth link of bench/scaling_validate.sh at 1 Gbit/s (docs/scaling.md
# section 6; two calls, MLP and wide model each): 1.9, 2.2, 2.4, 2.8
# ms/MB, of which user time 0.37, 0.43, 0.43, 0.64; the medians are used.
# Over veth the system part includes the peer's receive path for what
# kfac-ps sends, so 2.3 is an upper estimate; the user time alone (libzmq
# and protobuf-c copies) is the floor, which the tables use (a NIC with
# offloads puts little of the transfer on the PS's cores; not measured
# here); their column "at veth's kernel cost" uses 2.3.
# --ps-cpu-ms-per-mb X replaces the 0.43.
PS_CPU_MS_PER_MB = 2.3
PS_CPU_MS_PER_MB_USER = 0.43

# Inverting one block on one daemon core, ms: bench_kfac_inverse 1 (one
# OpenBLAS thread; this machine, load 6-7, docs/scaling.md section 2):
# kfac_inverse_compute (Cholesky) at n = 256, 1024, 2048; power law between
# the measured points, n^3 below 256.
INV_POINTS = [(256, 1.52), (1024, 51.27), (2048, 313.63)]

# TCP goodput over the nominal rate: 95.4-95.6% measured through tbf at
# 100 Mbit/s here (1500-byte MTU: headers); taken for 10 and 100 Gbit/s too.
GOODPUT = 0.954

W_LIST = [1, 4, 16, 64, 256]
D_LIST = [1, 4, 16, 64]
NETS_GBIT = [10, 100]


# ---- the model -----------------------------------------------------------------------------

def msg_bytes(P):
    return 4 * P + 64


def xfer_ms(P, gbit):
    """One message over the PS's NIC, one direction, ms."""
    return msg_bytes(P) * 8 / (gbit * 1e9 * GOODPUT) * 1e3


def inv_ms(n):
    pts = INV_POINTS
    if n <= pts[0][0]:
        return pts[0][1] * (n / pts[0][0]) ** 3
    for (n0, t0), (n1, t1) in zip(pts, pts[1:]):
        if n <= n1:
            k = math.log(t1 / t0) / math.log(n1 / n0)
            return t0 * (n / n0) ** k
    (n0, t0), (n1, t1) = pts[-2], pts[-1]
    k = math.log(t1 / t0) / math.log(n1 / n0)
    return t1 * (n / n1) ** k


def factor_bytes(blocks):
    """Every block's packed upper triangle, float32: a StatsPush with every
    layer, or the Jobs (and as much again in JobResults) of one refresh."""
    return sum(4 * n * (n + 1) // 2 for n in blocks)


def step(model, gbit, W, opt="kfac", worker="gpu", S=1, cpu_ms_per_mb=None):
    """Predicted step of one synchronous round with W workers and the PS cut
    into S shards by layer (S = 1: today's kfac-ps). Returns a dict of ms."""
    m = MODELS[model]
    P = m["P"]
    x = xfer_ms(P, gbit)
    t_w = WORKER_MS[worker][model]
    mb = msg_bytes(P) / 1e6
    if cpu_ms_per_mb is None:
        cpu_ms_per_mb = PS_CPU_MS_PER_MB_USER
    c_msg = mb * cpu_ms_per_mb           # PS CPU per message received or sent
    # Each phase is as slow as the slower of the shard's NIC and its CPU;
    # a worker's own NIC carries one message each way (x), which sharding
    # does not shorten.
    t_out = max(W * x / S, W * c_msg / S, x)      # Params to every worker
    t_in = max(W * x / S, W * c_msg / S, x)       # every worker's gradient
    sum_ms = (W - 1) * msg_bytes(P) / (SUM_GBPS * 1e9) * 1e3 / S
    upd = UPDATE_MS[opt][model] / S + sum_ms
    pub = PUBLISH_MS[model] / S
    # The round as the code runs it: Params out, compute, gradients in, then
    # averaging + update + encoding, one after the other.
    serial = t_w + t_out + t_in + upd + pub
    # The same work with perfect overlap (pipelined rounds): the busiest
    # resource alone.
    net = 2 * W * x / S
    ps_cpu = 2 * W * c_msg / S + upd + pub
    overlapped = max(t_w + 2 * x, W * x / S, ps_cpu)
    parts = {"worker": t_w, "network": net, "PS CPU": ps_cpu}
    bound = max(parts, key=parts.get)
    return dict(serial=serial, overlapped=overlapped, bound=bound, x=x, net=net,
                ps_cpu=ps_cpu, nic_load=W * msg_bytes(P) * 8 / S / (serial * 1e-3) / (gbit * 1e9),
                cpu_load=ps_cpu / serial)


def refresh_ms(model, D):
    """Time for D daemons to invert every block once (continuous refresh):
    the work spread over D, but never less than the largest block."""
    t = [inv_ms(n) for n in MODELS[model]["blocks"]]
    return max(sum(t) / D, max(t))


def fmt(v):
    if v >= 100:
        return "%.0f" % v
    if v >= 10:
        return "%.1f" % v
    return "%.2f" % v


def wfmt(w):
    return "< 1" if w < 1 else "%.0f" % w


def tables(worker="gpu"):
    for model in MODELS:
        m = MODELS[model]
        print("\n#### %s (`%s`, P = %s, %s blocks, message %.2f MB)\n" % (
            model, m["file"], format(m["P"], ","), len(m["blocks"]), msg_bytes(m["P"]) / 1e6))
        for gbit in NETS_GBIT:
            print("%d Gbit/s, K-FAC, %s workers (one message: %s ms):\n" % (gbit, worker.upper(),
                                                                          fmt(xfer_ms(m["P"], gbit))))
            print("| W | step ms (sync, as built) | bound by | step ms (overlapped) | PS NIC busy | PS CPU (cores) |"
                  " step ms at veth's kernel cost | inverse period in steps, D = " +
                  " / ".join(str(d) for d in D_LIST) + " |")
            print("|---|---|---|---|---|---|---|---|")
            for W in W_LIST:
                r = step(model, gbit, W, "kfac", worker)
                ages = " / ".join(fmt(refresh_ms(model, D) / r["serial"]) for D in D_LIST)
                rv = step(model, gbit, W, "kfac", worker, cpu_ms_per_mb=PS_CPU_MS_PER_MB)
                print("| %d | %s | %s | %s | %.0f%% | %.2f | %s | %s |" % (
                    W, fmt(r["serial"]), r["bound"], fmt(r["overlapped"]), 100 * r["nic_load"], r["cpu_load"],
                    fmt(rv["serial"]), ages))
            print()


def saturation(worker):
    print("\n| model | network | worker step ms | one message ms | W where PS network = worker step | "
          "W where PS CPU = worker step (at veth's kernel cost) | SGD step ms at W = 64: S = 1 / 4 / 16 / 64 shards |")
    print("|---|---|---|---|---|---|---|")
    for model in MODELS:
        for gbit in NETS_GBIT:
            t_w = WORKER_MS[worker][model]
            x = xfer_ms(MODELS[model]["P"], gbit)
            w_net = wfmt(t_w / (2 * x))
            mb = msg_bytes(MODELS[model]["P"]) / 1e6
            sum1 = msg_bytes(MODELS[model]["P"]) / (SUM_GBPS * 1e9) * 1e3
            room = max(0.0, t_w - UPDATE_MS["kfac"][model] - PUBLISH_MS[model])
            w_cpu = "%s (%s)" % (wfmt(room / (2 * mb * PS_CPU_MS_PER_MB_USER + sum1)),
                                 wfmt(room / (2 * mb * PS_CPU_MS_PER_MB + sum1)))
            shards = " / ".join(fmt(step(model, gbit, 64, "sgd", worker, S)["serial"]) for S in (1, 4, 16, 64))
            print("| %s | %d Gbit/s | %s | %s | %s | %s | %s |" % (
                model, gbit, fmt(t_w), fmt(x), w_net, w_cpu, shards))


def inverse_table():
    print("\n| model | blocks (n) | sum of inverse ms | largest ms | refresh ms, D = " +
          " / ".join(str(d) for d in D_LIST) + " | factor bytes (a full StatsPush; Jobs of one refresh) |")
    print("|---|---|---|---|---|---|")
    for model, m in MODELS.items():
        t = [inv_ms(n) for n in m["blocks"]]
        print("| %s | %s | %s | %s | %s | %.2f MB |" % (
            model, " ".join(str(n) for n in m["blocks"]), fmt(sum(t)), fmt(max(t)),
            " / ".join(fmt(refresh_ms(model, D)) for D in D_LIST), factor_bytes(m["blocks"]) / 1e6))


if __name__ == "__main__":
    if "--factor-bytes" in sys.argv:
        # "F N": every factor's packed bytes and the number of blocks of the
        # model FILE (bench/scaling_validate.sh --kfac)
        f = sys.argv[sys.argv.index("--factor-bytes") + 1]
        for m in MODELS.values():
            if m["file"] == f or f.endswith("/" + m["file"]):
                print(factor_bytes(m["blocks"]), len(m["blocks"]))
                sys.exit(0)
        sys.exit("scaling_model: no blocks known for %s" % f)
    if "--ps-cpu-ms-per-mb" in sys.argv:
        PS_CPU_MS_PER_MB_USER = float(sys.argv[sys.argv.index("--ps-cpu-ms-per-mb") + 1])
    print("## Inverse refresh (continuous, one daemon core each)")
    inverse_table()
    print("\n## Predicted steps, GPU workers")
    tables("gpu")
    print("\n## Saturation and sharding, GPU workers")
    saturation("gpu")
    print("\n## Saturation and sharding, CPU workers (one core each)")
    saturation("cpu")
