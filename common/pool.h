/* common/pool.h — a range allocator over one region (offsets only, never the
 * memory): the vmm's device and host pools, and the taskgraph's replay of
 * them (tg_sim_swap), so that the prediction places and fragments as the vmm
 * does. */
#pragma once

#include <stdint.h>

#include "common/error.h"

#define SP_POOL_FREE   0u         /* owner of a free block */
#define SP_POOL_FENCED UINT32_MAX /* owner of space taken out of the pool for good */

struct sp_pool_block {
	uint64_t off, size;
	uint32_t owner; /* object index + 1, SP_POOL_FREE or SP_POOL_FENCED */
	int32_t prev, next;
	/* stream-ordered reuse (swap.c): the newest reuse sequence number of any
	 * space freed into this block while still read (0: none); an allocation
	 * keeps the number of the free block it was cut from */
	uint64_t reuse_seq;
};

struct sp_pool {
	uint64_t size, align, used;
	uint64_t fenced; /* bytes in fenced blocks (sp_pool_fence): never handed out */
	uint64_t peak;   /* the most `used` reached since vmm_place_peak last read it */
	struct sp_pool_block *blocks; /* node arena */
	uint32_t cap;
	int32_t head;      /* first block in address order */
	int32_t free_node; /* free list of nodes (through next) */
};

int sp_pool_init(struct sp_pool *p, uint64_t size, uint64_t align,
                 uint32_t max_blocks) SP_MUST_CHECK;
void sp_pool_fini(struct sp_pool *p);
/* Allocates bytes (rounded to align) for owner; returns 0 and the block id, or
 * -ENOMEM (no message: callers say which object and place). */
int sp_pool_alloc(struct sp_pool *p, uint64_t bytes, uint32_t owner, int32_t *blk) SP_MUST_CHECK;
/* The same from the high end of the holes when high (best fit either way). */
int sp_pool_alloc_end(struct sp_pool *p, uint64_t bytes, uint32_t owner, int high,
                      int32_t *blk) SP_MUST_CHECK;
/* Frees blk; reuse_seq tags its space (0: nobody reads it any more). A block
 * keeps the newest of that, the tag it was allocated with (whoever read the
 * space before may still read it) and those of blocks it merges with. */
void sp_pool_free(struct sp_pool *p, int32_t blk, uint64_t reuse_seq);
uint64_t sp_pool_round(const struct sp_pool *p, uint64_t bytes);
uint64_t sp_pool_largest_free(const struct sp_pool *p);
/* Bytes the pool may still hand out: size - used - fenced. */
static inline uint64_t sp_pool_avail(const struct sp_pool *p)
{
	return p->size - p->used - p->fenced;
}
/* Takes [off, off + bytes) out of the pool for good (an owner of its own,
 * SP_POOL_FENCED: never allocated, never merged, a barrier to windows): the
 * part of the host pool that could not be pinned. The range must lie in one
 * free block. Returns 0, -EINVAL (not free), or -ENOMEM (no block nodes left:
 * each fence takes up to two). */
int sp_pool_fence(struct sp_pool *p, uint64_t off, uint64_t bytes) SP_MUST_CHECK;
/* Finds the address window of at least bytes made only of free blocks and
 * blocks whose owner cost(arg, owner) >= 0, minimizing the summed cost. Writes
 * the owners in that window to owners (at most max) and returns their count, or
 * -1 if no window exists. */
int sp_pool_window(const struct sp_pool *p, uint64_t bytes, double (*cost)(void *, uint32_t),
                   void *arg, uint32_t *owners, int max);
