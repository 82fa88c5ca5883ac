# taskgraph/module.mk — make bench-plans: predicted swap volume and time of each
# schedule vs dp-swap for 4x GTX 1080 Ti -> bench/results/plans.json
TG_BENCH_LIBS := $(call mod_libs,taskgraph)

$(O)/bench/plans: $(O)/obj/bench/plans.c.o $(TG_BENCH_LIBS)
	@mkdir -p $(@D)
	$(if $(Q),@echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $< $(TG_BENCH_LIBS) $(LDLIBS)

bench-plans: $(O)/bench/plans
	@mkdir -p bench/results
	$(O)/bench/plans bench/results/plans.json

.PHONY: bench-plans
