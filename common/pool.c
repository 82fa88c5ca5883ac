/* common/pool.c — a range allocator for the device pools and the pinned host pool.
 *
 * A pool is one big region carved at open; this file manages offsets only (it
 * never touches the memory, so it works for the model backend's opaque
 * pointers). Blocks tile [0, size) in address order as a doubly linked list of
 * nodes from an arena sized at init (no allocation after init); adjacent free
 * blocks are always coalesced. Best fit, from either end: long-lived objects
 * (weights, gradients, optimizer state) fill the pool from the top and
 * activations from the bottom, so a step's short-lived holes do not split the
 * long-lived ones. Fragmentation left over is handled by the
 * caller through sp_pool_window(): the cheapest window of free and evictable
 * blocks large enough for a request. Space fenced out (the part of the host
 * pool that could not be pinned) is a block of its own that is never handed
 * out.
 */
#include "common/pool.h"

#include <errno.h>

#include <stdlib.h>
#include <string.h>

static int32_t node_get(struct sp_pool *p)
{
	int32_t n = p->free_node;
	if (n >= 0)
		p->free_node = p->blocks[n].next;
	return n;
}

static void node_put(struct sp_pool *p, int32_t n)
{
	p->blocks[n].next = p->free_node;
	p->blocks[n].owner = SP_POOL_FREE;
	p->free_node = n;
}

int sp_pool_init(struct sp_pool *p, uint64_t size, uint64_t align, uint32_t max_blocks)
{
	SP_CHECK_ARG(align && !(align & (align - 1)), "pool alignment %llu is not a power of two",
	             (unsigned long long)align);
	SP_CHECK_ARG(max_blocks >= 1, "pool needs at least one block");
	memset(p, 0, sizeof(*p));
	p->blocks = calloc(max_blocks, sizeof(*p->blocks));
	if (!p->blocks)
		return sp_error(-ENOMEM, "pool metadata: %u blocks", max_blocks);
	p->cap = max_blocks;
	p->size = size & ~(align - 1);
	p->align = align;
	p->free_node = -1;
	for (int32_t i = (int32_t)max_blocks - 1; i >= 1; i--)
		node_put(p, i);
	p->blocks[0] = (struct sp_pool_block){0, p->size, SP_POOL_FREE, -1, -1, 0};
	p->head = 0;
	return 0;
}

void sp_pool_fini(struct sp_pool *p)
{
	free(p->blocks);
	memset(p, 0, sizeof(*p));
	p->head = -1;
}

uint64_t sp_pool_round(const struct sp_pool *p, uint64_t bytes)
{
	return (bytes + p->align - 1) & ~(p->align - 1);
}

int sp_pool_alloc_end(struct sp_pool *p, uint64_t bytes, uint32_t owner, int high, int32_t *blk)
{
	uint64_t need = sp_pool_round(p, bytes ? bytes : 1);
	if (need > sp_pool_avail(p))
		return -ENOMEM;
	/* best fit: the smallest hole that holds it, so that the holes a program's
	 * few object sizes leave are reused by the same sizes instead of being cut
	 * up (first fit fragmented a training step's pool into holes nothing fit);
	 * ties go to the low end, or the high end for `high` allocations */
	int32_t best = -1;
	for (int32_t b = p->head; b >= 0; b = p->blocks[b].next) {
		const struct sp_pool_block *B = &p->blocks[b];
		if (B->owner != SP_POOL_FREE || B->size < need)
			continue;
		if (best < 0 || B->size < p->blocks[best].size ||
		    (high && B->size == p->blocks[best].size))
			best = b;
	}
	if (best < 0)
		return -ENOMEM;
	int32_t b = best;
	struct sp_pool_block *B = &p->blocks[b];
	if (B->size > need) { /* split: the rest stays free, below a high one */
		int32_t n = node_get(p);
		if (n < 0)
			return -ENOMEM;
		B = &p->blocks[b];
		struct sp_pool_block *N = &p->blocks[n];
		N->owner = SP_POOL_FREE;
		N->reuse_seq = B->reuse_seq; /* both parts may still be read */
		N->prev = b;
		N->next = B->next;
		if (B->next >= 0)
			p->blocks[B->next].prev = n;
		B->next = n;
		if (high) { /* b keeps the free head, n takes the tail */
			N->off = B->off + B->size - need;
			N->size = need;
			B->size -= need;
			b = n;
			B = N;
		} else {
			N->off = B->off + need;
			N->size = B->size - need;
			B->size = need;
		}
	}
	B->owner = owner;
	p->used += need;
	if (p->used > p->peak)
		p->peak = p->used;
	*blk = b;
	return 0;
}

int sp_pool_alloc(struct sp_pool *p, uint64_t bytes, uint32_t owner, int32_t *blk)
{
	return sp_pool_alloc_end(p, bytes, owner, 0, blk);
}

/* Merges block b with its next neighbour (both free). */
static void merge_next(struct sp_pool *p, int32_t b)
{
	struct sp_pool_block *B = &p->blocks[b];
	int32_t n = B->next;
	struct sp_pool_block *N = &p->blocks[n];
	B->size += N->size;
	if (N->reuse_seq > B->reuse_seq)
		B->reuse_seq = N->reuse_seq;
	B->next = N->next;
	if (N->next >= 0)
		p->blocks[N->next].prev = b;
	node_put(p, n);
}

