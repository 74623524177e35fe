# common/: the static library every daemon, tool, test and benchmark links.
# One folder per layer (docs/architecture.md, "Layers"); tools/check-layers.sh
# checks that each folder includes only the layers below it.
COMMON_LAYERS := base nn kfac backend run net
# The CUDA backend (common/backend/backend_cuda*.c and the kernels) is not
# in the library: it is the plugin $(BUILD)/libkfac-cuda.so, the one object
# linked with CUDA's libraries, which backend.c loads on first use
# (common/backend/backend_cuda_api.h says why and where it is looked for).
CUDA_PLUGIN_SRC := $(wildcard common/backend/backend_cuda*.c)
COMMON_SRC := $(filter-out $(CUDA_PLUGIN_SRC),$(foreach d,$(COMMON_LAYERS),$(wildcard common/$(d)/*.c)))
COMMON_OBJ := $(patsubst %.c,$(BUILD)/obj/%.o,$(COMMON_SRC))
COMMON_LIB := $(BUILD)/libkfaccommon.a
LIBS += $(COMMON_LIB)
CUDA_PLUGIN :=
ifeq ($(CUDA),1)
CUDA_PLUGIN := $(BUILD)/libkfac-cuda.so
CUDA_PLUGIN_OBJ := $(patsubst %.c,$(BUILD)/obj-pic/%.o,$(CUDA_PLUGIN_SRC)) \
                   $(patsubst %.cu,$(BUILD)/obj/%.cu.o,$(wildcard common/backend/*.cu))
LIBS += $(CUDA_PLUGIN)
# log_write, log_level_now and kfac_factor_len stay undefined here: the
# program that loads the plugin provides them.
$(CUDA_PLUGIN): $(CUDA_PLUGIN_OBJ)
	$(call msg,LINK,$@)
	$(Q)$(CC) $(LDFLAGS) -shared -o $@ $^ $(CUDA_LDLIBS)
endif

$(COMMON_LIB): $(COMMON_OBJ)
	$(call msg,AR,$@)
	$(Q)rm -f $@ && ar rcs $@ $^
