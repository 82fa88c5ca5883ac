/* tests/vmm/test_overlap.c — under memory pressure, a train-shaped loop through
 * the vmm runs at close to the speed of unlimited memory, on the model backend
 * (virtual time from the gtx1080ti-x4 profile: deterministic, exact to rerun).
 *
 * L layers, each with a weight W (8 MiB), a stashed activation A (4 MiB) and a
 * gradient G (8 MiB). One iteration: forward l (read W, write A), then for l
 * from the last: backward (read A and W, write G) and a just-in-time update
 * (write W, read G). Each task acquires its objects, makes the compute stream
 * wait on their ready events, launches a kernel charged FLOPS, releases them
 * with a done event and sets Belady next-use hints from the known order (every
 * object is hinted with its first use before the first task). Then,
 * as the runtime's executor will: dead values are discarded (A after its
 * backward, G after its update: both are overwritten next iteration), under
 * pressure an updated W is written back at once (its later eviction is then a
 * drop that waits for nothing), and the inputs of the next LOOKAHEAD tasks
 * are prefetched. Three runs of the same loop, side by side:
 *   unlimited  device budget = twice the state: no eviction, no write-back
 *   ordered    budget = a third of the state, stream-ordered reuse (default)
 *   host-waits budget = a third, the host waits for each victim's last reader
 *              and write-down (SPILL_VMM_ORDERED_REUSE=0)
 * Iteration 0 is reported apart (it starts cold and must write its live
 * activations down); the figure is the time per iteration after it.
 * Checks: the pressure runs really swap (more than the state in H2D);
 * ordered <= RATIO_MAX x unlimited, cold and warm; host-waits blocks the host
 * more often than ordered. It is not slower here: with LOOKAHEAD tasks queued
 * the compute stream does not starve while the host waits (1.006 against
 * ordered's 1.009, unchanged since only still-read space waits for its
 * reader instead of every allocation: test_reuse_order). The 1.21x host-waits once measured here was the model
 * backend's clock run by the vmm's status checks (test_model_clock), not the
 * waits. What made the difference on the way here, for the next
 * reader: a prefetch must not evict what is needed before its own object
 * (else prefetched weights thrash: 1.5x); lookahead 3 beats 2 (1.012 vs
 * 1.049) and 4 (1.045).
 */
#include "tests/vmm/vmm_test.h"

#include <inttypes.h>

#define MiB       (1024ull * 1024)
#define LAYERS    12
#define ITERS     4
#define FLOPS     1.2e10 /* ~1.06 ms on the profile's 11.3 TFLOP/s: ~1.5 copies of W */
#define LOOKAHEAD 3      /* tasks whose inputs are prefetched */
#define RATIO_MAX 1.05

enum { W, A, G, KINDS };
static const uint64_t obj_bytes[KINDS] = {8 * MiB, 4 * MiB, 8 * MiB};
static const enum vmm_kind obj_kind[KINDS] = {VMM_KIND_WEIGHT, VMM_KIND_STASH, VMM_KIND_GRAD};

struct use {
	int what;
	enum vmm_access access;
};
struct task {
	int layer, n;
	struct use u[3];
};

/* One iteration's tasks: forward, then backward + update per layer in reverse. */
static int schedule(struct task *t)
{
	int n = 0;
	for (int l = 0; l < LAYERS; l++)
		t[n++] = (struct task){l, 2, {{W, VMM_READ}, {A, VMM_OVERWRITE}, {0, 0}}};
	for (int l = LAYERS - 1; l >= 0; l--) {
		t[n++] = (struct task){l, 3, {{A, VMM_READ}, {G, VMM_OVERWRITE}, {W, VMM_READ}}};
		t[n++] = (struct task){l, 2, {{W, VMM_WRITE}, {G, VMM_READ}, {0, 0}}};
	}
	return n;
}

static void noop(const void *args)
{
	(void)args;
}
static const struct dev_kernel layer_kernel = {"layer", noop, NULL};

struct result {
	double first, steady; /* seconds: iteration 0 (cold), iterations 1.. (per iteration) */
	uint64_t h2d, d2h, waits, ordered;
};

