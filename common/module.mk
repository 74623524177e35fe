# common/: the static library every daemon, tool, test and benchmark links.
# One folder per layer (docs/architecture.md, "Layers"); tools/check-layers.sh
# checks that each folder includes only the layers below it.
COMMON_LAYERS := base nn kfac backend run net
COMMON_SRC := $(foreach d,$(COMMON_LAYERS),$(wildcard common/$(d)/*.c))
COMMON_OBJ := $(patsubst %.c,$(BUILD)/obj/%.o,$(COMMON_SRC))
ifeq ($(CUDA),1)
COMMON_OBJ += $(patsubst %.cu,$(BUILD)/obj/%.cu.o,$(foreach d,$(COMMON_LAYERS),$(wildcard common/$(d)/*.cu)))
endif
COMMON_LIB := $(BUILD)/libkfaccommon.a
LIBS += $(COMMON_LIB)

$(COMMON_LIB): $(COMMON_OBJ)
	$(call msg,AR,$@)
	$(Q)rm -f $@ && ar rcs $@ $^
