# train/module.mk — the trainer's bench.
#   make bench-train   spill train under a quarter of the training state against
#                      the whole device (cuda; the host backend without a GPU),
#                      with the model backend's prediction -> bench/results/train.json
bench-train: all
	@O=$(O) bash bench/train.sh

.PHONY: bench-train

# train/nodes.c: MPI's headers (several processes, mpirun)
$(O)/obj/train/nodes.c.o: CPPFLAGS += $(MPI_CFLAGS)
