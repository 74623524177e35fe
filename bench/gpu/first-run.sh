#!/bin/sh
# bench/gpu/first-run.sh — kfac's checks and figures on a GPU machine, in one
# command of at most about 5 minutes, from the kit `make gpu-kit` builds
# (tools/gpu-kit.sh). Run from the repository root:
#
#   sh bench/gpu/first-run.sh [--kit build-gpukit/kfac-gpu-kit.tar.xz] [--out DIR] [--quick] [--tests-only]
#
#   --kit    the kit archive (default build-gpukit/kfac-gpu-kit.tar.xz)
#   --out    where the results go (default $OUT when set, else runs/gpu-first-run)
#   --quick  shorter measurements and clusters, the worker step of the MNIST
#            CNN alone (a rehearsal of the logic)
#   --tests-only  steps 1-5 only (about 2 minutes): a rerun after a fix
#
# It needs on the machine only the NVIDIA driver and the CUDA runtime,
# cuBLAS and cuDNN 9 libraries, wherever they are (bench/gpu/kit-env.sh
# finds them: the toolkit's folders or python3's nvidia-* packages), plus
# python3 with torch for the side-by-side figure (skipped without it).
#
# In order, each step with a time limit so that the whole run ends in time:
#  1. the machine: nvidia-smi, driver, compute capability, CPU, where each
#     CUDA library was found; every kit program's libraries resolve;
#  2. the twin tests (tests/backend/test_backend_cuda: CUDA against the CPU
#     backend, every layer kind and two whole models) with
#     KFAC_REQUIRE_GPU=1, so a missing GPU fails instead of skipping, and
#     the CPU backend's own tests;
#  3. the twin tests under compute-sanitizer memcheck (its error count; or
#     "unavailable" when it refuses the device), and once with
#     NVIDIA_TF32_OVERRIDE=0, whose worst errors must equal step 2's;
#  4. bench_gpu: a worker step's images/s on the GPU and on the CPU (every
#     core), batch 128, MNIST CNN and ResNet-8;
#  5. the same step in PyTorch + cuDNN on the same GPU (bench/gpu/torch_step.py:
#     fp32, TF32 off, the host-device copies a worker makes), in this run;
#  6. short clusters (bench/bench_cluster.sh) on the kit's MNIST: 2 GPU
#     workers, kfac-statsd on the GPU, 4 CPU inverse daemons, kfac-ps on the
#     CPU; K-FAC and SGD on the demo model and on the wide model;
#  7. study 1 (asynchronous against synchronous inverses, Ba et al. sec. 6.1)
#     in that setting: tools/kfac-sweep, seeds 1 2 3, whole test set;
#  8. the twin tests with more seeds, while time is left.
#
# Output, in --out (8 files at most): summary.md (the verdict and every
# figure), machine.log, twin.log (with the TF32 and extra-seed runs),
# memcheck.log, bench.log, cluster.log, study1.log and runs.tar.gz (the clusters' and the study's
# CSVs, configurations and logs).
# The verdict line says whether the run counts: it counts only when a GPU
# was used by every GPU step and nothing failed. Exit status: 0 when it
# counts, 1 when something failed, 3 when there was no GPU (a rehearsal).
set -u
kit_archive=build-gpukit/kfac-gpu-kit.tar.xz
out=${OUT:-runs/gpu-first-run}
quick=0
tests_only=0
while [ $# -gt 0 ]; do
  case $1 in
    --kit) kit_archive=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --quick) quick=1; shift ;;
    --tests-only) tests_only=1; shift ;;
    -h | --help) sed -n '2,40p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "first-run.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[ -r "$kit_archive" ] || { echo "first-run.sh: no kit at $kit_archive: run 'make gpu-kit' on a build machine first" >&2; exit 2; }
