/* tests/vmm/test_link_order.c — copies over the host link the devices share
 * are served whole, in issue order (vmm_config.link_copies).
 *
 * On the model backend (gtx1080ti-x4: four GPUs behind one 12 GB/s uplink,
 * each 12 GB/s H2D alone) four devices each bring an object of the same size
 * at the same moment. Split among all four, every copy ends at 4 units (a
 * unit: one copy alone on the link) and every device waits that long for its
 * input; in issue order the first ends at 1 unit, the second at 2, ... and the
 * last still at 4: no copy ends later and three end earlier. Two slots serve
 * them two by two. A copy that must wait for a kernel (its space is still read
 * on its device) stays out of the order, so the copies behind it do not wait
 * for that kernel as well. The bytes and the data are the same in every mode
 * (the host backend's transparency tests run the order under real threads).
 */
#include "tests/vmm/vmm_test.h"

#include <math.h>

#define MiB  (1024ull * 1024)
#define OBJ  (120 * MiB)
#define NDEV 4

static void noop(const void *args)
{
	(void)args;
}
static const struct dev_kernel kernel = {"k", noop, NULL};

/* The end of each object's last H2D, from the vmm's trace, in units after t0. */
static void h2d_ends(struct vmm *v, const uint64_t *id, int n, double t0, double unit, double *end)
{
	struct vmm_trace_rec rec[64];
	uint64_t total;
	size_t k = vmm_trace_get(v, rec, 64, &total);
	for (int i = 0; i < n; i++) {
		end[i] = -1;
		for (size_t j = 0; j < k; j++)
			if (rec[j].obj == id[i] && rec[j].xfer == VMM_XFER_H2D)
				end[i] = (rec[j].t_end - t0) / unit;
		CHECK_MSG(end[i] >= 0, "object %d has no H2D in the trace", i);
	}
}

/* Each of NDEV devices reads its own object from the host at once. */
static void concurrent_reads(int link_copies, double *end)
{
	struct dev_ctx *ctx = vt_open_model(NDEV, "gtx1080ti-x4");
	struct vmm_config c = vt_config(4 * OBJ, 0, 16 * OBJ);
	c.link_copies = link_copies;
	struct vmm *v;
	CHECK_OK(vmm_open(ctx, &c, &v));
	uint64_t id[NDEV];
	for (int i = 0; i < NDEV; i++) {
		struct vmm_obj_desc d = {OBJ, VMM_KIND_WEIGHT, NULL, 0, 0};
		CHECK_OK(vmm_obj_create(v, &d, &id[i]));
		void *p;
		struct dev_event *ready;
		CHECK_OK(vmm_acquire(v, id[i], VMM_HOST, VMM_OVERWRITE, &p, &ready));
		CHECK_OK(vmm_release(v, id[i], VMM_HOST, NULL));
	}
	CHECK_OK(vmm_sync(v));
	double t0 = dev_now(ctx);
	for (int i = 0; i < NDEV; i++) {
		void *p;
		struct dev_event *ready;
		CHECK_OK(vmm_acquire(v, id[i], i, VMM_READ, &p, &ready));
		CHECK(ready != NULL);
		CHECK_OK(vmm_release(v, id[i], i, NULL));
	}
	CHECK_OK(vmm_sync(v));
	h2d_ends(v, id, NDEV, t0, (double)OBJ / 12e9, end);
	CHECK(vmm_xfer_bytes(v, VMM_XFER_H2D) == NDEV * OBJ);
	vmm_close(v);
	dev_close(ctx);
}

/* Device 0's copy must wait for a kernel still reading its space; device 1's
 * copy, issued after it, must not. */
