#!/bin/sh
# tools/gpu-kit.sh BUILD OUT_DIR — pack what a bare GPU machine needs to run
# kfac's GPU checks into OUT_DIR/kfac-gpu-kit.tar.xz (run by `make gpu-kit`).
#
# A GPU machine for the checks may have the NVIDIA driver, CUDA's toolkit and
# cuDNN/cuBLAS (in the toolkit's folder or inside a Python environment's
# nvidia-* packages) and none of the Debian packages the daemons link
# (ZeroMQ, protobuf-c, OpenBLAS, LAPACKE, libuv, libmicrohttpd, Check is
# static). So the kit carries:
#   bin/      the daemons and tools of BUILD, stripped of debug info
#   tests/    the backend twin tests (test_backend, test_backend_cuda)
#   bench/    bench_gpu
#   deploy/   kfac-launch
#   models/   the model descriptions
#   lib/kfac/ the CUDA backend's plugin, libkfac-cuda.so (the programs find
#             it there from bin/, tests/ and bench/)
#   lib/      every shared library those programs load except glibc's own,
#             libstdc++/libgcc_s (in lib/fallback/: used only when the
#             machine has none) and CUDA's (cudart, cuBLAS, cuDNN: found on
#             the machine by bench/gpu/kit-env.sh)
#   data/     MNIST, gzip'd (kfac reads .gz IDX files), when BUILD's data
#             folder has it (KFAC_KIT_DATA=0 leaves it out)
#   MANIFEST  what was packed, from which commit, with sizes
# The archive must travel with a working tree of at most 64 MiB: the script
# prints its size and fails above KFAC_KIT_MAX_MB (default 48).
# KFAC_KIT_XZ_LEVEL (default 6) is the xz level: 0 packs fast (tests).
set -eu
BUILD=${1:?usage: tools/gpu-kit.sh BUILD OUT_DIR}
OUT=${2:?usage: tools/gpu-kit.sh BUILD OUT_DIR}
MAX_MB=${KFAC_KIT_MAX_MB:-48}
DATA=${KFAC_DATA_DIR:-data}
prog=gpu-kit

die() { echo "$prog: $*" >&2; exit 1; }

for b in kfac-ps kfac-worker kfac-statsd kfac-invertd kfac-train kfac-keygen kfac-poke \
         tests/backend/test_backend tests/backend/test_backend_cuda bench/bench_gpu; do
  [ -x "$BUILD/$b" ] || die "$BUILD/$b is missing: run make CUDA=1 gpu-kit (it builds them)"
done
[ -f "$BUILD/libkfac-cuda.so" ] && ldd "$BUILD/libkfac-cuda.so" | grep -q 'libcudart' ||
  die "$BUILD/libkfac-cuda.so (the CUDA backend) is missing or not linked with CUDA (libcudart): build with CUDA=1 (nvcc and cuDNN's headers needed)"

stage=$(mktemp -d "${TMPDIR:-/tmp}/kfac-kit.XXXXXX")
trap 'rm -rf "$stage"' EXIT
k=$stage/kfac-gpu-kit
mkdir -p "$k/bin" "$k/tests" "$k/bench" "$k/deploy" "$k/models" "$k/lib/fallback" "$k/lib/kfac"

for b in kfac-ps kfac-worker kfac-statsd kfac-invertd kfac-train kfac-keygen kfac-poke; do
  cp "$BUILD/$b" "$k/bin/"
done
cp "$BUILD/tests/backend/test_backend" "$BUILD/tests/backend/test_backend_cuda" "$k/tests/"
cp "$BUILD/bench/bench_gpu" "$k/bench/"
cp "$BUILD/libkfac-cuda.so" "$k/lib/kfac/"
strip --strip-debug "$k"/bin/* "$k"/tests/* "$k"/bench/* "$k"/lib/kfac/*
cp deploy/kfac-launch "$k/deploy/"
cp models/*.model "$k/models/"

# Shared libraries: everything ldd resolves, but glibc, the C++ runtime and CUDA.
libs=$(for f in "$k"/bin/* "$k"/tests/* "$k"/bench/* "$k"/lib/kfac/*; do ldd "$f"; done |
       awk '$2 == "=>" && $3 ~ /^\// { print $1 " " $3 }' | sort -u)
echo "$libs" | while read -r name path; do
  [ -n "$name" ] || continue
  case $name in
    linux-vdso*|ld-linux*|libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|libresolv.so*|libutil.so*) ;;
    libcudart*|libcublas*|libcudnn*|libnvrtc*|libnvJitLink*) ;;
    libstdc++*|libgcc_s*) cp -L "$path" "$k/lib/fallback/$name" ;;
    *) cp -L "$path" "$k/lib/$name" ;;
  esac
done
strip --strip-unneeded "$k"/lib/*.so* "$k"/lib/fallback/*.so* 2>/dev/null || true

if [ "${KFAC_KIT_DATA:-1}" = 1 ] && [ -f "$DATA/mnist/train-images-idx3-ubyte" ]; then
  mkdir -p "$k/data/mnist"
  for f in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
    gzip -9 -c "$DATA/mnist/$f" > "$k/data/mnist/$f.gz"
  done
fi

{
  echo "kfac GPU kit"
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (with local changes)')"
  echo "built: $(date -u '+%Y-%m-%d %H:%M UTC') on $(uname -m), $(. /etc/os-release && echo "$PRETTY_NAME")"
  echo "nvcc: $(${NVCC:-nvcc} --version 2>/dev/null | tail -n 2 | head -n 1 || echo unknown)"
  echo "CUDA libraries the CUDA backend needs (not packed; found on the GPU machine):"
  ldd "$k/lib/kfac/libkfac-cuda.so" | awk '$1 ~ /cudart|cublas|cudnn/ { print "  " $1 }' | sort -u
  echo "files:"
  (cd "$k" && find . -type f | sort | while read -r f; do printf '  %10d %s\n' "$(wc -c < "$f")" "$f"; done)
} > "$k/MANIFEST"

mkdir -p "$OUT"
tar -C "$stage" -cf - kfac-gpu-kit | xz -T0 -"${KFAC_KIT_XZ_LEVEL:-6}" > "$OUT/kfac-gpu-kit.tar.xz.tmp"
mv "$OUT/kfac-gpu-kit.tar.xz.tmp" "$OUT/kfac-gpu-kit.tar.xz"
bytes=$(wc -c < "$OUT/kfac-gpu-kit.tar.xz")
mb=$(( (bytes + 1048575) / 1048576 ))
echo "$prog: $OUT/kfac-gpu-kit.tar.xz: $mb MiB ($(du -sh "$k" | cut -f1) unpacked)"
[ "$mb" -le "$MAX_MB" ] || die "the kit is $mb MiB, over KFAC_KIT_MAX_MB=$MAX_MB: it must travel in 64 MiB with the working tree"
