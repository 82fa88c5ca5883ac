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

# `make bench-hostpool`: bench/hostpool.c, the host pool's open before and after
# it grows as needed (one dev_host_alloc, vmm_open pinning it whole, vmm_open
# growing): time and RSS after open and after the first host copy, side by
# side; writes bench/results/hostpool.json. BENCH_HOSTPOOL_ARGS adds flags
# (--host-mem 16G --grow 256M --backend host|cuda|model).
BENCH_HOSTPOOL_ARGS ?=

$(O)/bench/hostpool: $(O)/obj/bench/hostpool.c.o $(call mod_libs,vmm)
	@mkdir -p $(@D)
	$(if $(Q),@echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $< $(call mod_libs,vmm) $(LDLIBS)

bench-hostpool: $(O)/bench/hostpool
	@mkdir -p bench/results
	@$(O)/bench/hostpool --json bench/results/hostpool.json $(BENCH_HOSTPOOL_ARGS)

EXTRA_ALL += $(O)/bench/hostpool
.PHONY: bench-hostpool