static void blocked_first(int link_copies, double *end)
{
	struct dev_ctx *ctx = vt_open_model(2, "gtx1080ti-x4");
	struct vmm_config c = vt_config(OBJ, 0, 16 * OBJ); /* one object per device */
	c.link_copies = link_copies;
	c.policy = VMM_POLICY_LRU;
	struct vmm *v;
	CHECK_OK(vmm_open(ctx, &c, &v));
	enum { X, Y, Z, N };
	uint64_t id[N];
	for (int i = 0; i < N; i++) {
		struct vmm_obj_desc d = {OBJ, VMM_KIND_WEIGHT, NULL, 0, 0};
		CHECK_OK(vmm_obj_create(v, &d, &id[i]));
		void *p;
		struct dev_event *ready;
		CHECK_OK(vmm_acquire(v, id[i], VMM_HOST, VMM_OVERWRITE, &p, &ready));
		CHECK_OK(vmm_release(v, id[i], VMM_HOST, NULL));
	}
	struct dev_stream *s;
	struct dev_event *done;
	CHECK_OK(dev_stream_create(ctx, 0, &s));
	CHECK_OK(dev_event_create(ctx, &done));
	void *p;
	struct dev_event *ready;
	CHECK_OK(vmm_acquire(v, id[X], 0, VMM_READ, &p, &ready));
	vt_wait_ready(s, ready);
	CHECK_OK(vmm_sync(v));
	CHECK_OK(dev_stream_sync(s));
	double t0 = dev_now(ctx);
	/* a kernel reading X for ~89 ms (1e12 FLOP at 11.3 TFLOP/s), 8 units */
	CHECK_OK(dev_launch(s, &kernel, NULL, 0, (struct dev_cost){1e12, 0, 0}));
	CHECK_OK(dev_event_record(done, s));
	CHECK_OK(vmm_release(v, id[X], 0, done));
	/* Y takes X's space on device 0 (X is clean: dropped), after the kernel */
	CHECK_OK(vmm_acquire(v, id[Y], 0, VMM_READ, &p, &ready));
	CHECK_OK(vmm_release(v, id[Y], 0, NULL));
	CHECK_OK(vmm_acquire(v, id[Z], 1, VMM_READ, &p, &ready));
	CHECK_OK(vmm_release(v, id[Z], 1, NULL));
	CHECK_OK(vmm_sync(v));
	uint64_t yz[2] = {id[Y], id[Z]};
	h2d_ends(v, yz, 2, t0, (double)OBJ / 12e9, end);
	CHECK_OK(dev_event_destroy(done));
	CHECK_OK(dev_stream_destroy(s));
	vmm_close(v);
	dev_close(ctx);
}

static void expect(const char *what, const double *got, const double *want, int n)
{
	printf("  %-28s", what);
	for (int i = 0; i < n; i++)
		printf(" %.3f", got[i]);
	printf(" (units)\n");
	for (int i = 0; i < n; i++)
		CHECK_MSG(fabs(got[i] - want[i]) < 0.02, "%s: copy %d ends at %.4f units, not %.4f",
		          what, i, got[i], want[i]);
}

int main(void)
{
	double end[NDEV];
	concurrent_reads(-1, end);
	expect("split among all (-1):", end, (double[]){4, 4, 4, 4}, NDEV);
	concurrent_reads(0, end); /* the profile: 12 GB/s over 12 GB/s, one slot */
	expect("from the profile (0):", end, (double[]){1, 2, 3, 4}, NDEV);
	concurrent_reads(1, end);
	expect("one at a time (1):", end, (double[]){1, 2, 3, 4}, NDEV);
	concurrent_reads(2, end);
	expect("two at a time (2):", end, (double[]){2, 2, 4, 4}, NDEV);
	concurrent_reads(4, end); /* as many as the devices: no order */
	expect("four at a time (4):", end, (double[]){4, 4, 4, 4}, NDEV);

	/* the kernel ends at ~8.2 units; Y runs after it, Z at once */
	double kernel_units = 1e12 / 11.3e12 / ((double)OBJ / 12e9);
	blocked_first(1, end);
	expect("behind a kernel, ordered:", end, (double[]){kernel_units + 1, 1}, 2);
	blocked_first(-1, end);
	expect("behind a kernel, split:", end, (double[]){kernel_units + 1, 1}, 2);
	printf("ok\n");
	return 0;
}
