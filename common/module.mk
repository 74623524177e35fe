# common/: the static library every daemon, tool, test and benchmark links.
COMMON_SRC := $(wildcard common/*.c)
COMMON_OBJ := $(patsubst %.c,$(BUILD)/obj/%.o,$(COMMON_SRC))
ifeq ($(CUDA),1)
COMMON_OBJ += $(patsubst %.cu,$(BUILD)/obj/%.cu.o,$(wildcard common/*.cu))
endif
COMMON_LIB := $(BUILD)/libkfaccommon.a
LIBS += $(COMMON_LIB)

$(COMMON_LIB): $(COMMON_OBJ)
	$(call msg,AR,$@)
	$(Q)rm -f $@ && ar rcs $@ $^
