# tests/fuzz/: libFuzzer harnesses (clang, ASan + UBSan), built by `make fuzz`
# into build-fuzz/ and run by `make fuzz-run` (FUZZ_SECONDS per harness):
#   fuzz_msg         msg_decode + msg_validate (with and without a model shape)
#   fuzz_config      the run-file parser with every role's option table
#   fuzz_model_file  the model-file parser (and one forward pass of what parses)
#   fuzz_ckpt        the checkpoint reader ps_ckpt_decode (CRCs fixed up, so
#                    the record parser is reached), in three configurations;
#                    a refused image must leave the state as it was
# Corpora start from real inputs: every message type (fuzz_msg_seeds), the
# example and experiment run files, the model files, checkpoints written by
# the encoder kfac-ps uses (fuzz_ckpt_seeds); tests/fuzz/regress/<h>/
# holds inputs that once crashed a harness, replayed on every run.
FUZZ_HARNESSES := fuzz_msg fuzz_config fuzz_model_file fuzz_ckpt
FUZZ_SECONDS ?= 20
FUZZ_BUILD := build-fuzz

ifeq ($(SAN),fuzz)
FUZZ_BINS := $(addprefix $(BUILD)/fuzz/,$(FUZZ_HARNESSES)) $(BUILD)/fuzz/fuzz_msg_seeds $(BUILD)/fuzz/fuzz_ckpt_seeds
# The checkpoint reader is the PS's own code: its objects join those two.
$(BUILD)/fuzz/fuzz_ckpt $(BUILD)/fuzz/fuzz_ckpt_seeds: $(BUILD)/obj/tests/fuzz/fuzz_ckpt_world.o \
	$(addprefix $(BUILD)/obj/ps/,ckpt.o ckpt_encode.o ckpt_wire.o sched.o refresh.o member.o owner.o ident.o drift.o)
$(BUILD)/fuzz/fuzz_%: $(BUILD)/obj/tests/fuzz/fuzz_%.o $(BUILD)/obj/tests/fuzz/fuzz_model.o $(PROTO_LIB) $(COMMON_LIB)
	$(call msg,LINK,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(LDFLAGS) $(if $(filter %_seeds,$*),,-fsanitize=fuzzer) -o $@ -Wl,--start-group $^ -Wl,--end-group $(LDLIBS)
build-fuzz-bins: $(FUZZ_BINS)
endif

.PHONY: fuzz fuzz-run build-fuzz-bins
fuzz: $(DEPS_STAMP)
	$(Q)$(MAKE) --no-print-directory $(MAKE_J) BUILD=$(FUZZ_BUILD) SAN=fuzz CUDA=0 CC=clang OPT=-O1 build-fuzz-bins

fuzz-run: fuzz
	$(Q)sh tests/fuzz/run.sh $(FUZZ_BUILD) $(FUZZ_SECONDS) $(FUZZ_HARNESSES)
