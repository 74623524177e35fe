#!/bin/sh
# tests/integration/14-gpu-kit.sh — the GPU machine's kit and script,
# rehearsed on this machine (docs/gpu.md):
#   1. tools/gpu-kit.sh packs a CUDA build's programs with every non-CUDA
#      library they load (no MNIST, fast xz level): the kit holds the
#      daemons, the twin tests, bench_gpu, kfac-launch, the models, libzmq
#      and OpenBLAS, and a MANIFEST naming the CUDA libraries it needs;
#   2. the kit's programs, unpacked elsewhere with bench/gpu/kit-env.sh's
#      LD_LIBRARY_PATH, start (kfac-ps --help), and its test_backend_cuda
#      loads the CUDA backend's plugin from the kit's lib/kfac/ (without a
#      GPU it skips for want of a GPU, not of the plugin);
#   3. bench/gpu/first-run.sh --quick --tests-only runs from it. Without a
#      GPU it must say that the run does not count and exit 3, with the CPU
#      figures present; with one, exit 0 and a counted verdict.
# Skips (77) where the build has no CUDA backend: the kit is for CUDA builds.
set -u
BUILD=${BUILD:-build}
t0=$(date +%s)
fail() { echo "14-gpu-kit: FAIL: $*"; exit 1; }
[ -x "$BUILD/kfac-worker" ] || fail "no $BUILD/kfac-worker (build first)"
if [ ! -f "$BUILD/libkfac-cuda.so" ]; then
  echo "14-gpu-kit: skipped: $BUILD is built without CUDA (nvcc and cuDNN's headers are needed for the kit)"
  exit 77
fi
dir=$(mktemp -d "${TMPDIR:-/tmp}/kfac-kit-test.XXXXXX") || exit 1
trap 'rm -rf "$dir"' EXIT
make --no-print-directory BUILD="$BUILD" "$BUILD/bench/bench_gpu" >"$dir/make.log" 2>&1 ||
  { tail -n 20 "$dir/make.log"; fail "cannot build $BUILD/bench/bench_gpu"; }

# 1. the kit
KFAC_KIT_DATA=0 KFAC_KIT_XZ_LEVEL=0 sh tools/gpu-kit.sh "$BUILD" "$dir/kit" >"$dir/kit.log" 2>&1 ||
  { cat "$dir/kit.log"; fail "tools/gpu-kit.sh failed"; }
kit=$dir/kit/kfac-gpu-kit.tar.xz
[ -s "$kit" ] || fail "no $kit"
mkdir "$dir/u" && xz -dc "$kit" | tar -C "$dir/u" -xf - || fail "cannot unpack the kit"
K=$dir/u/kfac-gpu-kit
for f in lib/kfac/libkfac-cuda.so bin/kfac-ps bin/kfac-worker bin/kfac-statsd bin/kfac-invertd tests/test_backend_cuda tests/test_backend \
         bench/bench_gpu deploy/kfac-launch models/mnist-cnn.model MANIFEST; do
  [ -e "$K/$f" ] || fail "the kit has no $f"
done
ls "$K"/lib/libzmq.so.* >/dev/null 2>&1 || fail "the kit has no libzmq"
ls "$K"/lib/libopenblas* >/dev/null 2>&1 || fail "the kit has no OpenBLAS"
ls "$K"/lib/libcud* >/dev/null 2>&1 && fail "the kit packs CUDA libraries: $(ls "$K"/lib/libcud*)"
grep -q 'libcudnn.so.9' "$K/MANIFEST" || fail "MANIFEST does not name the CUDA libraries the programs need"
[ -d "$K/data" ] && fail "KFAC_KIT_DATA=0 still packed data"

# 2. its programs start on their own libraries
out=$(KIT=$K sh -c '. bench/gpu/kit-env.sh; "$KFAC_BIN/kfac-ps" --help' 2>&1) || fail "the kit's kfac-ps --help failed: $out"
echo "$out" | grep -q -- '--ps.bind' || fail "the kit's kfac-ps --help printed no option table"
# and the CUDA backend's plugin is found in the kit (lib/kfac/) and loads
# (test_backend names it with KFAC_CUDA_LIB, so it loads without a driver
# too); without a GPU the twin tests skip because of the GPU, naming the
# kit's plugin where no driver is found
out=$(KIT=$K sh -c '. bench/gpu/kit-env.sh; "$KIT/tests/test_backend"' 2>&1) ||
  fail "the kit's test_backend failed: $(echo "$out" | tail -n 3)"
out=$(KIT=$K sh -c '. bench/gpu/kit-env.sh; "$KIT/tests/test_backend_cuda"' 2>&1)
rc=$?
if nvidia-smi -L >/dev/null 2>&1; then
  [ "$rc" = 0 ] || fail "the kit's test_backend_cuda exited $rc: $(echo "$out" | tail -n 3)"
else
  [ "$rc" = 77 ] && echo "$out" | grep -q 'skipped: .*no GPU (' ||
    fail "the kit's test_backend_cuda (status $rc) did not skip for want of a GPU: $(echo "$out" | tail -n 2)"
  echo "$out" | grep -q 'no NVIDIA driver' && { echo "$out" | grep -q "$K/lib/kfac/libkfac-cuda.so" ||
    fail "the kit's test_backend_cuda did not find the kit's plugin: $(echo "$out" | tail -n 1)"; }
fi

# 3. the script, rehearsed
sh bench/gpu/first-run.sh --kit "$kit" --quick --tests-only --out "$dir/out" >"$dir/run.log" 2>&1
rc=$?
S=$dir/out/summary.md
[ -r "$S" ] || { cat "$dir/run.log"; fail "first-run.sh wrote no summary.md"; }
grep -q '^VERDICT: ' "$S" || fail "summary.md has no verdict"
n_files=$(ls "$dir/out" | wc -l)
[ "$n_files" -le 8 ] || fail "first-run.sh wrote $n_files files; the GPU machine returns 8 at most"
if nvidia-smi -L >/dev/null 2>&1; then
  [ "$rc" = 0 ] || { cat "$S"; fail "on a GPU machine first-run.sh exited $rc"; }
else
  [ "$rc" = 3 ] || { cat "$S"; fail "without a GPU first-run.sh exited $rc, expected 3 (the run does not count)"; }
  grep -q 'VERDICT: no GPU here.*this run does not count' "$S" || fail "the verdict does not say the run does not count"
  grep -q '^| mnist-cnn | - | [0-9]' "$S" || { cat "$S"; fail "no CPU figure for the MNIST CNN in the summary"; }
fi
echo "14-gpu-kit: kit of $(( $(wc -c <"$kit") / 1048576 )) MiB (xz level 0), first-run.sh exit $rc; $(( $(date +%s) - t0 )) s"
echo "14-gpu-kit: passed"
