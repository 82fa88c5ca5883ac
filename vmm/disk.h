/* vmm/disk.h — the disk tier: a store of fixed extents in files under a
 * directory, read and written asynchronously through io_uring (liburing) with
 * O_DIRECT and registered, aligned bounce buffers.
 *
 * This is the contract between the vmm core (the other vmm/ sources) and the disk tier
 * (vmm/tier_disk.c). The core owns objects and decides what goes to disk; the
 * disk tier only stores bytes. Sources and destinations of I/O are ordinary
 * (pinned) host memory of any alignment; the tier stages through its bounce
 * buffers, so callers never need O_DIRECT alignment.
 * Capacity: SPILL_DISK_MEM bytes (0 = free space of the filesystem). An extent
 * that does not fit is -ENOSPC; a write that fails (ENOSPC from the filesystem,
 * EIO, a file-size limit — EFBIG) completes with that error, and the caller keeps
 * its host copy, so nothing is lost.
 * Thread-safety: all functions may be called from any thread (internal lock).
 * Completion is observed by polling or waiting on a ticket; no callbacks.
 */
#ifndef SP_VMM_DISK_H
#define SP_VMM_DISK_H

#include "common/error.h"
#include "common/params.h"
#include "device/device.h"

#include <stddef.h>
#include <stdint.h>

struct vmm_disk;

struct vmm_disk_config {
	const char *path;     /* directories, comma-separated (one per drive); each must
	                         exist: the tier never creates one (a typo must not
	                         spill onto another filesystem) */
	uint64_t capacity;    /* bytes, 0 = free space */
	unsigned queue_depth; /* io_uring entries in flight */
	size_t block;         /* bytes per I/O request (multiple of 4096) */
	const char *fault;    /* fault injection spec, "" = none (see tier_disk.c) */
	/* A model-backend context (vmm_open sets it there): the tier is simulated
	 * (tier_disk_sim.c): extents are only counted against the capacity, each
	 * transfer is striped over the profile's drives with dev_disk_io_async and
	 * takes virtual time; no file is created and no byte moves. */
	struct dev_ctx *sim;
};

/* Fills cfg from SPILL_DISK_PATH, SPILL_DISK_MEM, SPILL_IO_QUEUE_DEPTH,
 * SPILL_IO_BLOCK (and the fault knob). */
void vmm_disk_config_from_params(const struct sp_params *p, struct vmm_disk_config *cfg);

/* Returns 0, -ENOTSUP when built without liburing, or -errno naming the path. */
int vmm_disk_open(const struct vmm_disk_config *cfg, struct vmm_disk **out) SP_MUST_CHECK;
/* Waits for in-flight I/O, removes the tier's files, frees everything. */
void vmm_disk_close(struct vmm_disk *d);

/* Extents are whole multiples of this many bytes. */
#define VMM_DISK_ALIGN 4096u

/* Reserves an extent of bytes (rounded up to VMM_DISK_ALIGN). Returns 0, or
 * -ENOSPC with the numbers in the message. */
int vmm_disk_alloc(struct vmm_disk *d, size_t bytes, uint64_t *extent) SP_MUST_CHECK;
/* Frees an extent (no I/O may be in flight on it). */
int vmm_disk_free(struct vmm_disk *d, uint64_t extent) SP_MUST_CHECK;

/* Starts writing bytes from src into the extent / reading them into dst. The
 * buffer must stay valid until the ticket completes. Returns 0 and a ticket. */
int vmm_disk_write_async(struct vmm_disk *d, uint64_t extent, const void *src, size_t bytes,
                         uint64_t *ticket) SP_MUST_CHECK;
int vmm_disk_read_async(struct vmm_disk *d, uint64_t extent, void *dst, size_t bytes,
                        uint64_t *ticket) SP_MUST_CHECK;

/* 0 when the ticket's I/O completed successfully, -EAGAIN while in flight, or
 * the I/O's error (-ENOSPC, -EIO, -EFBIG...). A completed ticket may be polled
 * again until vmm_disk_ticket_release(). */
int vmm_disk_poll(struct vmm_disk *d, uint64_t ticket);
/* Blocks until the ticket completes; returns as vmm_disk_poll without -EAGAIN. */
int vmm_disk_wait(struct vmm_disk *d, uint64_t ticket) SP_MUST_CHECK;
/* Forgets a completed ticket. */
void vmm_disk_ticket_release(struct vmm_disk *d, uint64_t ticket);

#define VMM_DISK_DRIVES_MAX 16
struct vmm_disk_stats_snapshot {
	uint64_t bytes_written, bytes_read, capacity, used;
	uint64_t writes, reads, errors;
	int ndrives; /* drives the bytes went to (1 for a real tier's directory) */
	uint64_t drive_written[VMM_DISK_DRIVES_MAX], drive_read[VMM_DISK_DRIVES_MAX];
};
void vmm_disk_stats(const struct vmm_disk *d, struct vmm_disk_stats_snapshot *out);

#endif
