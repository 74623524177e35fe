# tools/: command-line programs built from one .c each (kfac-train, ...),
# and the rule the daemon folders use.

# daemon_rule(folder, binary): link every .c of the folder into $(BUILD)/binary.
define daemon_rule
ifneq ($$(wildcard $(1)/*.c),)
$$(BUILD)/$(2): $$(patsubst %.c,$$(BUILD)/obj/%.o,$$(wildcard $(1)/*.c)) $$(PROTO_LIB) $$(COMMON_LIB)
	$$(call msg,LINK,$$@)
	$$(Q)$$(CC) $$(LDFLAGS) -o $$@ -Wl,--start-group $$^ -Wl,--end-group $$(LDLIBS)
BINS += $$(BUILD)/$(2)
endif
endef

TOOL_SRC := $(wildcard tools/kfac-*.c)
TOOL_BINS := $(patsubst tools/%.c,$(BUILD)/%,$(TOOL_SRC))
BINS += $(TOOL_BINS)
$(BUILD)/kfac-%: $(BUILD)/obj/tools/kfac-%.o $(PROTO_LIB) $(COMMON_LIB)
	$(call msg,LINK,$@)
	$(Q)$(CC) $(LDFLAGS) -o $@ -Wl,--start-group $^ -Wl,--end-group $(LDLIBS)

# kfac-poke's members live in a part of their own (tools/poke/).
$(BUILD)/kfac-poke: $(BUILD)/obj/tools/poke/member.o $(BUILD)/obj/tools/poke/fast.o
