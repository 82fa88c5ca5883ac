/* tests/vmm/test_pool.c — the range allocator: best fit from either end,
 * coalescing, no overlap under random alloc/free (each allocation checked to
 * take the smallest hole that holds it), and the fragmentation window (the cheapest
 * run of free and evictable blocks that opens a hole large enough), and fences
 * (space taken out for good: never handed out, never merged, a barrier to
 * windows). */
#include "tests/test.h"
#include "vmm/internal.h"

#include <stdint.h>
#include <string.h>

static double cost_all(void *arg, uint32_t owner)
{
	const int *pinned = arg;
	return pinned[owner] ? -1 : 1.0;
}

static void check_tiling(const struct sp_pool *p)
{
	uint64_t off = 0, used = 0, fenced = 0;
	int prev_free = 0;
	for (int32_t b = p->head; b >= 0; b = p->blocks[b].next) {
		const struct sp_pool_block *B = &p->blocks[b];
		CHECK_MSG(B->off == off, "block at %llu, expected %llu", (unsigned long long)B->off,
		          (unsigned long long)off);
		CHECK(B->size > 0);
		int is_free = B->owner == SP_POOL_FREE;
		CHECK_MSG(!(is_free && prev_free), "two adjacent free blocks at %llu",
		          (unsigned long long)off);
		prev_free = is_free;
		if (B->owner == SP_POOL_FENCED)
			fenced += B->size;
		else if (!is_free)
			used += B->size;
		off += B->size;
	}
	CHECK(off == p->size);
	CHECK(used == p->used);
	CHECK(fenced == p->fenced);
}

/* Space fenced out (the host pool cut to what could be pinned): never handed
 * out, never merged with a free neighbour, a barrier to windows; only free
 * space can be fenced. */
static void test_fence(void)
{
	struct sp_pool p;
	int32_t a, b, c;
	int pinned[8] = {0};
	uint32_t owners[8];
	CHECK_OK(sp_pool_init(&p, 8192, 256, 64));
	CHECK_OK(sp_pool_alloc(&p, 1024, 1, &a));        /* [0, 1K) */
	CHECK_OK(sp_pool_alloc_end(&p, 1024, 2, 1, &b)); /* [7K, 8K) */
	CHECK(sp_pool_fence(&p, 512, 1024) == -EINVAL);  /* not free */
	CHECK(sp_pool_fence(&p, 2048, 6144) == -EINVAL); /* beyond the free block */
	CHECK_OK(sp_pool_fence(&p, 3072, 2048));         /* [3K, 5K) in the middle */
	check_tiling(&p);
	CHECK(p.fenced == 2048 && sp_pool_avail(&p) == 4096);
	CHECK(sp_pool_largest_free(&p) == 2048);
	CHECK(sp_pool_alloc(&p, 3072, 3, &c) == -ENOMEM); /* 4K free, in two holes */
	/* 4K only across the fence: no window; 3K beside it, evicting one */
	CHECK(sp_pool_window(&p, 4096, cost_all, pinned, owners, 8) == -1);
	CHECK(sp_pool_window(&p, 3072, cost_all, pinned, owners, 8) == 1);
	CHECK_OK(sp_pool_alloc(&p, 2048, 3, &c));
	CHECK(p.blocks[c].off < 3072 || p.blocks[c].off >= 5120);
	sp_pool_free(&p, a, 0);
	sp_pool_free(&p, c, 0);
	sp_pool_free(&p, b, 0);
	check_tiling(&p); /* free on both sides of the fence, not merged into it */
	CHECK(p.used == 0 && p.fenced == 2048 && sp_pool_largest_free(&p) == 3072);
	CHECK(sp_pool_alloc(&p, 4096, 4, &a) == -ENOMEM);
	CHECK_OK(sp_pool_fence(&p, 0, 3072)); /* a whole free block */
	CHECK_OK(sp_pool_fence(&p, 5120, 3072));
	check_tiling(&p);
	CHECK(sp_pool_avail(&p) == 0 && sp_pool_alloc(&p, 1, 5, &a) == -ENOMEM);
	sp_pool_fini(&p);
}

