# vmm/module-disk.mk — the disk tier's bench: `make bench-disk`.
#
# Runs bench/disk.c: the disk tier's sequential write and read throughput
# against fio (io_uring, --direct=1) on the same directory, block size, queue
# depth and bytes, side by side; ends with `disk_vs_fio read=R write=W` and
# writes bench/results/disk.json. SPILL_DISK_PATH (default build/bench-disk),
# SPILL_IO_QUEUE_DEPTH and SPILL_IO_BLOCK apply; BENCH_DISK_ARGS adds flags
# (--bytes 2G --extent 64M --reps 5 --read-passes 1 --no-fio).
BENCH_DISK_ARGS ?=

$(O)/bench/disk: $(O)/obj/bench/disk.c.o $(call mod_libs,vmm)
	@mkdir -p $(@D)
	$(if $(Q),@echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $< $(call mod_libs,vmm) $(LDLIBS)

ifeq ($(HAVE_URING),1)
bench-disk: $(O)/bench/disk
	@mkdir -p bench/results
	@$(if $(HAVE_FIO),,echo "bench-disk: fio missing: no baseline (apt-get install fio)";) \
	$(O)/bench/disk $(if $(HAVE_FIO),,--no-fio) --json bench/results/disk.json $(BENCH_DISK_ARGS)
else
bench-disk:
	@echo "bench-disk: disabled: liburing missing (apt-get install liburing-dev)"; exit 1
endif

EXTRA_ALL += $(if $(HAVE_URING),$(O)/bench/disk)
.PHONY: bench-disk
