# ps/: the kfac-ps daemon (main.c plus its own modules).
$(eval $(call daemon_rule,ps,kfac-ps))

# The PS's units (all but main.c), linked into its unit tests (tests/ps/).
PS_UNIT_OBJ := $(patsubst %.c,$(BUILD)/obj/%.o,$(filter-out ps/main.c,$(wildcard ps/*.c)))
PS_TESTS := $(patsubst tests/%.c,$(BUILD)/tests/%,$(wildcard tests/ps/test_*.c))
# tests/ps/'s helpers that need the PS's units (the checkpoint world)
PS_TEST_HELPERS := $(patsubst %.c,$(BUILD)/obj/%.o,$(filter-out tests/ps/test_%,$(wildcard tests/ps/*.c)))
$(PS_TESTS): $(PS_UNIT_OBJ) $(PS_TEST_HELPERS)
# bench/bench_ps_verify measures ps/verify.c
$(BUILD)/bench/bench_ps_verify: $(BUILD)/obj/ps/verify.o