[ -f bench/gpu/kit-env.sh ] || { echo "first-run.sh: run from the repository root" >&2; exit 2; }
mkdir -p "$out" || exit 2
out=$(cd "$out" && pwd)
S=$out/summary.md
T0=$(date +%s)
BUDGET=${KFAC_GPU_BUDGET_S:-340}   # seconds for the whole script
failed=""
gpu=1

say() { echo "$*" | tee -a "$S"; }
fail() { failed="$failed $1"; say "**FAILED: $1**${2:+: $2}"; }
left() { echo $((BUDGET - ($(date +%s) - T0))); }
# limit CAP: a step's time limit, at most what is left of the budget (at least 5 s)
limit() { l=$(left); [ "$l" -lt "$1" ] && set -- "$l"; [ "$1" -lt 5 ] && set -- 5; echo "$1"; }

: >"$S"
say "# kfac on a GPU machine: $(date -u '+%Y-%m-%d %H:%M UTC')"
say ""

# ---- 0. the kit --------------------------------------------------------------
work=${TMPDIR:-/tmp}/kfac-gpu-run.$$
unxz() { # the archive to stdout: xz, or Python's lzma where xz is not installed
  if command -v xz >/dev/null 2>&1; then xz -dc "$1"
  else python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), sys.stdout.buffer)' "$1"; fi
}
mkdir -p "$work" && unxz "$kit_archive" | tar -C "$work" -xf - || { echo "first-run.sh: cannot unpack $kit_archive" >&2; exit 2; }
KIT=$work/kfac-gpu-kit
say "kit: $(sed -n 2p "$KIT/MANIFEST"), $(sed -n 3p "$KIT/MANIFEST")"
envok=1
. bench/gpu/kit-env.sh || envok=0

