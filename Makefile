# kfac — one non-recursive Makefile.
#
#   make            build libraries and daemons into build/
#   make check      install what is missing, fetch data, run every test
#   make demo       train the MNIST CNN on a local cluster
#   make check-asan the tests under AddressSanitizer + UBSan (build-asan/)
#   make check-asan-unit  the unit tests alone under them, but the longest
#                   training programs (what .ci/run adds to make check)
#   make fuzz       libFuzzer harnesses (clang) in build-fuzz/; make fuzz-run runs them
#   make bench      print benchmark figures (never pass/fail)
#   make install    PREFIX=/usr/local DESTDIR=  (make uninstall: the same, removed)
#   make clean      remove the build trees (build*/ of every target; not data/, runs/)
#   make gpu-kit    the GPU machine's kit: build-gpukit/kfac-gpu-kit.tar.xz (docs/gpu.md)
#   JOBS=N          build jobs (default: one per CPU; -jN on the command line wins)
#   V=1             show full command lines;  CUDA=0 never touch CUDA
#                   (CUDA=1 is the default where nvcc and cudnn.h are found)
#
# Each folder adds its sources in its own module.mk; objects go to $(BUILD).

BUILD   ?= build
PREFIX  ?= /usr/local
DESTDIR ?=
V       ?= 0
SAN     ?= 0
CUDA_HOME ?= /usr/local/cuda
NVCC    ?= $(shell command -v nvcc 2>/dev/null || { test -x $(CUDA_HOME)/bin/nvcc && echo $(CUDA_HOME)/bin/nvcc; })
# The CUDA backend needs both nvcc and cuDNN's headers; with either missing
# the build is CPU-only (CUDA=0/1 on the command line overrides).
CUDNN_H ?= $(wildcard $(CUDA_HOME)/include/cudnn.h)
CUDA    ?= $(if $(and $(NVCC),$(CUDNN_H)),1,0)

ifeq ($(V),1)
Q :=
msg = @true
else
Q := @
msg = @printf '  %-7s %s\n' $(1) $(2)
endif

PKGS := openblas lapacke libzmq libprotobuf-c libuv zlib libmicrohttpd
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null)
CHECK_LIBS := $(shell pkg-config --libs check 2>/dev/null)

CC      ?= cc
OPT     ?= -O3
CFLAGS  += -std=c11 -D_GNU_SOURCE $(OPT) -g -Wall -Wextra -Werror -MMD -MP -pthread \
           -I. -I$(BUILD)/gen $(PKG_CFLAGS)
# oneDNN ships no .pc file; libgomp is its thread runtime (common/nn/nn_dnnl.c
# sets the thread count of each calling thread through it).
LDLIBS  += $(PKG_LIBS) -ldnnl -lgomp -lm -pthread
ifeq ($(SAN),1)
CFLAGS  += -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
LDFLAGS += -fsanitize=address,undefined
endif
ifeq ($(SAN),thread)
CFLAGS  += -fsanitize=thread -fno-omit-frame-pointer
LDFLAGS += -fsanitize=thread
endif
ifeq ($(SAN),fuzz)
CFLAGS  += -fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
LDFLAGS += -fsanitize=address,undefined
endif
ifeq ($(CUDA),1)
CFLAGS  += -DKFAC_CUDA=1 -I$(CUDA_HOME)/include
# Only the CUDA backend's plugin (common/module.mk) links CUDA's libraries;
# the programs export the three symbols it calls back
# (common/backend/backend_cuda_api.h).
CUDA_LDLIBS := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudnn -lcublas -lcudart -lstdc++
LDFLAGS += -Wl,--export-dynamic-symbol=log_write -Wl,--export-dynamic-symbol=log_level_now \
           -Wl,--export-dynamic-symbol=kfac_factor_len
NVFLAGS ?= -O2 -std=c++17 -I. -Xcompiler -fPIC -arch=sm_90 -Wno-deprecated-gpu-targets -MMD -MP
endif

.DEFAULT_GOAL := all
.PHONY: build-all build-tests build-bench
.PHONY: gpu-kit
.PHONY: all check check-unit check-integration check-asan check-asan-unit asan-unit bench demo install clean deps deps-build data help
.SUFFIXES:
.SECONDARY:

BINS    :=
LIBS    :=
TESTS   :=
BENCHES :=

# Dependencies: a stamp per group of tools/deps.sh records that it found (or
# installed) the group's packages, so the apt check runs once per build tree:
# build (make, make install: compiler and libraries), data (make data, make
# demo: fetching the data sets too), test (make check, make bench, make
# gpu-kit, and the unit tests' objects: the test stack as well). A host
# that only builds and installs never gets the test stack. Targets that
# compile re-enter make after it, so pkg-config is read with the packages
# present.
DEPS_STAMP := $(BUILD)/.deps-build-ok
DEPS_DATA_STAMP := $(BUILD)/.deps-data-ok
DEPS_TEST_STAMP := $(BUILD)/.deps-test-ok
# The build itself runs one job per CPU unless the command line gave -j
# (make -j1 for a serial build): a clean build took 97+107 s serial and
# 57+62 s with -j2 on 2 cores (the CPU-only and the CUDA build).
JOBS ?= $(shell nproc 2>/dev/null || echo 1)
MAKE_J = $(if $(filter -j%,$(MAKEFLAGS)),,-j$(JOBS))
SUBMAKE = $(MAKE) --no-print-directory $(MAKE_J) BUILD=$(BUILD) SAN=$(SAN) CUDA=$(CUDA) OPT='$(OPT)'

