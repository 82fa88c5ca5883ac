/* vmm/disk_impl.h — the two implementations behind vmm/disk.h, for vmm/disk.c
 * alone: disk_uring_* (tier_disk.c: files, io_uring, real bytes) and
 * disk_sim_* (tier_disk_sim.c: the model backend's drives, in virtual time,
 * no files and no bytes). Each has the contract of the vmm_disk_* function of
 * the same suffix.
 */
#ifndef SP_VMM_DISK_IMPL_H
#define SP_VMM_DISK_IMPL_H

#include "vmm/disk.h"

struct disk_uring;
int disk_uring_open(const struct vmm_disk_config *cfg, struct disk_uring **out) SP_MUST_CHECK;
void disk_uring_close(struct disk_uring *d);
int disk_uring_alloc(struct disk_uring *d, size_t bytes, uint64_t *extent) SP_MUST_CHECK;
int disk_uring_free(struct disk_uring *d, uint64_t extent) SP_MUST_CHECK;
/* 1 while I/O is in flight on the extent, 0 when idle, -EINVAL when unknown. */
int disk_uring_busy(struct disk_uring *d, uint64_t extent);
int disk_uring_write_async(struct disk_uring *d, uint64_t extent, const void *src, size_t bytes,
                           uint64_t *ticket) SP_MUST_CHECK;
int disk_uring_read_async(struct disk_uring *d, uint64_t extent, void *dst, size_t bytes,
                          uint64_t *ticket) SP_MUST_CHECK;
int disk_uring_poll(struct disk_uring *d, uint64_t ticket);
int disk_uring_wait(struct disk_uring *d, uint64_t ticket) SP_MUST_CHECK;
void disk_uring_ticket_release(struct disk_uring *d, uint64_t ticket);
void disk_uring_stats(const struct disk_uring *d, struct vmm_disk_stats_snapshot *out);

struct disk_sim;
int disk_sim_open(const struct vmm_disk_config *cfg, struct disk_sim **out) SP_MUST_CHECK;
void disk_sim_close(struct disk_sim *d);
int disk_sim_alloc(struct disk_sim *d, size_t bytes, uint64_t *extent) SP_MUST_CHECK;
int disk_sim_free(struct disk_sim *d, uint64_t extent) SP_MUST_CHECK;
int disk_sim_io_async(struct disk_sim *d, uint64_t extent, size_t bytes, int write,
                      uint64_t *ticket) SP_MUST_CHECK;
int disk_sim_poll(struct disk_sim *d, uint64_t ticket);
int disk_sim_wait(struct disk_sim *d, uint64_t ticket) SP_MUST_CHECK;
void disk_sim_ticket_release(struct disk_sim *d, uint64_t ticket);
void disk_sim_stats(const struct disk_sim *d, struct vmm_disk_stats_snapshot *out);

#endif