static struct result run(struct dev_ctx *ctx, uint64_t budget, int host_waits)
{
	const int eager = budget < LAYERS * 20 * MiB; /* write-back pays only under pressure */
	struct vmm_config c = vt_config(budget, 0, 2 * LAYERS * 20 * MiB);
	c.host_waits = host_waits;
	c.policy = VMM_POLICY_BELADY;
	struct vmm *v;
	CHECK_OK(vmm_open(ctx, &c, &v));
	struct dev_stream *s;
	struct dev_event *done;
	CHECK_OK(dev_stream_create(ctx, 0, &s));
	CHECK_OK(dev_event_create(ctx, &done));
	uint64_t id[LAYERS][KINDS];
	for (int l = 0; l < LAYERS; l++)
		for (int k = 0; k < KINDS; k++) {
			struct vmm_obj_desc d = {obj_bytes[k], obj_kind[k], NULL, 0, 0};
			CHECK_OK(vmm_obj_create(v, &d, &id[l][k]));
		}
	/* weights start in host memory, as if loaded from a checkpoint */
	for (int l = 0; l < LAYERS; l++) {
		void *p;
		struct dev_event *ready;
		CHECK_OK(vmm_acquire(v, id[l][W], VMM_HOST, VMM_OVERWRITE, &p, &ready));
		CHECK_OK(vmm_release(v, id[l][W], VMM_HOST, NULL));
	}
	struct task t[3 * LAYERS];
	int n = schedule(t);
	/* every object's first use is known before the first task */
	for (int i = n - 1; i >= 0; i--)
		for (int j = 0; j < t[i].n; j++)
			CHECK_OK(vmm_hint(v, id[t[i].layer][t[i].u[j].what], (uint64_t)i));
	CHECK_OK(vmm_sync(v));
	struct vmm_stats s0;
	vmm_stats_get(v, &s0);
	double t0 = dev_now(ctx);
	struct dev_event *warm; /* end of iteration 0 on the compute stream */
	CHECK_OK(dev_event_create(ctx, &warm));
	for (int it = 0; it < ITERS; it++) {
		if (it == 1)
			CHECK_OK(dev_event_record(warm, s));
		for (int i = 0; i < n; i++) {
			const struct task *k = &t[i];
			for (int j = 0; j < k->n; j++) {
				void *p;
				struct dev_event *ready;
				CHECK_OK(vmm_acquire(v, id[k->layer][k->u[j].what], 0,
				                     k->u[j].access, &p, &ready));
				vt_wait_ready(s, ready);
			}
			CHECK_OK(
			    dev_launch(s, &layer_kernel, NULL, 0, (struct dev_cost){FLOPS, 0, 0}));
			CHECK_OK(dev_event_record(done, s));
			for (int j = 0; j < k->n; j++) {
				uint64_t obj = id[k->layer][k->u[j].what];
				CHECK_OK(vmm_release(v, obj, 0, done));
				/* next use: the next task (of any later iteration) using obj */
				uint64_t next = VMM_NO_HINT;
				for (int d = 1; d <= n && next == VMM_NO_HINT; d++) {
					const struct task *b = &t[(i + d) % n];
					for (int q = 0; q < b->n; q++)
						if (b->layer == k->layer &&
						    b->u[q].what == k->u[j].what)
							next = (uint64_t)(it * n + i + d);
				}
				CHECK_OK(vmm_hint(v, obj, next));
			}
			/* dead values (both are overwritten next iteration): after a
			 * backward (which writes G) its A, after an update (which reads
			 * G) its G */
			if (k->u[1].what == G)
				CHECK_OK(vmm_discard(
				    v, id[k->layer][k->u[1].access == VMM_READ ? G : A]));
			/* an updated weight is written back at once, so that evicting
			 * it later is a drop that waits for nothing */
			if (eager && k->u[0].what == W && k->u[0].access == VMM_WRITE)
				CHECK_OK(vmm_writeback(v, id[k->layer][W], 0));
			CHECK_OK(vmm_progress(v)); /* deferred write-backs go on */
			/* the next tasks' inputs start moving while this one computes */
			for (int d = 1; d <= LOOKAHEAD; d++) {
				const struct task *nx = &t[(i + d) % n];
				for (int j = 0; j < nx->n; j++)
					if (nx->u[j].access != VMM_OVERWRITE)
						CHECK_OK(vmm_prefetch(
						    v, id[nx->layer][nx->u[j].what], 0));
			}
		}
	}
	CHECK_OK(dev_stream_sync(s));
	double t_warm, t_end;
	CHECK_OK(dev_event_time(warm, &t_warm));
	CHECK_OK(dev_event_time(done, &t_end));
	CHECK_OK(dev_event_destroy(warm));
	CHECK_OK(vmm_sync(v));
	struct result r = {.first = t_warm - t0, .steady = (t_end - t_warm) / (ITERS - 1)};
	struct vmm_stats s1;
	vmm_stats_get(v, &s1);
	r.h2d = vmm_xfer_bytes(v, VMM_XFER_H2D);
	r.d2h = vmm_xfer_bytes(v, VMM_XFER_D2H);
	r.waits = s1.waits.total + s1.fence_waits.total - s0.waits.total - s0.fence_waits.total;
	r.ordered = s1.ordered_reuses.total - s0.ordered_reuses.total;
	for (int l = 0; l < LAYERS; l++)
		for (int k = 0; k < KINDS; k++)
			CHECK_OK(vmm_obj_destroy(v, id[l][k]));
	CHECK_OK(dev_event_destroy(done));
	CHECK_OK(dev_stream_destroy(s));
	vmm_close(v);
	return r;
}