# ---- 1. the machine ------------------------------------------------------------
{
  echo "== uname: $(uname -srm)"
  echo "== CPU: $(awk -F: '/^model name/ { sub(/^ /, "", $2); print $2; exit }' /proc/cpuinfo), $(nproc) logical CPUs"
  echo "== memory: $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo)"
  echo "== nvidia-smi"
  timeout 30 nvidia-smi 2>&1 || echo "(nvidia-smi failed or is missing)"
  echo "== CUDA libraries found"
  printf '%s' "$KIT_LIBS_FOUND"
  [ -n "$KIT_LIBS_MISSING" ] && echo "missing:$KIT_LIBS_MISSING"
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  echo "== nvcc: $(nvcc --version 2>/dev/null | tail -n 2 | head -n 1)"
  echo "== compute-sanitizer: $(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || echo none)"
  echo "== python3 torch: $(timeout 60 python3 -c 'import torch; print(torch.__version__, torch.version.cuda, torch.backends.cudnn.version())' 2>&1 | tail -n 1)"
  echo "== ldd of the kit's programs"
  for f in "$KIT"/bin/* "$KIT"/tests/* "$KIT"/bench/* "$KIT"/lib/kfac/*; do
    m=$(ldd "$f" 2>&1 | grep 'not found')
    echo "$(basename "$f"): ${m:-all libraries found}"
  done
} >"$out/machine.log" 2>&1
gpuq=$(timeout 30 nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total --format=csv,noheader 2>/dev/null | head -n 1)
say "## 1. Machine"
say "- GPU: ${gpuq:-none (nvidia-smi found no GPU)}"
say "- CPU: $(awk -F: '/^model name/ { sub(/^ /, "", $2); print $2; exit }' /proc/cpuinfo), $(nproc) logical CPUs"
say "- CUDA libraries: $(printf '%s' "$KIT_LIBS_FOUND" | tr '\n' ' ')"
[ "$envok" = 1 ] || fail "CUDA libraries" "not found:$KIT_LIBS_MISSING"
nf=$(grep -c 'not found' "$out/machine.log")
[ "$nf" = 0 ] || fail "libraries" "$nf kit programs have unresolved libraries (machine.log)"
[ -n "$gpuq" ] || gpu=0
probe=$("$KIT/bench/bench_gpu" --probe 2>&1 | tail -n 1)
say "- the backend's probe: $probe"
case $probe in "GPU: "*) ;; *) gpu=0 ;; esac

# ---- 2. twin tests -------------------------------------------------------------
say ""
say "## 2. Twin tests (CUDA against the CPU backend)"
# worst_max FILE: the largest of each kind of error over every test of FILE
worst_max() { awk -F'worst relative errors: ' 'NF > 1 { n = split($2, a, /[ ,()]+/)
  for (i = 1; i < n; i++) if (a[i] ~ /^(forward|backward|statistics|loss)$/ && a[i + 1] + 0 > m[a[i]]) m[a[i]] = a[i + 1] + 0 }
  END { printf "forward %.2g, backward %.2g, statistics %.2g, loss %.2g", m["forward"], m["backward"], m["statistics"], m["loss"] }' "$1"; }
worst() { grep -o '^[^:]*: worst relative errors: forward [^ ]*, backward [^ ]*, statistics [^ ]*, loss [^ ]*' "$1" | sort; }
# One seed for the twin tests, memcheck and the TF32 run, so their worst errors compare.
KFAC_TEST_SEED=${KFAC_TEST_SEED:-$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}
export KFAC_TEST_SEED
say "- seed: KFAC_TEST_SEED=$KFAC_TEST_SEED"
t=$(limit 100)
s0=$(date +%s)
{
  echo "== test_backend (the CPU backend)"
  timeout "$t" "$KIT/tests/test_backend"; echo "exit $?"
  echo "== test_backend_cuda with KFAC_REQUIRE_GPU=1"
  KFAC_REQUIRE_GPU=1 timeout "$t" "$KIT/tests/test_backend_cuda"; echo "exit $?"
} >"$out/twin.log" 2>&1
rc_cpu=$(grep -A1000 '== test_backend (' "$out/twin.log" | grep -m1 '^exit ' | cut -d' ' -f2)
rc_cuda=$(grep -A1000 '== test_backend_cuda' "$out/twin.log" | grep '^exit ' | tail -n 1 | cut -d' ' -f2)
say "- test_backend (CPU): exit $rc_cpu; test_backend_cuda: exit $rc_cuda, $(( $(date +%s) - s0 )) s; $(grep -h '^[0-9]*%: Checks' "$out/twin.log" | tr '\n' ' ')"
[ "$rc_cpu" = 0 ] || fail "test_backend" "exit $rc_cpu (twin.log)"
[ "$rc_cuda" = 0 ] || fail "test_backend_cuda" "exit $rc_cuda (twin.log)"
worst "$out/twin.log" >"$work/worst.txt"
say ""
say "| test | worst relative errors |"
say "|---|---|"
sed 's/: worst relative errors: /| /; s/^/| /; s/$/ |/' "$work/worst.txt" | tee -a "$S"

# ---- 3. memcheck, TF32 off -----------------------------------------------------
say ""
say "## 3. compute-sanitizer memcheck; NVIDIA_TF32_OVERRIDE=0"
san=$(command -v compute-sanitizer || { [ -x /usr/local/cuda/bin/compute-sanitizer ] && echo /usr/local/cuda/bin/compute-sanitizer; })
if [ -z "$san" ]; then
  say "- memcheck: unavailable (no compute-sanitizer)"
elif [ "$gpu" = 0 ]; then
  say "- memcheck: not run (no GPU)"
else
  t=$(limit 110)
  s0=$(date +%s)
  CK_FORK=no KFAC_REQUIRE_GPU=1 timeout "$t" "$san" --tool memcheck --leak-check no --error-exitcode 99 \
    "$KIT/tests/test_backend_cuda" >"$out/memcheck.log" 2>&1
  rc=$?
  es=$(grep -o 'ERROR SUMMARY: [0-9]* error' "$out/memcheck.log" | tail -n 1)
  if grep -q 'Device not supported\|unable to initialize\|Target application terminated before first instrumented API call' "$out/memcheck.log"; then
    say "- memcheck: unavailable: $(grep -m1 'Device not supported\|unable to initialize\|Target application' "$out/memcheck.log")"
  elif [ "$rc" = 124 ]; then
    say "- memcheck: stopped at its limit of $t s (${es:-no summary}); memcheck.log"
  else
    say "- memcheck: exit $rc, ${es:-no ERROR SUMMARY line}, $(( $(date +%s) - s0 )) s"
    [ "$rc" = 0 ] || fail "memcheck" "exit $rc, ${es:-see memcheck.log}"
  fi
fi
if [ "$gpu" = 1 ]; then
  t=$(limit 60)
  NVIDIA_TF32_OVERRIDE=0 KFAC_REQUIRE_GPU=1 timeout "$t" "$KIT/tests/test_backend_cuda" >"$work/tf32.log" 2>&1
  rc=$?
  { echo "== test_backend_cuda with NVIDIA_TF32_OVERRIDE=0: exit $rc"; cat "$work/tf32.log"; } >>"$out/twin.log"
  worst "$work/tf32.log" >"$work/worst-tf32.txt"
  if [ "$rc" = 0 ] && cmp -s "$work/worst.txt" "$work/worst-tf32.txt"; then
    say "- NVIDIA_TF32_OVERRIDE=0: exit 0, the same worst errors as step 2 (no TF32 was in use)"
  else
    say "- NVIDIA_TF32_OVERRIDE=0: exit $rc; worst errors differ from step 2:"
    diff "$work/worst.txt" "$work/worst-tf32.txt" | sed 's/^/    /' | tee -a "$S"
    fail "TF32 check" "exit $rc or different errors (twin.log)"
  fi
else
  say "- NVIDIA_TF32_OVERRIDE=0: not run (no GPU)"
fi

# ---- 4, 5. the worker step against PyTorch --------------------------------------
say ""
say "## 4-5. A worker step (batch 128): kfac on the GPU and the CPU, PyTorch + cuDNN on the same GPU"
sec=2 detail=--stats-detail models="models/mnist-cnn.model models/resnet8-cifar.model"
# --quick: the MNIST CNN alone (on a loaded CPU without a GPU, resnet8's
# CPU step took 8.8 s and the pair ran past the 60 s limit)
[ "$quick" = 1 ] && sec=0.3 detail="" models=models/mnist-cnn.model
t=$(limit 60)
{
  echo "== bench_gpu"
  KFAC_REQUIRE_GPU=$gpu timeout "$t" "$KIT/bench/bench_gpu" --seconds "$sec" --batch 128 $detail $models
  echo "exit $?"
  echo "== torch_step.py"
  timeout "$(limit 60)" python3 bench/gpu/torch_step.py --seconds "$sec" --batch 128
  echo "exit $?"
} >"$out/bench.log" 2>&1
sed -n '/== bench_gpu/,/== torch_step/p' "$out/bench.log" | grep -q '^exit 0' || fail "bench_gpu" "bench.log"
awk '
  /^model / { m = $2; sub(/:$/, "", m); sub(/^models\//, "", m); sub(/\.model$/, "", m) }
  /^  cuda/ { who = seen[m]++ ? "" : "gpu" } /^  cpu/ { who = "cpu" }  # the default: the first cuda line
  /images\/s/ && who != "" { for (i = 1; i <= NF; i++) if ($i == "images/s") ips[m, who] = $(i - 1); who = "" }
  /^torch [a-z]/ && /images\/s/ { m = $2; sub(/:$/, "", m); for (i = 1; i <= NF; i++) if ($i == "images/s") t[m] = $(i - 1); sub(/,$/, "", t[m]) }
  END {
    print "| model | kfac GPU images/s | kfac CPU images/s | PyTorch GPU images/s | kfac GPU / PyTorch |"
    print "|---|---|---|---|---|"
    n = split("mnist-cnn resnet8-cifar", ms, " ")
    for (j = 1; j <= n; j++) { k = ms[j]
      r = (ips[k, "gpu"] > 0 && t[k] > 0) ? sprintf("%.2fx", ips[k, "gpu"] / t[k]) : "-"
      printf "| %s | %s | %s | %s | %s |\n", k, ips[k, "gpu"] ? ips[k, "gpu"] : "-", ips[k, "cpu"] ? ips[k, "cpu"] : "-", t[k] ? t[k] : "-", r }
  }' "$out/bench.log" | tee -a "$S"
grep -m1 '^torch [0-9]' "$out/bench.log" | sed 's/^/- /' | tee -a "$S"

# ---- 6. clusters ---------------------------------------------------------------
say ""
say "## 6. Clusters: 2 workers and kfac-statsd on the GPU, 4 CPU inverse daemons, kfac-ps on the CPU"
if [ "$tests_only" = 1 ]; then
  say "- not run (--tests-only)"
elif [ ! -f "$KIT/data/mnist/train-images-idx3-ubyte.gz" ]; then
  say "- not run: the kit carries no MNIST (built without data/mnist)"
else
  dev=cuda; [ "$gpu" = 1 ] || dev=cpu
  steps=200; wsteps=120
  [ "$quick" = 1 ] && steps=40 && wsteps=30
  common="--data.dir $KIT/data --cluster.invertd 4 --worker.device $dev --statsd.device $dev"
  t=$(limit 120)
  {
    echo "== demo model (models/mnist-cnn.model), $steps steps"
    timeout "$t" sh bench/bench_cluster.sh --steps "$steps" --repeats 1 --skip 20 --out "$work/clusters/demo" \
      --arm "sgd|--optimizer.kind sgd" --arm "kfac|" -- $common
    echo "== wide model (models/mnist-cnn-wide.model), $wsteps steps"
    timeout "$(limit 100)" sh bench/bench_cluster.sh --steps "$wsteps" --repeats 1 --skip 20 --out "$work/clusters/wide" \
      --arm "sgd|--optimizer.kind sgd" --arm "kfac|" -- $common --model.file models/mnist-cnn-wide.model
  } >"$out/cluster.log" 2>&1
  grep -h '^| \*\*' "$out/cluster.log" >/dev/null && {
    say "| model | arm | steps/s | ms/step | wait | curv | update | publish | inv_age | vs SGD |"
    say "|---|---|---|---|---|---|---|---|---|---|"
    awk '/^== demo/ { m = "demo" } /^== wide/ { m = "wide" }
         /^\| \*\*/ { split($0, c, "|"); printf "| %s |%s|%s|%s|%s|%s|%s|%s|%s|%s|\n", m, c[2], c[4], c[5], c[6], c[7], c[8], c[9], c[11], c[13] }' \
      "$out/cluster.log" | tee -a "$S"
  }
  grep -q 'failed (exit' "$out/cluster.log" && fail "cluster" "$(grep -m1 'failed (exit' "$out/cluster.log")"
  grep -q '^| \*\*kfac' "$out/cluster.log" || fail "cluster" "no K-FAC figures (cluster.log)"
  grep -h 'device: ' "$work"/clusters/demo/kfac-1/logs/worker-1.log 2>/dev/null | head -n 1 | sed 's/^/- worker-1: /' | tee -a "$S"
  grep -h 'device: ' "$work"/clusters/demo/kfac-1/logs/statsd-1.log 2>/dev/null | head -n 1 | sed 's/^/- statsd-1: /' | tee -a "$S"
