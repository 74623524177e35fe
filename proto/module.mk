# proto/: kfac.proto compiled by protoc-c at build time, plus the
# encode/decode/validate layer. protobuf-c types never leave this library.
PROTO_GEN_C := $(BUILD)/gen/proto/kfac.pb-c.c
PROTO_GEN_H := $(BUILD)/gen/proto/kfac.pb-c.h
GEN_HEADERS := $(if $(wildcard proto/kfac.proto),$(PROTO_GEN_H))
PROTO_OBJ := $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard proto/*.c))
PROTO_OBJ += $(if $(wildcard proto/kfac.proto),$(BUILD)/obj/gen/proto/kfac.pb-c.o)
PROTO_LIB := $(BUILD)/libkfacproto.a
LIBS += $(PROTO_LIB)

$(PROTO_GEN_H): $(PROTO_GEN_C)
$(PROTO_GEN_C): proto/kfac.proto | $(DEPS_STAMP)
	$(call msg,PROTOC,$<)
	@mkdir -p $(BUILD)/gen
	$(Q)protoc-c --c_out=$(BUILD)/gen $<

# Generated code: compiled without -Werror (its warnings are not ours).
$(BUILD)/obj/gen/proto/kfac.pb-c.o: $(PROTO_GEN_C)
	$(call msg,CC,$<)
	@mkdir -p $(@D)
	$(Q)$(CC) $(filter-out -Werror -Wextra,$(CFLAGS)) -c $< -o $@

$(PROTO_LIB): $(PROTO_OBJ)
	$(call msg,AR,$@)
	$(Q)rm -f $@ && ar rcs $@ $^
