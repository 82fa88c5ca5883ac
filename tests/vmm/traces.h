/* tests/vmm/traces.h — the fixed access traces that test_policy (the pure
 * policy) and test_belady (the real vmm) run, and the brute-force optimum they
 * are compared with: the fewest misses of a cache of k equal-size objects over
 * every possible eviction choice (memoized over position x cache set).
 * Header-only; a test includes it once. */
#ifndef SP_TESTS_VMM_TRACES_H
#define SP_TESTS_VMM_TRACES_H

#include "common/error.h"
#include "vmm/vmm.h"

#include <stdint.h>
#include <string.h>

#define VT_MAXN   10 /* objects in a trace */
#define VT_MAXLEN 48

struct vt_trace {
	const char *name;
	const int *t;
	int len, k; /* accesses, cache size in objects */
};

/* Loops larger than the cache (LRU's worst case), a forward + backward pass (the
 * training shape) and pseudo-random traces. Returns their count (at most 16). */
static inline int vt_traces(struct vt_trace *out)
{
	static const int loop[] = {0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 0, 1, 2, 3, 4};
	static const int fwdbwd[] = {0, 1, 2, 3, 4, 5, 5, 4, 3, 2, 1, 0,
	                             0, 1, 2, 3, 4, 5, 5, 4, 3, 2, 1, 0};
	static const int mixed[] = {0, 1, 2, 0, 3, 0, 4, 2, 3, 0, 3, 2,
	                            1, 2, 0, 1, 7, 0, 1, 5, 6, 5, 7};
	static int rnd[6][40];
	int n = 0;
	out[n++] = (struct vt_trace){"loop5/k3", loop, (int)SP_ARRAY_SIZE(loop), 3};
	out[n++] = (struct vt_trace){"fwdbwd6/k3", fwdbwd, (int)SP_ARRAY_SIZE(fwdbwd), 3};
	out[n++] = (struct vt_trace){"fwdbwd6/k4", fwdbwd, (int)SP_ARRAY_SIZE(fwdbwd), 4};
	out[n++] = (struct vt_trace){"mixed8/k3", mixed, (int)SP_ARRAY_SIZE(mixed), 3};
	out[n++] = (struct vt_trace){"mixed8/k4", mixed, (int)SP_ARRAY_SIZE(mixed), 4};
	uint64_t seed = 7;
	for (int r = 0; r < 6; r++) {
		for (int i = 0; i < 40; i++) {
			seed = seed * 6364136223846793005ull + 1442695040888963407ull;
			rnd[r][i] = (int)((seed >> 33) % (uint64_t)(6 + r % 3));
		}
		out[n++] = (struct vt_trace){"random", rnd[r], 40, 2 + r % 3};
	}
	return n;
}

static int vt_memo[VT_MAXLEN + 1][1 << VT_MAXN];

/* Fewest misses from position i with cache set S (brute force, memoized). */
static inline int vt_opt(const int *t, int len, int k, int i, unsigned S)
{
	if (i == len)
		return 0;
	int *m = &vt_memo[i][S];
	if (*m >= 0)
		return *m;
	unsigned x = 1u << t[i];
	int best;
	if (S & x) {
		best = vt_opt(t, len, k, i + 1, S);
	} else if (__builtin_popcount(S) < k) {
		best = 1 + vt_opt(t, len, k, i + 1, S | x);
	} else {
		best = 1 << 30;
		for (int y = 0; y < VT_MAXN; y++)
			if (S & (1u << y)) {
				int r = 1 + vt_opt(t, len, k, i + 1, (S & ~(1u << y)) | x);
				if (r < best)
					best = r;
			}
	}
	return *m = best;
}

static inline int vt_optimal(const struct vt_trace *tr)
{
	memset(vt_memo, -1, sizeof(vt_memo));
	return vt_opt(tr->t, tr->len, tr->k, 0, 0);
}

/* The index of the access after i to the same object (the hint a runtime that
 * knows its schedule gives), VMM_NO_HINT if none. */
static inline uint64_t vt_next_use_after(const int *t, int len, int i)
{
	for (int j = i + 1; j < len; j++)
		if (t[j] == t[i])
			return (uint64_t)j;
	return VMM_NO_HINT;
}

/* Objects a trace touches: 1 + its largest index. */
static inline int vt_trace_objects(const struct vt_trace *tr)
{
	int n = 0;
	for (int i = 0; i < tr->len; i++)
		if (tr->t[i] + 1 > n)
			n = tr->t[i] + 1;
	return n;
}

#endif
