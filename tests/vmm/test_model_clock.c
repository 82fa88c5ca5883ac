/* tests/vmm/test_model_clock.c — the vmm's bookkeeping does not move the model
 * backend's clock.
 *
 * On the model backend virtual time advances only when the host waits (an
 * event or stream sync, a wait_any, and a dev_event_query of pending work,
 * which stands for a polling loop). A status check inside the vmm is none of
 * those: on a GPU it costs nothing while the copies go on. When the vmm
 * answered such checks with dev_event_query, every acquire, vmm_obj_info and
 * vmm_progress that met a copy in flight ran the clock to the next completion
 * with the host's thread held: bench-hydra's SHARP spent 40 s of a 45 s
 * makespan inside acquires that never waited for anything.
 *
 * Here: copies in flight (a prefetch, a write-back of an evicted object whose
 * last reader is pending), then every non-blocking call the executors make —
 * vmm_obj_info, vmm_obj_where, vmm_progress, vmm_discard_if_idle, an acquire of
 * resident and of fresh space (on space freed in stream order), a prefetch, a
 * hint — and the clock must not have moved. vmm_sync then waits: it moves. */
#include "tests/vmm/vmm_test.h"

#define MiB (1024ull * 1024)
#define OBJ (64 * MiB)

static void noop(const void *args)
{
	(void)args;
}
static const struct dev_kernel kernel = {"k", noop, NULL};

int main(void)
{
	struct dev_ctx *ctx = vt_open_model(1, "gtx1080ti-x4");
	struct vmm_config c = vt_config(4 * OBJ, 0, 8 * OBJ);
	c.policy = VMM_POLICY_BELADY;
	struct vmm *v;
	CHECK_OK(vmm_open(ctx, &c, &v));
	struct dev_stream *s;
	struct dev_event *done;
	CHECK_OK(dev_stream_create(ctx, 0, &s));
	CHECK_OK(dev_event_create(ctx, &done));
	enum { A, B, C, D, E, N };
	uint64_t id[N];
	for (int i = 0; i < N; i++) {
		struct vmm_obj_desc d = {OBJ, VMM_KIND_WEIGHT, NULL, 0, 0};
		CHECK_OK(vmm_obj_create(v, &d, &id[i]));
		void *p;
		struct dev_event *ready;
		CHECK_OK(vmm_acquire(v, id[i], VMM_HOST, VMM_OVERWRITE, &p, &ready));
		CHECK_OK(vmm_release(v, id[i], VMM_HOST, NULL));
	}
	/* B resident on the device, C too and dirty, with a long kernel reading it */
	void *p;
	struct dev_event *ready;
	CHECK_OK(vmm_acquire(v, id[B], 0, VMM_READ, &p, &ready));
	CHECK_OK(vmm_release(v, id[B], 0, NULL));
	CHECK_OK(vmm_acquire(v, id[C], 0, VMM_WRITE, &p, &ready));
	vt_wait_ready(s, ready);
	CHECK_OK(vmm_sync(v));
	CHECK_OK(dev_launch(s, &kernel, NULL, 0, (struct dev_cost){1e11, 0, 0})); /* ~9 ms */
	CHECK_OK(dev_event_record(done, s));
	CHECK_OK(vmm_release(v, id[C], 0, done));

	double t0 = dev_now(ctx);
	CHECK_OK(vmm_prefetch(v, id[A], 0)); /* H2D in flight */
	CHECK_OK(vmm_evict(v, id[C], 0));    /* D2H after the kernel; its space freed in order */
	struct vmm_obj_info in;
	CHECK_OK(vmm_obj_info(v, id[A], &in));
	CHECK(in.in_flight == VMM_XFER_H2D);
	CHECK_OK(vmm_obj_info(v, id[C], &in));
	CHECK(in.in_flight == VMM_XFER_D2H);
	CHECK(vmm_obj_where(v, id[A]) & 1u);
	for (int k = 0; k < 8; k++)
		CHECK_OK(vmm_progress(v));
	CHECK(vmm_discard_if_idle(v, id[A]) == -EAGAIN);          /* still arriving */
	CHECK_OK(vmm_acquire(v, id[B], 0, VMM_READ, &p, &ready)); /* resident */
	CHECK(ready == NULL);
	CHECK_OK(vmm_release(v, id[B], 0, NULL));
	CHECK_OK(vmm_acquire(v, id[D], 0, VMM_OVERWRITE, &p, &ready)); /* fresh space */
	CHECK_OK(vmm_release(v, id[D], 0, NULL));
	CHECK_OK(vmm_hint(v, id[E], 5));
	CHECK_OK(vmm_prefetch(v, id[E], 0));
	CHECK_OK(vmm_obj_info(v, id[E], &in));
	CHECK_MSG(dev_now(ctx) == t0,
	          "the clock moved %.3f ms in calls that wait for nothing (copies in flight: a "
	          "bookkeeping check ran virtual time)",
	          (dev_now(ctx) - t0) * 1e3);

	CHECK_OK(vmm_sync(v)); /* a wait: the kernel and the copies complete */
	CHECK_MSG(dev_now(ctx) > t0 + 5e-3, "vmm_sync took %.3f ms", (dev_now(ctx) - t0) * 1e3);
	CHECK_OK(vmm_obj_info(v, id[A], &in));
	CHECK(in.in_flight < 0);
	for (int i = 0; i < N; i++)
		CHECK_OK(vmm_obj_destroy(v, id[i]));
	CHECK_OK(dev_event_destroy(done));
	CHECK_OK(dev_stream_destroy(s));
	vmm_close(v);
	dev_close(ctx);
	TEST_PASS();
}