fi

# ---- 7. study 1 on this machine ------------------------------------------------
# Asynchronous against synchronous inverses (Ba et al. sec. 6.1), the points
# of experiments/async-vs-sync-mnist.sweep, with the workers and kfac-statsd
# on the GPU and 4 CPU inverse daemons; whole test set, seeds 1 2 3.
say ""
say "## 7. Study 1 (asynchronous against synchronous inverses) with GPU workers"
if [ "$tests_only" = 1 ] || [ ! -f "$KIT/data/mnist/train-images-idx3-ubyte.gz" ] || [ "$(left)" -lt 60 ]; then
  say "- not run (--tests-only, no MNIST in the kit, or $(left) s left)"
else
  st=200; [ "$quick" = 1 ] && st=30
  cat >"$work/gpu-async-vs-sync.sweep" <<EOF
title = Study 1 on a GPU machine: asynchronous vs synchronous inverses, MNIST CNN
base = experiments/mnist-cnn.ini
seeds = 1 2 3
set data.dir = $KIT/data
set worker.device = ${dev:-cpu}
set statsd.device = ${dev:-cpu}
set cluster.invertd = 4
set run.eval_n = 0
set run.steps = $st
set run.eval_every = 50
point async = kfac.max_inverse_staleness=-1 kfac.refresh=continuous
point sync-every-20 = kfac.max_inverse_staleness=19 kfac.refresh=every kfac.inverse_every=20
point sync-every-step = kfac.max_inverse_staleness=0 run.steps=$((st / 2))
EOF
  t=$(limit 150)
  s0=$(date +%s)
  { timeout "$t" sh tools/kfac-sweep "$work/gpu-async-vs-sync.sweep" --out "$work/study1"
    echo "exit $?"
    sh tools/kfac-sweep "$work/gpu-async-vs-sync.sweep" --out "$work/study1" --report; } >"$out/study1.log" 2>&1
  say "- $(( $(date +%s) - s0 )) s; $(grep -m1 '^exit' "$out/study1.log")"
  [ -r "$work/study1/summary.md" ] && sed -n '1,40p' "$work/study1/summary.md" | tee -a "$S"
