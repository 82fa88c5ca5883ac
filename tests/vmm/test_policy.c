/* tests/vmm/test_policy.c — victim choice on fixed access traces.
 *
 * A cache of k equal-size objects is simulated with vmm_policy_pick(): Belady
 * (hints = the index of each object's next access, as the runtime gives them)
 * and LRU. Belady's miss count must equal the optimum found by a brute-force
 * search over every eviction choice; LRU's count is printed beside it. The
 * same traces run through the real vmm in test_belady.c.
 */
#include "tests/test.h"
#include "vmm/internal.h"

#include <string.h>

#define MAXN   10
#define MAXLEN 48

static int memo[MAXLEN + 1][1 << MAXN];

/* Fewest misses from position i with cache set S (brute force, memoized). */
static int opt(const int *t, int len, int k, int i, unsigned S)
{
	if (i == len)
		return 0;
	int *m = &memo[i][S];
	if (*m >= 0)
		return *m;
	unsigned x = 1u << t[i];
	int best;
	if (S & x) {
		best = opt(t, len, k, i + 1, S);
	} else if (__builtin_popcount(S) < k) {
		best = 1 + opt(t, len, k, i + 1, S | x);
	} else {
		best = 1 << 30;
		for (int y = 0; y < MAXN; y++)
			if (S & (1u << y)) {
				int r = 1 + opt(t, len, k, i + 1, (S & ~(1u << y)) | x);
				if (r < best)
					best = r;
			}
	}
	return *m = best;
}

static int optimal(const int *t, int len, int k)
{
	memset(memo, -1, sizeof(memo));
	return opt(t, len, k, 0, 0);
}

static uint64_t next_use_after(const int *t, int len, int i)
{
	for (int j = i + 1; j < len; j++)
		if (t[j] == t[i])
			return (uint64_t)j;
	return VMM_NO_HINT;
}

static int simulate(const int *t, int len, int k, enum vmm_policy pol)
{
	int in[MAXN] = {0}, n = 0, misses = 0;
	uint64_t hint[MAXN], last[MAXN] = {0};
	for (int x = 0; x < MAXN; x++)
		hint[x] = VMM_NO_HINT;
	for (int i = 0; i < len; i++) {
		int x = t[i];
		if (!in[x]) {
			misses++;
			if (n == k) {
				struct vmm_cand c[MAXN];
				int m = 0;
				for (int y = 0; y < MAXN; y++)
					if (in[y])
						c[m++] = (struct vmm_cand){
						    (uint32_t)y,
						    pol == VMM_POLICY_LRU ? VMM_NO_HINT : hint[y],
						    last[y]};
				int v = (int)c[vmm_policy_pick(pol, c, m)].idx;
				in[v] = 0;
				n--;
			}
			in[x] = 1;
			n++;
		}
		last[x] = (uint64_t)i + 1;
		hint[x] = next_use_after(t, len, i);
	}
	return misses;
}

int main(void)
{
	/* fixed traces: loops larger than the cache (LRU's worst case), a forward +
	 * backward pass (the training shape), and pseudo-random ones */
	static const int loop[] = {0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 0, 1, 2, 3, 4};
	static const int fwdbwd[] = {0, 1, 2, 3, 4, 5, 5, 4, 3, 2, 1, 0,
	                             0, 1, 2, 3, 4, 5, 5, 4, 3, 2, 1, 0};
	static const int mixed[] = {0, 1, 2, 0, 3, 0, 4, 2, 3, 0, 3, 2,
	                            1, 2, 0, 1, 7, 0, 1, 5, 6, 5, 7};
	struct {
		const char *name;
		const int *t;
		int len, k;
	} traces[16] = {
	    {"loop5/k3", loop, (int)SP_ARRAY_SIZE(loop), 3},
	    {"fwdbwd6/k3", fwdbwd, (int)SP_ARRAY_SIZE(fwdbwd), 3},
	    {"fwdbwd6/k4", fwdbwd, (int)SP_ARRAY_SIZE(fwdbwd), 4},
	    {"mixed8/k3", mixed, (int)SP_ARRAY_SIZE(mixed), 3},
	    {"mixed8/k4", mixed, (int)SP_ARRAY_SIZE(mixed), 4},
	};
	int nt = 5;
	static int rnd[6][40];
	uint64_t seed = 7;
	for (int r = 0; r < 6; r++) {
		for (int i = 0; i < 40; i++) {
			seed = seed * 6364136223846793005ull + 1442695040888963407ull;
			rnd[r][i] = (int)((seed >> 33) % (uint64_t)(6 + r % 3));
		}
		traces[nt].name = "random";
		traces[nt].t = rnd[r];
		traces[nt].len = 40;
		traces[nt].k = 2 + r % 3;
		nt++;
	}
	printf("%-12s %4s %4s %8s %8s %8s\n", "trace", "len", "k", "optimal", "belady", "lru");
	int belady_sum = 0, lru_sum = 0;
	for (int i = 0; i < nt; i++) {
		int o = optimal(traces[i].t, traces[i].len, traces[i].k);
		int b = simulate(traces[i].t, traces[i].len, traces[i].k, VMM_POLICY_AUTO);
		int l = simulate(traces[i].t, traces[i].len, traces[i].k, VMM_POLICY_LRU);
		printf("%-12s %4d %4d %8d %8d %8d\n", traces[i].name, traces[i].len, traces[i].k, o,
		       b, l);
		CHECK_MSG(b == o, "%s: belady %d misses, optimal %d", traces[i].name, b, o);
		CHECK(l >= o);
		belady_sum += b;
		lru_sum += l;
	}
	printf("total misses: belady %d, lru %d\n", belady_sum, lru_sum);
	CHECK(lru_sum > belady_sum); /* the loop traces make LRU worse */

	/* tie-breaks and AUTO without hints behave like LRU */
	struct vmm_cand c[3] = {{5, VMM_NO_HINT, 9}, {2, VMM_NO_HINT, 3}, {7, VMM_NO_HINT, 3}};
	CHECK(vmm_policy_pick(VMM_POLICY_AUTO, c, 3) == 1);
	c[0].next_use = 100;
	c[1].next_use = 50;
	c[2].next_use = 50;
	CHECK(vmm_policy_pick(VMM_POLICY_AUTO, c, 3) == 0);
	CHECK(vmm_policy_pick(VMM_POLICY_LRU, c, 3) == 1);
	enum vmm_policy pol;
	CHECK_OK(vmm_policy_parse("LRU", &pol));
	CHECK(pol == VMM_POLICY_LRU);
	CHECK(vmm_policy_parse("fifo", &pol) == -EINVAL);
	TEST_PASS();
}
