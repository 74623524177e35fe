#!/bin/sh
# bench/bench_framework.sh — forward+backward images/s of the MNIST CNN in
# this project's network core (build/bench/bench_nn --whole) and in PyTorch
# (bench/bench_torch.py, Debian's python3-torch) on the same net, batch and
# thread count, run alternately (torch, kfac, torch, kfac, ...) so that both
# see the same machine load, and the ratio of the best figures. Prints
# figures; never passes or fails on time. Exits 77 (skipped) when
# /usr/bin/python3 cannot import torch (apt-get install python3-torch).
#
#   bench/bench_framework.sh [--repeats R]     (default 2)
#
# Compared: batch 128, 2 threads: bench_nn's "blas 1, net 2" lines (the
# net's own threads, single-threaded OpenBLAS, as kfac-train runs) with the
# conv layers on each engine (im2col + OpenBLAS "blas", "onednn", and
# "auto", the default: per layer shape) and its "blas 2, net 1" line
# (OpenBLAS's threads, conv on OpenBLAS), against torch with
# set_num_threads(2).
set -u
repeats=2
[ "${1:-}" = --repeats ] && { repeats=$2; shift 2; }
[ -x build/bench/bench_nn ] || { echo "bench_framework.sh: build first: make build-bench" >&2; exit 2; }
/usr/bin/python3 -c 'import torch' 2>/dev/null ||
  { echo "bench_framework.sh: skipped: /usr/bin/python3 has no torch (apt-get install python3-torch)"; exit 77; }
out=$(mktemp) || exit 1
trap 'rm -f "$out"' EXIT
grep -m1 '^model name' /proc/cpuinfo
echo "load average before: $(cat /proc/loadavg)"
r=1
while [ "$r" -le "$repeats" ]; do
  /usr/bin/python3 bench/bench_torch.py --batch 128 --threads 2 | tee -a "$out"
  build/bench/bench_nn --whole | awk '$1 == 128' | sed 's/^/kfac /' | tee -a "$out"
  r=$((r + 1))
done
echo "load average after: $(cat /proc/loadavg)"
awk '
  /^torch/ { for (i = 1; i <= NF; i++) if ($i == "best") { v = $(i + 1) + 0; if (v > t) t = v } }
  /^kfac/ && $3 == 1 && $4 == 2 && $NF == "blas" { if ($5 > own) own = $5 }
  /^kfac/ && $3 == 1 && $4 == 2 && $NF == "auto" { if ($5 > au) au = $5 }
  /^kfac/ && $3 == 1 && $4 == 2 && $NF == "onednn" { if ($5 > dn) dn = $5 }
  /^kfac/ && $3 == 2 && $4 == 1 && $NF == "blas" { if ($5 > ob) ob = $5 }
  END {
    if (!t) { print "no torch figure"; exit 1 }
    printf "best img/s, batch 128, 2 threads: torch %d; kfac net threads: conv auto %d (%.2fx), onednn %d (%.2fx), " \
           "blas %d (%.2fx); kfac OpenBLAS threads %d (%.2fx)\n", t, au, au / t, dn, dn / t, own, own / t, ob, ob / t
  }' "$out"