fi
# Each run's status file too (tools/kfac-sweep --report counts a run only by it)
# and the sweep file, so that the study can be published from the archive.
[ -d "$work/study1" ] && cp "$work/gpu-async-vs-sync.sweep" "$work/study1/" 2>/dev/null
(cd "$work" && find clusters study1 -type f \( -name '*.csv' -o -name '*.ini' -o -name '*.md' -o -name '*.tsv' \
   -o -name '*.log' -o -name '*.txt' -o -name '*.sweep' -o -name status \) 2>/dev/null | tar -czf "$out/runs.tar.gz" -T - 2>/dev/null)

# ---- 8. more seeds, with what time is left ------------------------------------
if [ "$gpu" = 1 ] && [ "$tests_only" = 0 ] && [ "$(left)" -gt 40 ]; then
  say ""
  say "## 8. Twin tests with more seeds (while time is left)"
  for i in 1 2 3 4 5 6; do
    [ "$(left)" -gt 25 ] || break
    sd=$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')
    KFAC_TEST_SEED=$sd KFAC_REQUIRE_GPU=1 timeout "$(limit 60)" "$KIT/tests/test_backend_cuda" >"$work/seed.log" 2>&1
    rc=$?
    { echo "== seed $sd: exit $rc"; cat "$work/seed.log"; } >>"$out/twin.log"
    say "- seed $sd: exit $rc; largest over the tests: $(worst_max "$work/seed.log")"
    [ "$rc" = 0 ] || fail "test_backend_cuda, seed $sd" "exit $rc (twin.log)"
  done
fi

# ---- verdict -------------------------------------------------------------------
say ""
say "total: $(( $(date +%s) - T0 )) s"
rm -rf "$work"
if [ "$gpu" = 0 ]; then
  say "VERDICT: no GPU here ($probe): this run does not count${failed:+; failed:$failed}"
  exit 3
fi
if [ -n "$failed" ]; then
  say "VERDICT: FAILED:$failed"
  exit 1
fi
say "VERDICT: counts: a GPU ran every GPU step and nothing failed"
exit 0
