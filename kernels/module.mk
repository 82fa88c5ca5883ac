# kernels/module.mk — the kernels' CUDA flags and bench targets.
#
# The CUDA objects are linked by gcc (no libstdc++): build them without C++
# exceptions and thread-safe statics so they need no C++ runtime.
$(O)/obj/kernels/%.cu.o: NVCCFLAGS += -Xcompiler -fno-exceptions,-fno-threadsafe-statics
# the bf16 GEMMs go through cuBLASLt
LDLIBS += $(if $(HAVE_CUDA),-lcublasLt)

# The optimizer loops promise the same bits on every path (scalar, AVX2, AVX-512):
# no compiler may fuse a multiply and an add into an FMA there, whatever its default.
$(O)/obj/kernels/optim.c.o $(O)/obj/kernels/optim_simd.c.o: CFLAGS += -ffp-contract=off
# The same promise for GELU's scalar and AVX2 loops (gelu_impl.h).
$(O)/obj/kernels/elementwise.c.o $(O)/obj/kernels/elementwise_simd.c.o: CFLAGS += -ffp-contract=off
# The fp32 CPU layer loops (residuals, bias sums, layernorm's elementwise passes, ...):
# -O2's "very cheap" vectorizer leaves every loop whose arrays might overlap scalar;
# the dynamic cost model vectorizes them behind a run-time overlap check. It never
# reorders a reduction (no -ffast-math) nor fuses into FMA, so the bits are those of
# the scalar loops (test_determinism, and the same parameters after 3 bench steps).
KN_CPU_F32_OBJS := $(patsubst %,$(O)/obj/kernels/%.c.o,elementwise layernorm matmul attention \
	crossentropy encoder)
$(KN_CPU_F32_OBJS): CFLAGS += -fvect-cost-model=dynamic -ffp-contract=off

# ---- benches -------------------------------------------------------------------
# make bench-gemm: CPU GEMM through kn_ vs cblas_sgemm direct -> bench/results/gemm.json
# make bench-block-gpu: one block forward+backward, CUDA kernels vs PyTorch eager on
#   the same GPU -> bench/results/block_gpu.json (exits 77 without a CUDA device)
# make bench-optim: CPU AdamW vs a STREAM-like triad in the same run (R) and vs
#   DeepSpeed's CPU Adam (S) -> bench/results/optim.json. DeepSpeed goes in a venv
#   (build/ds-venv, over Debian's python3-torch); S is skipped, saying why, without it.
# make bench-cpu-step: one fp32 training step (forward, backward, AdamW) on the CPU
#   kernels vs PyTorch, both at 1 thread, side by side -> bench/results/cpu_step.json;
#   the last line is cpu_step_vs_torch=R (spill time / torch time, target <= 1.0).
KN_BENCH_LIBS := $(call mod_libs,kernels)

$(O)/bench/gemm: $(O)/obj/bench/gemm.c.o $(KN_BENCH_LIBS)
	@mkdir -p $(@D)
	$(if $(Q),@echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $< $(KN_BENCH_LIBS) $(LDLIBS)

$(O)/bench/block_gpu: $(O)/obj/bench/block_gpu.c.o $(KN_BENCH_LIBS)
	@mkdir -p $(@D)
	$(if $(Q),@echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $< $(KN_BENCH_LIBS) $(LDLIBS)

bench-gemm: $(O)/bench/gemm
	@mkdir -p bench/results
	$(O)/bench/gemm bench/results/gemm.json

bench-block-gpu: $(O)/bench/block_gpu
	@mkdir -p bench/results
	$(O)/bench/block_gpu bench/results/block_gpu.json

$(O)/bench/optim: $(O)/obj/bench/optim.c.o $(KN_BENCH_LIBS)
	@mkdir -p $(@D)
	$(if $(Q),@echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $< $(KN_BENCH_LIBS) $(LDLIBS)

OPTIM_DS_VENV ?= build/ds-venv
OPTIM_DS_PYTHON ?= /usr/bin/python3
bench-optim: $(O)/bench/optim
	@mkdir -p bench/results
	@$(OPTIM_DS_PYTHON) bench/optim_deepspeed.py --setup $(OPTIM_DS_VENV) || true
	$(O)/bench/optim bench/results/optim.json \
		"$$(test -x $(OPTIM_DS_VENV)/bin/python && echo $(OPTIM_DS_VENV)/bin/python || echo python3)"

$(O)/bench/cpu_step: $(O)/obj/bench/cpu_step.c.o $(KN_BENCH_LIBS)
	@mkdir -p $(@D)
	$(if $(Q),@echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $< $(KN_BENCH_LIBS) $(LDLIBS)

CPU_STEP_PYTHON ?= /usr/bin/python3
bench-cpu-step: $(O)/bench/cpu_step
	@mkdir -p bench/results
	$(O)/bench/cpu_step bench/results/cpu_step.json $(CPU_STEP_PYTHON)

.PHONY: bench-gemm bench-block-gpu bench-optim bench-cpu-step
