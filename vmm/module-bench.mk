# vmm/module-bench.mk — the vmm's bench: `make bench-vmm`.
#
# Runs bench/vmm.c: the resident acquire + release pair on the host backend
# (ns/op, target < 1 us) and, with a CUDA device, H2D and D2H through the vmm
# next to cudaMemcpyAsync of the same bytes between the same buffers (and,
# with two peer GPUs, P2P next to cudaMemcpyPeerAsync), ending with
# `vmm_vs_memcpy h2d=R d2h=R [p2p=R]`; writes bench/results/vmm.json. Without
# a GPU the GPU part is reported as skipped. BENCH_VMM_ARGS adds flags
# (--bytes 256M --reps 5 --iters 1000000).
BENCH_VMM_ARGS ?=

$(O)/bench/vmm: $(O)/obj/bench/vmm.c.o $(call mod_libs,vmm)
	@mkdir -p $(@D)
	$(if $(Q),@echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $< $(call mod_libs,vmm) $(LDLIBS)

bench-vmm: $(O)/bench/vmm
	@mkdir -p bench/results
	@$(O)/bench/vmm --json bench/results/vmm.json $(BENCH_VMM_ARGS)

EXTRA_ALL += $(O)/bench/vmm
.PHONY: bench-vmm
