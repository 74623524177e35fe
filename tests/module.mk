# tests/: Check unit tests in folders that mirror the source tree
# (tests/<layer or daemon>/test_*.c, each defining make_suite()), one binary
# each, all linked with the shared helpers in tests/lib/ (main(), seeds).
# Integration tests are tests/integration/*.sh.
TEST_SRC := $(wildcard tests/*/test_*.c)
TESTS += $(patsubst tests/%.c,$(BUILD)/tests/%,$(TEST_SRC))
TEST_LIB_OBJ := $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard tests/lib/*.c))
$(BUILD)/tests/%: $(BUILD)/obj/tests/%.o $(TEST_LIB_OBJ) $(PROTO_LIB) $(COMMON_LIB)
	$(call msg,LINK,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(LDFLAGS) -o $@ -Wl,--start-group $^ -Wl,--end-group $(CHECK_LIBS) $(LDLIBS)
