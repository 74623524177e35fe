# bench/: programs that print figures; never pass/fail on time.
BENCH_SRC := $(wildcard bench/bench_*.c)
BENCHES += $(patsubst bench/%.c,$(BUILD)/bench/%,$(BENCH_SRC))
$(BUILD)/bench/bench_%: $(BUILD)/obj/bench/bench_%.o $(PROTO_LIB) $(COMMON_LIB)
	$(call msg,LINK,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(LDFLAGS) -o $@ -Wl,--start-group $^ -Wl,--end-group $(LDLIBS)