include common/module.mk
include proto/module.mk
include tools/module.mk
include ps/module.mk worker/module.mk statsd/module.mk invertd/module.mk
include tests/module.mk
include tests/fuzz/module.mk
include bench/module.mk
include deploy/module.mk

# ---- generic rules -------------------------------------------------------
$(BUILD)/obj/%.o: %.c | $(GEN_HEADERS) $(DEPS_STAMP)
	$(call msg,CC,$<)
	@mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS) -c $< -o $@

# The unit tests' objects need Check (tools/deps.sh test).
$(BUILD)/obj/tests/%.o: tests/%.c | $(GEN_HEADERS) $(DEPS_TEST_STAMP)
	$(call msg,CC,$<)
	@mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS) -c $< -o $@

# Position-independent objects for the CUDA backend's plugin.
$(BUILD)/obj-pic/%.o: %.c | $(GEN_HEADERS) $(DEPS_STAMP)
	$(call msg,CC,$<)
	@mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS) -fPIC -c $< -o $@

$(BUILD)/obj/%.cu.o: %.cu
	$(call msg,NVCC,$<)
	@mkdir -p $(@D)
	$(Q)$(NVCC) $(NVFLAGS) -c $< -o $@

$(DEPS_STAMP): tools/deps.sh
	$(Q)sh tools/deps.sh build
	@mkdir -p $(@D) && touch $@
$(DEPS_DATA_STAMP): tools/deps.sh
	$(Q)sh tools/deps.sh data
	@mkdir -p $(@D) && touch $@ $(DEPS_STAMP)
$(DEPS_TEST_STAMP): tools/deps.sh
	$(Q)sh tools/deps.sh test
	@mkdir -p $(@D) && touch $@ $(DEPS_DATA_STAMP) $(DEPS_STAMP)
deps: $(DEPS_TEST_STAMP)
deps-build: $(DEPS_STAMP)

data: $(DEPS_DATA_STAMP)
	$(Q)sh tools/fetch-data.sh

all: $(DEPS_STAMP)
	$(Q)$(SUBMAKE) build-all
build-all: $(LIBS) $(BINS)
build-tests: $(LIBS) $(BINS) $(TESTS)
build-bench: $(LIBS) $(BINS) $(BENCHES)

check: $(DEPS_TEST_STAMP)
	$(Q)$(SUBMAKE) build-tests
	$(Q)sh tools/fetch-data.sh
	$(Q)BUILD=$(BUILD) sh tests/run.sh $(TESTS)

check-asan:
	$(Q)$(MAKE) --no-print-directory BUILD=build-asan SAN=1 OPT=-O1 check

# The unit-test programs under AddressSanitizer + UBSan without those named
# here: the training and gradient-check loops (4 of the 9 minutes the
# whole set took beside a load, bench/RESULTS.md "make check's time"; they
# run without sanitizers in make check) and the CUDA twin (a CPU build).
ASAN_UNIT_SKIP := test_kfac_train test_nn_train test_nn_grad test_backend_cuda
check-asan-unit:
	$(Q)$(MAKE) --no-print-directory BUILD=build-asan SAN=1 OPT=-O1 CUDA=0 asan-unit
asan-unit: $(DEPS_TEST_STAMP)
	$(Q)$(SUBMAKE) build-tests
	$(Q)BUILD=$(BUILD) sh tests/run.sh --only $(filter-out $(foreach t,$(ASAN_UNIT_SKIP),%/$(t)),$(TESTS))

bench: $(DEPS_TEST_STAMP)
	$(Q)$(SUBMAKE) build-bench
	$(Q)sh tools/fetch-data.sh
	$(Q)for b in $(BENCHES); do echo "== $$b"; $$b || exit 1; done

# The main job: the MNIST CNN with K-FAC on a local cluster (2 workers,
# 1 statsd, 2 invertd); see deploy/examples/mnist-cnn-kfac.ini.
DEMO_CONFIG ?= deploy/examples/mnist-cnn-kfac.ini
demo: $(DEPS_DATA_STAMP)
	$(Q)$(SUBMAKE) build-all
	$(Q)sh tools/fetch-data.sh
	$(Q)KFAC_BIN=$(BUILD) sh deploy/kfac-launch $(DEMO_CONFIG) --force

# The kit a bare GPU machine runs bench/gpu/first-run.sh from: daemons, twin
# tests, bench_gpu and every non-CUDA shared library they load, in one
# archive (tools/gpu-kit.sh; docs/gpu.md). Needs a CUDA build.
GPU_KIT_DIR ?= build-gpukit
gpu-kit: $(DEPS_TEST_STAMP)
	$(Q)test "$(CUDA)" = 1 || { echo "make gpu-kit: needs a CUDA build (nvcc and cuDNN's headers; CUDA=$(CUDA))" >&2; exit 1; }
	$(Q)$(SUBMAKE) build-all $(BUILD)/tests/backend/test_backend $(BUILD)/tests/backend/test_backend_cuda $(BUILD)/bench/bench_gpu
	$(Q)sh tools/fetch-data.sh
	$(Q)NVCC=$(NVCC) sh tools/gpu-kit.sh $(BUILD) $(GPU_KIT_DIR)

# Every build tree the targets make (data/ and runs/ stay: they are data).
clean:
	rm -rf $(BUILD) build build-asan build-tsan $(FUZZ_BUILD) $(GPU_KIT_DIR) build-nocuda

help:
	@sed -n '2,17p' Makefile

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
