# Sanitizer builds shared by native/Makefile and native/fake/Makefile: SANITIZE=asan (AddressSanitizer
# + UndefinedBehaviorSanitizer, every UB report fatal) or SANITIZE=tsan (ThreadSanitizer), with the
# host compiler (not zig) into build/<name>/. A process loads the runtime first:
# LD_PRELOAD=$$($(CC) -print-file-name=libasan.so):.../libgpuslice.so (tests/native/harness.py).
ifeq ($(SANITIZE),asan)
  SAN_FLAGS := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
else ifeq ($(SANITIZE),tsan)
  SAN_FLAGS := -fsanitize=thread -fno-omit-frame-pointer
  EXTRA_CFLAGS += -Wno-tsan # gcc: TSan does not model the fake driver's atomic_thread_fence
  # the TSan runtime looks its interceptors up with dlsym before it is initialised, i.e. through
  # the library's dlsym (intercept/dlsym.c): that file must not call into the runtime
  UNSANITIZED_FLAGS := -fno-sanitize=thread
else ifneq ($(SANITIZE),)
  $(error SANITIZE=$(SANITIZE): use asan or tsan)
endif
ifneq ($(SANITIZE),)
  BUILD := build/$(SANITIZE)
  ZIG :=
  EXTRA_CFLAGS += $(SAN_FLAGS)
  EXTRA_LDFLAGS += $(SAN_FLAGS)
endif
