/* tests/vmm/test_belady.c — the fixed traces of test_policy (tests/vmm/traces.h)
 * driven through the real vmm on the host backend: equal-size objects whose only
 * write is on the host, one device whose pool holds exactly k of them, and
 * before each access the next-use hints a runtime that knows its schedule would
 * give (after object x is used at step i, vmm_hint(x, its next step)). Each
 * access is a READ acquire on device 0 with a check kernel on a device stream.
 * With the default policy (Belady, as hints are given) the misses — H2D
 * transfers, counted by the vmm and by the device layer — equal the brute-force
 * optimum; LRU's count through the vmm is printed beside it. Weights are clean:
 * no byte goes back (D2H = 0). */
#include "tests/vmm/traces.h"
#include "tests/vmm/vmm_test.h"

#define OBJ (64u << 10)

/* Runs trace tr under policy pol; returns the number of H2D transfers. */
static int run(struct dev_ctx *ctx, const struct vt_trace *tr, enum vmm_policy pol)
{
	int n = vt_trace_objects(tr);
	struct vmm_config c = vt_config((uint64_t)tr->k * OBJ, 0, (uint64_t)(n + 1) * OBJ);
	c.policy = pol;
	struct vmm *v;
	CHECK_OK(vmm_open(ctx, &c, &v));
	struct dev_stream *s;
	struct dev_event *done;
	CHECK_OK(dev_stream_create(ctx, 0, &s));
	CHECK_OK(dev_event_create(ctx, &done));
	uint64_t id[VT_MAXN];
	for (int x = 0; x < n; x++) {
		id[x] = vt_create(v, OBJ, VMM_KIND_WEIGHT, NULL);
		vt_write_host(v, id[x], OBJ, (uint64_t)x + 1);
	}
	uint64_t h2d0 = dev_copied_bytes(ctx, DEV_COPY_H2D);
	struct vmm_stats st0, st;
	vmm_stats_get(v, &st0);
	for (int i = 0; i < tr->len; i++) {
		int x = tr->t[i];
		CHECK_MSG(vt_read_dev(v, id[x], 0, s, done, OBJ, (uint64_t)x + 1) == 0,
		          "%s step %d: object %d", tr->name, i, x);
		CHECK_OK(vmm_hint(v, id[x], vt_next_use_after(tr->t, tr->len, i)));
	}
	CHECK_OK(vmm_sync(v));
	uint64_t h2d = vmm_xfer_bytes(v, VMM_XFER_H2D);
	CHECK(h2d % OBJ == 0);
	CHECK_MSG(h2d == dev_copied_bytes(ctx, DEV_COPY_H2D) - h2d0,
	          "vmm counted %" PRIu64 " H2D bytes, the device layer copied %" PRIu64, h2d,
	          dev_copied_bytes(ctx, DEV_COPY_H2D) - h2d0);
	CHECK(vmm_xfer_bytes(v, VMM_XFER_D2H) == 0 && vmm_xfer_bytes(v, VMM_XFER_P2P) == 0);
	vmm_stats_get(v, &st);
	CHECK((uint64_t)(st.misses.total - st0.misses.total) == h2d / OBJ);
	CHECK(st.frag_evictions.total == 0 && st.writebacks.total == 0);
	CHECK_OK(dev_stream_destroy(s));
	CHECK_OK(dev_event_destroy(done));
	vmm_close(v);
	return (int)(h2d / OBJ);
}

int main(void)
{
	struct dev_ctx *ctx = vt_open_host(1, 4u << 20);
	struct vt_trace tr[16];
	int nt = vt_traces(tr);
	printf("%-12s %4s %4s %8s %8s %8s\n", "trace", "len", "k", "optimal", "belady", "lru");
	int belady_sum = 0, lru_sum = 0;
	for (int i = 0; i < nt; i++) {
		int o = vt_optimal(&tr[i]);
		int b = run(ctx, &tr[i], VMM_POLICY_AUTO);
		int l = run(ctx, &tr[i], VMM_POLICY_LRU);
		printf("%-12s %4d %4d %8d %8d %8d\n", tr[i].name, tr[i].len, tr[i].k, o, b, l);
		CHECK_MSG(b == o, "%s: the vmm with hints made %d H2D transfers, the optimum is %d",
		          tr[i].name, b, o);
		CHECK(l >= o);
		belady_sum += b;
		lru_sum += l;
	}
	printf("total misses (H2D transfers): belady %d, lru %d\n", belady_sum, lru_sum);
	CHECK(lru_sum > belady_sum);
	dev_close(ctx);
	TEST_PASS();
}