void sp_pool_free(struct sp_pool *p, int32_t b, uint64_t reuse_seq)
{
	struct sp_pool_block *B = &p->blocks[b];
	SP_ASSERT(B->owner != SP_POOL_FREE);
	B->owner = SP_POOL_FREE;
	if (reuse_seq > B->reuse_seq) /* the tag it was cut with may still be read */
		B->reuse_seq = reuse_seq;
	p->used -= B->size;
	if (B->next >= 0 && p->blocks[B->next].owner == SP_POOL_FREE)
		merge_next(p, b);
	if (B->prev >= 0 && p->blocks[B->prev].owner == SP_POOL_FREE)
		merge_next(p, B->prev);
}

int sp_pool_fence(struct sp_pool *p, uint64_t off, uint64_t bytes)
{
	int32_t b = p->head;
	while (b >= 0 && p->blocks[b].off + p->blocks[b].size <= off)
		b = p->blocks[b].next;
	if (!bytes || b < 0 || p->blocks[b].owner != SP_POOL_FREE || p->blocks[b].off > off ||
	    bytes > p->blocks[b].off + p->blocks[b].size - off)
		return -EINVAL;
	int32_t nodes[2];
	int need = (p->blocks[b].off < off) + (off + bytes < p->blocks[b].off + p->blocks[b].size);
	for (int i = 0; i < need; i++)
		if ((nodes[i] = node_get(p)) < 0) {
			while (i--)
				node_put(p, nodes[i]);
			return -ENOMEM;
		}
	int k = 0;
	struct sp_pool_block *B = &p->blocks[b];
	if (B->off < off) { /* the free head stays b, the fence is a new block after it */
		int32_t n = nodes[k++];
		struct sp_pool_block *N = &p->blocks[n];
		*N = (struct sp_pool_block){
		    off, B->off + B->size - off, SP_POOL_FREE, b, B->next, B->reuse_seq};
		if (B->next >= 0)
			p->blocks[B->next].prev = n;
		B->next = n;
		B->size = off - B->off;
		b = n;
		B = N;
	}
	if (B->size > bytes) { /* the free tail after the fence */
		int32_t n = nodes[k++];
		struct sp_pool_block *N = &p->blocks[n];
		*N = (struct sp_pool_block){off + bytes, B->size - bytes, SP_POOL_FREE,
		                            b,           B->next,         B->reuse_seq};
		if (B->next >= 0)
			p->blocks[B->next].prev = n;
		B->next = n;
		B->size = bytes;
	}
	B->owner = SP_POOL_FENCED;
	p->fenced += bytes;
	return 0;
}

uint64_t sp_pool_largest_free(const struct sp_pool *p)
{
	uint64_t best = 0;
	for (int32_t b = p->head; b >= 0; b = p->blocks[b].next)
		if (p->blocks[b].owner == SP_POOL_FREE && p->blocks[b].size > best)
			best = p->blocks[b].size;
	return best;
}

int sp_pool_window(const struct sp_pool *p, uint64_t bytes, double (*cost)(void *, uint32_t),
                   void *arg, uint32_t *owners, int max)
{
	uint64_t need = sp_pool_round(p, bytes ? bytes : 1);
	int32_t best_start = -1;
	double best_cost = 0;
	/* Two pointers over the address-ordered list: [s, e) is the window. */
	int32_t s = p->head, e = p->head;
	uint64_t wbytes = 0;
	double wcost = 0;
	int wn = 0;
	while (s >= 0) {
		/* grow the window to need bytes, stopping at a block that cannot go */
		while (wbytes < need && e >= 0) {
			const struct sp_pool_block *E = &p->blocks[e];
			double c = 0;
			if (E->owner == SP_POOL_FENCED)
				c = -1;
			else if (E->owner != SP_POOL_FREE)
				c = cost(arg, E->owner - 1);
			if (c < 0)
				break;
			wbytes += E->size;
			wcost += c;
			wn += E->owner != SP_POOL_FREE;
			e = E->next;
		}
		if (wbytes >= need && wn <= max && (best_start < 0 || wcost < best_cost)) {
			best_start = s;
			best_cost = wcost;
		}
		if (s == e) { /* the block at s cannot be part of any window: skip it */
			s = e = p->blocks[s].next;
			wbytes = 0, wcost = 0, wn = 0;
			continue;
		}
		const struct sp_pool_block *S = &p->blocks[s];
		wbytes -= S->size;
		if (S->owner != SP_POOL_FREE) {
			wcost -= cost(arg, S->owner - 1);
			wn--;
		}
		s = S->next;
	}
	if (best_start < 0)
		return -1;
	int n = 0;
	uint64_t got = 0;
	for (int32_t b = best_start; b >= 0 && got < need; b = p->blocks[b].next) {
		got += p->blocks[b].size;
		if (p->blocks[b].owner != SP_POOL_FREE && n < max)
			owners[n++] = p->blocks[b].owner - 1;
	}
	return n;
}
