# shim/module.mk — the preload shim (libspill-preload.so), the host-emulated
# CUDA driver its tests run on, the test programs and `make bench-shim`.
# Needs the CUDA headers (not a GPU): without them nothing here is built and
# the shim tests skip.
ifneq ($(HAVE_CUDA),)
SHIM_SRCS := $(wildcard shim/*.c)
SHIM_OBJS := $(patsubst %,$(O)/obj/%.o,$(SHIM_SRCS))
SHIM_LIBS := $(call mod_libs,vmm)
SHIM_LDLIBS := $(if $(HAVE_URING),-luring) -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 \
	-lcudart -ldl -lm -lrt
PRELOAD_LIB := $(O)/lib/libspill-preload.so

$(PRELOAD_LIB): $(SHIM_OBJS) $(SHIM_LIBS) shim/exports.map
	@mkdir -p $(@D)
	$(if $(Q),@echo "  LD      $@")
	$(Q)$(CC) -shared $(LDFLAGS) -Wl,--version-script=shim/exports.map -Wl,-Bsymbolic \
		-Wl,-soname,libspill-preload.so -o $@ $(SHIM_OBJS) $(SHIM_LIBS) $(SHIM_LDLIBS)

# The emulated driver: a libcuda.so.1 over the host backend, for tests only.
FAKECU_LIB := $(O)/tests/shim/fake/libcuda.so.1
$(FAKECU_LIB): $(O)/obj/tests/shim/fakecuda.c.o $(call mod_libs,device)
	@mkdir -p $(@D)
	$(if $(Q),@echo "  LD      $@")
	$(Q)$(CC) -shared $(LDFLAGS) -Wl,-Bsymbolic -Wl,-soname,libcuda.so.1 -o $@ $^ $(SHIM_LDLIBS)

# Test programs: plain driver-API programs linked against the emulated driver.
# DT_RPATH (--disable-new-dtags), not DT_RUNPATH: it wins over LD_LIBRARY_PATH,
# which on GPU machines often names the real driver's folder (libcuda.so.1 too).
SHIM_PROG_SRCS := $(wildcard tests/shim/cuprog_*.c)
SHIM_PROGS := $(patsubst %.c,$(O)/%,$(SHIM_PROG_SRCS))
$(O)/tests/shim/cuprog_%: $(O)/obj/tests/shim/cuprog_%.c.o $(FAKECU_LIB)
	@mkdir -p $(@D)
	$(if $(Q),@echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $< -L$(dir $(FAKECU_LIB)) -l:libcuda.so.1 \
		-Wl,--disable-new-dtags,-rpath,'$$ORIGIN/fake' -ldl -lm

EXTRA_ALL += $(PRELOAD_LIB)
EXTRA_TEST_DEPS += $(PRELOAD_LIB) $(FAKECU_LIB) $(SHIM_PROGS)

# make bench-shim: interception overhead per launch (100 live allocations) and
# per allocation, with and without the shim, side by side -> bench/results/shim.json
bench-shim: $(PRELOAD_LIB) $(FAKECU_LIB) $(O)/tests/shim/cuprog_bench
	@mkdir -p bench/results
	@O=$(O) bench/shim.sh bench/results/shim.json
else
bench-shim:
	@echo "bench-shim: needs the CUDA headers ($(CUDA_HOME)/include)"; exit 1
endif
.PHONY: bench-shim

# A CUDA C program for the GPU test, as nvcc builds it by default (static cudart).
ifneq ($(HAVE_CUDA),)
$(O)/tests/shim/gpu_oversub: tests/shim/gpu_oversub.cu
	@mkdir -p $(@D)
	$(if $(Q),@echo "  NVCC    $@")
	$(Q)$(NVCC) -O2 -gencode arch=compute_$(CUDA_ARCH),code=sm_$(CUDA_ARCH) -o $@ $<
EXTRA_TEST_DEPS += $(O)/tests/shim/gpu_oversub
ifneq ($(HAVE_NCCL),)
# cuBLAS and NCCL, each with its own static cudart inside, under the shim.
$(O)/tests/shim/gpu_cublas_nccl: tests/shim/gpu_cublas_nccl.cu
	@mkdir -p $(@D)
	$(if $(Q),@echo "  NVCC    $@")
	$(Q)$(NVCC) -O2 -gencode arch=compute_$(CUDA_ARCH),code=sm_$(CUDA_ARCH) -o $@ $< \
		-L$(CUDA_HOME)/lib64 -Xlinker -rpath=$(CUDA_HOME)/lib64 -lcublas -lnccl
EXTRA_TEST_DEPS += $(O)/tests/shim/gpu_cublas_nccl
endif
endif