int main(void)
{
	struct sp_pool p;
	int32_t a, b, c, d;
	CHECK_OK(sp_pool_init(&p, 4096, 256, 64));
	CHECK(sp_pool_alloc(&p, 0, 1, &a) == 0); /* zero rounds up to one unit */
	CHECK(p.used == 256);
	sp_pool_free(&p, a, 0);
	CHECK_OK(sp_pool_alloc(&p, 1000, 1, &a)); /* 1024 */
	CHECK_OK(sp_pool_alloc(&p, 1024, 2, &b));
	CHECK_OK(sp_pool_alloc(&p, 1024, 3, &c));
	CHECK_OK(sp_pool_alloc(&p, 1024, 4, &d));
	CHECK(p.used == 4096);
	CHECK(sp_pool_alloc(&p, 1, 5, &a) == -ENOMEM);
	check_tiling(&p);
	/* free 1 and 3: 2 KiB free, largest hole 1 KiB */
	sp_pool_free(&p, p.head, 0);
	sp_pool_free(&p, c, 0);
	check_tiling(&p);
	CHECK(p.size - p.used == 2048);
	CHECK(sp_pool_largest_free(&p) == 1024);
	int32_t e;
	CHECK(sp_pool_alloc(&p, 2048, 6, &e) == -ENOMEM);
	/* window of 2 KiB: [free 1K][obj2] or [obj2][free 1K] or [free][obj4]: cost 1 */
	int pinned[8] = {0};
	uint32_t owners[8];
	int n = sp_pool_window(&p, 2048, cost_all, pinned, owners, 8);
	CHECK_MSG(n == 1, "window has %d owners", n);
	CHECK(owners[0] == 1 || owners[0] == 3); /* owner ids are index + 1 - 1 */
	/* pin objects 2 and 4 (owner indices 1 and 3): no window */
	pinned[1] = pinned[3] = 1;
	CHECK(sp_pool_window(&p, 2048, cost_all, pinned, owners, 8) == -1);
	pinned[1] = 0;
	n = sp_pool_window(&p, 2048, cost_all, pinned, owners, 8);
	CHECK(n == 1 && owners[0] == 1);
	sp_pool_free(&p, b, 0); /* coalesces three blocks */
	check_tiling(&p);
	CHECK(sp_pool_largest_free(&p) == 3072);
	sp_pool_fini(&p);

	/* best fit: holes of 2K, 1K and 3K; a 1K request takes the 1K hole, not the
	 * first; a high one takes the top of its hole */
	CHECK_OK(sp_pool_init(&p, 8192, 256, 64));
	int32_t x[6];
	for (int i = 0; i < 4; i++)
		CHECK_OK(sp_pool_alloc(&p,
		                       i == 0   ? 2048
		                       : i == 2 ? 1024
		                                : 512,
		                       (uint32_t)i + 1, &x[i]));
	/* [0:2K a][2K:2.5K b][2.5K:3.5K c][3.5K:4K d][4K:8K free] */
	sp_pool_free(&p, x[0], 0);
	sp_pool_free(&p, x[2], 0);
	CHECK_OK(sp_pool_alloc(&p, 1000, 7, &x[4]));
	CHECK_MSG(p.blocks[x[4]].off == 2560, "1K went to %llu, not the 1K hole",
	          (unsigned long long)p.blocks[x[4]].off);
	CHECK_OK(sp_pool_alloc_end(&p, 1024, 8, 1, &x[5]));
	CHECK_MSG(p.blocks[x[5]].off == 1024, "high 1K went to %llu, not the top of the 2K hole",
	          (unsigned long long)p.blocks[x[5]].off);
	check_tiling(&p);
	int32_t top;
	CHECK_OK(sp_pool_alloc_end(&p, 4096, 9, 1, &top)); /* exactly the 4K hole */
	CHECK(p.blocks[top].off == 4096);
	check_tiling(&p);
	sp_pool_fini(&p);

	/* random alloc/free against a shadow map */
	CHECK_OK(sp_pool_init(&p, 1 << 20, 256, 1024));
	int32_t blk[300];
	uint64_t sz[300];
	memset(blk, -1, sizeof(blk));
	uint64_t seed = 42, shadow_used = 0;
	for (int it = 0; it < 20000; it++) {
		seed = seed * 6364136223846793005ull + 1442695040888963407ull;
		int i = (int)((seed >> 33) % 300);
		if (blk[i] >= 0) {
			sp_pool_free(&p, blk[i], 0);
			shadow_used -= sz[i];
			blk[i] = -1;
		} else {
			uint64_t want = 1 + (seed >> 40) % 16384;
			int high = (int)((seed >> 20) & 1);
			uint64_t need = sp_pool_round(&p, want), fit = UINT64_MAX;
			for (int32_t h = p.head; h >= 0; h = p.blocks[h].next)
				if (p.blocks[h].owner == SP_POOL_FREE && p.blocks[h].size >= need &&
				    p.blocks[h].size < fit)
					fit = p.blocks[h].size;
			int rc = sp_pool_alloc_end(&p, want, (uint32_t)i + 1, high, &blk[i]);
			if (rc == 0) {
				/* the block came from a hole of the best-fit size: its free
				 * neighbour on the split side plus itself */
				int32_t nb = high ? p.blocks[blk[i]].prev : p.blocks[blk[i]].next;
				uint64_t hole = need;
				if (nb >= 0 && p.blocks[nb].owner == SP_POOL_FREE)
					hole += p.blocks[nb].size;
				CHECK_MSG(hole == fit, "took a %llu hole, best fit was %llu",
				          (unsigned long long)hole, (unsigned long long)fit);
				sz[i] = p.blocks[blk[i]].size;
				CHECK(sz[i] == sp_pool_round(&p, want));
				CHECK(p.blocks[blk[i]].off % 256 == 0);
				shadow_used += sz[i];
			} else {
				CHECK(rc == -ENOMEM);
				CHECK(sp_pool_largest_free(&p) < sp_pool_round(&p, want));
				blk[i] = -1;
			}
		}
		CHECK(p.used == shadow_used);
		if (it % 97 == 0)
			check_tiling(&p);
	}
	check_tiling(&p);
	sp_pool_fini(&p);
	test_fence();
	TEST_PASS();
}
