/* tests/vmm/test_policy.c — victim choice on fixed access traces.
 *
 * A cache of k equal-size objects is simulated with vmm_policy_pick(): Belady
 * (hints = the index of each object's next access, as the runtime gives them)
 * and LRU. Belady's miss count must equal the optimum found by a brute-force
 * search over every eviction choice; LRU's count is printed beside it. The
 * same traces (tests/vmm/traces.h) run through the real vmm in test_belady.c.
 */
#include "tests/test.h"
#include "tests/vmm/traces.h"
#include "vmm/internal.h"

#include <string.h>

#define MAXN VT_MAXN

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
		hint[x] = vt_next_use_after(t, len, i);
	}
	return misses;
}

int main(void)
{
	struct vt_trace traces[16];
	int nt = vt_traces(traces);
	printf("%-12s %4s %4s %8s %8s %8s\n", "trace", "len", "k", "optimal", "belady", "lru");
	int belady_sum = 0, lru_sum = 0;
	for (int i = 0; i < nt; i++) {
		int o = vt_optimal(&traces[i]);
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