int main(void)
{
	struct dev_ctx *ctx = vt_open_model(1, "gtx1080ti-x4");
	const uint64_t state = LAYERS * 20 * MiB;
	struct result r[3] = {run(ctx, 2 * state, 0), run(ctx, state / 3, 0),
	                      run(ctx, state / 3, 1)};
	static const char *name[3] = {"unlimited", "ordered", "host-waits"};
	printf("%d layers x %d iterations, %.0f MiB of state, compute %.2f ms per task (model, "
	       "gtx1080ti-x4)\n",
	       LAYERS, ITERS, (double)state / MiB, FLOPS / 11.3e12 * 1e3);
	printf("%-11s %10s %10s %10s %12s %12s %8s %9s\n", "run", "budget MiB", "H2D MiB",
	       "D2H MiB", "1st iter ms", "iter ms", "waits", "vs unlim");
	for (int k = 0; k < 3; k++)
		printf("%-11s %10.0f %10.0f %10.0f %12.3f %12.3f %8" PRIu64 " %9.3f\n", name[k],
		       (double)(k ? state / 3 : 2 * state) / MiB, (double)r[k].h2d / MiB,
		       (double)r[k].d2h / MiB, r[k].first * 1e3, r[k].steady * 1e3, r[k].waits,
		       r[k].steady / r[0].steady);
	printf("overlap ordered=%.3f host_waits=%.3f (iteration time vs unlimited memory; first "
	       "iteration %.3f and %.3f)\n",
	       r[1].steady / r[0].steady, r[2].steady / r[0].steady, r[1].first / r[0].first,
	       r[2].first / r[0].first);
	/* the pressure runs really swap: more than the state comes in */
	CHECK(r[1].h2d > state && r[1].ordered > 0 && r[2].ordered == 0);
	CHECK_MSG(r[1].steady <= RATIO_MAX * r[0].steady && r[1].first <= RATIO_MAX * r[0].first,
	          "ordered run %.3f x unlimited, first iteration %.3f (max %.2f)",
	          r[1].steady / r[0].steady, r[1].first / r[0].first, RATIO_MAX);
	CHECK_MSG(r[2].waits > r[1].waits, "host-waits blocked %llu times, ordered %llu",
	          (unsigned long long)r[2].waits, (unsigned long long)r[1].waits);
	dev_close(ctx);
	TEST_PASS();
}
