# tests/: one Check binary per tests/test_*.c (each defines make_suite()),
# sharing tests/check_main.c; integration tests are tests/integration/*.sh.
TEST_SRC := $(wildcard tests/test_*.c)
TESTS += $(patsubst tests/%.c,$(BUILD)/tests/%,$(TEST_SRC))
TEST_HELPERS := $(patsubst %.c,$(BUILD)/obj/%.o,$(filter-out $(TEST_SRC),$(wildcard tests/*.c)))
$(BUILD)/tests/test_%: $(BUILD)/obj/tests/test_%.o $(TEST_HELPERS) $(PROTO_LIB) $(COMMON_LIB)
	$(call msg,LINK,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(LDFLAGS) -o $@ -Wl,--start-group $^ -Wl,--end-group $(CHECK_LIBS) $(LDLIBS)
