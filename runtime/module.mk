# runtime/module.mk — the executor's benches, and make fuzz-predicted (below).
#   make bench-schedules  the executor on the model backend, 4x GTX 1080 Ti: each
#                         schedule, auto and the published Harmony runtime vs the
#                         dp-swap baseline -> bench/results/schedules.json
#   make bench-executor   host backend: the executor vs the reference loop, ample
#                         memory and a quarter of the state -> bench/results/executor.json
RT_BENCH_LIBS := $(call mod_libs,runtime)

$(O)/bench/schedules: $(O)/obj/bench/schedules.c.o $(RT_BENCH_LIBS)
	@mkdir -p $(@D)
	$(if $(Q),@echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $< $(RT_BENCH_LIBS) $(LDLIBS)

bench-schedules: $(O)/bench/schedules
	@mkdir -p bench/results
	$(O)/bench/schedules bench/results/schedules.json $(BENCH_SCHEDULES_FILTER)

EXTRA_ALL += $(O)/bench/schedules
.PHONY: bench-schedules

$(O)/bench/executor: $(O)/obj/bench/executor.c.o $(RT_BENCH_LIBS)
	@mkdir -p $(@D)
	$(if $(Q),@echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $< $(RT_BENCH_LIBS) $(LDLIBS)

bench-executor: $(O)/bench/executor
	@mkdir -p bench/results
	$(O)/bench/executor bench/results/executor.json

EXTRA_ALL += $(O)/bench/executor
.PHONY: bench-executor

# make bench-hydra: many models at once (SHARP) on the model backend, 8x GTX 1080 Ti:
# Hydra's end-to-end setting and ablation, lrtf vs random and vs GLPK's MILP
# -> bench/results/hydra.json
$(O)/bench/hydra: $(O)/obj/bench/hydra.c.o $(RT_BENCH_LIBS)
	@mkdir -p $(@D)
	$(if $(Q),@echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $< $(RT_BENCH_LIBS) $(LDLIBS)

bench-hydra: $(O)/bench/hydra
	@mkdir -p bench/results
	$(O)/bench/hydra bench/results/hydra.json

EXTRA_ALL += $(O)/bench/hydra
.PHONY: bench-hydra

# make fuzz-predicted: tests/runtime/fuzz_predicted_disk, random plans, budgets and
# host pools above the simulated disk tier, the executor's bytes against
# tg_sim_swap's (FUZZ_COUNT cases of FUZZ_SEED; a disagreement is shrunk and
# printed as a spec that `fuzz_predicted_disk -c SPEC` replays); then as many
# with objects of several sizes and a host pool that holds everything
# (FUZZ_SIZES=1 FUZZ_HOSTALL=1: the device pools fragment); then as many with a
# small host pool too (the host pool fragments as well; known to disagree in
# about 1 case in 20, docs/taskgraph.md: reported, not failed).
FUZZ_COUNT ?= 2000
FUZZ_SEED ?= 1
$(O)/tests/runtime/fuzz_predicted_disk: $(O)/obj/tests/runtime/fuzz_predicted_disk.c.o $(RT_BENCH_LIBS)
	@mkdir -p $(@D)
	$(if $(Q),@echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $< $(RT_BENCH_LIBS) $(LDLIBS)

fuzz-predicted: $(O)/tests/runtime/fuzz_predicted_disk
	$(O)/tests/runtime/fuzz_predicted_disk $(FUZZ_COUNT) $(FUZZ_SEED)
	FUZZ_SIZES=1 FUZZ_HOSTALL=1 $(O)/tests/runtime/fuzz_predicted_disk $(FUZZ_COUNT) $(FUZZ_SEED)
	-FUZZ_SIZES=1 $(O)/tests/runtime/fuzz_predicted_disk $(FUZZ_COUNT) $(FUZZ_SEED) | tail -1

EXTRA_TEST_DEPS += $(O)/tests/runtime/fuzz_predicted_disk
.PHONY: fuzz-predicted
