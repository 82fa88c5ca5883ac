# vmm/module-stress.mk — `make stress`: the randomized vmm tests with many more
# operations and seeds than `make test` runs (combine with ASAN=1 UBSAN=1 or
# TSAN=1). STRESS_SEEDS (default 40) seeds of the exact oracle, and as many
# 2-thread test_stress runs; STRESS_OPS scales the operations per seed.
STRESS_SEEDS ?= 40
STRESS_OPS ?= 2000

stress: tests
	@set -eo pipefail; \
	echo "stress: test_oracle, $(STRESS_SEEDS) seeds x $(STRESS_OPS) ops, threads $$(( $(STRESS_OPS) * 5 )) ops"; \
	$(O)/tests/vmm/test_oracle $(STRESS_OPS) 1 $(STRESS_SEEDS) $$(( $(STRESS_OPS) * 5 )) | tail -n 3; \
	for s in $$(seq 1 $(STRESS_SEEDS)); do \
		$(O)/tests/vmm/test_stress $$(( $(STRESS_OPS) * 4 )) $$s >/dev/null || \
			{ echo "stress: test_stress seed $$s failed"; exit 1; }; \
	done; \
	echo "stress: test_stress, $(STRESS_SEEDS) seeds ok"

.PHONY: stress
