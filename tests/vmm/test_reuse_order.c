/* tests/vmm/test_reuse_order.c — device space freed while still read is reused
 * in stream order, and only that space waits.
 *
 * When a device copy is freed while a kernel still reads it, the vmm does not
 * wait on the host: a later write into that space (a transfer, or the caller
 * through the acquire's ready event) waits for the reader on the device
 * ("reuse"). That wait used to apply to every allocation made while any such
 * free was pending, so within a shard unit the next layer's weights could not
 * start to load until the layer before had finished computing. Now only the
 * space that was freed waits. On the model backend's clock:
 *  - fresh space elsewhere loads at once (its copy lands before the kernel
 *    that reads the freed space ends);
 *  - the freed space itself is written only after that kernel;
 *  - it still is after being allocated and freed again with no reader of its
 *    own in between (the tag of the first free survives: the first version of
 *    this change lost it, and the host backend's random device-failure test
 *    read stale bytes);
 *  - the same after the hole merged with a neighbour freed later. */
#include "tests/vmm/vmm_test.h"

#define MiB (1024ull * 1024)
#define OBJ (64 * MiB)

static void noop(const void *args)
{
	(void)args;
}
static const struct dev_kernel kernel = {"k", noop, NULL};

static uint64_t host_obj(struct vmm *v, uint64_t bytes)
{
	struct vmm_obj_desc d = {bytes, VMM_KIND_STASH, NULL, 0, 0};
	uint64_t id;
	CHECK_OK(vmm_obj_create(v, &d, &id));
	void *p;
	struct dev_event *ready;
	CHECK_OK(vmm_acquire(v, id, VMM_HOST, VMM_OVERWRITE, &p, &ready));
	CHECK_OK(vmm_release(v, id, VMM_HOST, NULL));
	return id;
}

/* A new object with a clean copy on device 0, no reader pending (its load
 * waits only on the host: the clock runs to it, not to a kernel's end). */
static uint64_t resident(struct vmm *v, uint64_t bytes)
{
	uint64_t id = host_obj(v, bytes);
	void *p;
	struct dev_event *ready;
	CHECK_OK(vmm_acquire(v, id, 0, VMM_READ, &p, &ready));
	CHECK_OK(vmm_release(v, id, 0, NULL));
	if (ready)
		CHECK_OK(dev_event_sync(ready));
	CHECK_OK(vmm_progress(v));
	return id;
}

/* Loads id to device 0 and returns when its copy landed (after a sync). */
static double load_time(struct vmm *v, struct dev_stream *s, uint64_t id)
{
	void *p;
	struct dev_event *ready;
	CHECK_OK(vmm_acquire(v, id, 0, VMM_READ, &p, &ready));
	CHECK(ready != NULL);
	CHECK_OK(dev_stream_wait_event(s, ready));
	CHECK_OK(vmm_release(v, id, 0, NULL));
	CHECK_OK(vmm_sync(v));
	CHECK_OK(dev_stream_sync(s));
	double t;
	CHECK_OK(dev_event_time(ready, &t));
	return t;
}

/* A new object resident on device 0 and read by a ~90 ms kernel (done fires
 * at its end). */
static uint64_t read_on_device(struct vmm *v, struct dev_stream *s, struct dev_event *done,
                               uint64_t bytes)
{
	uint64_t a = host_obj(v, bytes);
	void *p;
	struct dev_event *ready;
	CHECK_OK(vmm_acquire(v, a, 0, VMM_READ, &p, &ready));
	if (ready)
		CHECK_OK(dev_stream_wait_event(s, ready));
	CHECK_OK(vmm_sync(v)); /* landed: only the kernel reads it when it goes */
	CHECK_OK(dev_launch(s, &kernel, NULL, 0, (struct dev_cost){1e12, 0, 0}));
	CHECK_OK(dev_event_record(done, s));
	CHECK_OK(vmm_release(v, a, 0, done));
	return a;
}

/* Destroys a while its reader runs: the space is freed in stream order. */
static void free_while_read(struct vmm *v, struct dev_ctx *ctx, uint64_t a)
{
	double t0 = dev_now(ctx);
	CHECK_OK(vmm_obj_destroy(v, a));
	CHECK_MSG(dev_now(ctx) == t0, "the free waited on the host");
}

static double kernel_end(struct dev_event *done)
{
	double t;
	CHECK_OK(dev_event_time(done, &t));
	return t;
}

int main(void)
{
	struct dev_ctx *ctx = vt_open_model(1, "gtx1080ti-x4");
	struct vmm_config c = vt_config(4 * OBJ, 0, 16 * OBJ);
	struct vmm *v;
	CHECK_OK(vmm_open(ctx, &c, &v));
	struct dev_stream *s;
	struct dev_event *done;
	CHECK_OK(dev_stream_create(ctx, 0, &s));
	CHECK_OK(dev_event_create(ctx, &done));

	/* 1. fresh space elsewhere does not wait: the freed OBJ hole is walled
	 * off from the free rest by a resident object (activations fill the pool
	 * from the bottom: the hole, the wall, then 2 x OBJ free), and a 2 x OBJ
	 * object cannot fit the hole */
	uint64_t a = read_on_device(v, s, done, OBJ), wall = resident(v, OBJ);
	free_while_read(v, ctx, a);
	uint64_t f = host_obj(v, 2 * OBJ);
	double t_f = load_time(v, s, f), t_k = kernel_end(done);
	CHECK_MSG(t_f < t_k,
	          "fresh space waited for a kernel reading other freed space: loaded at "
	          "%.3f ms, the kernel ended at %.3f ms",
	          t_f * 1e3, t_k * 1e3);
	CHECK_OK(vmm_obj_destroy(v, f));
	CHECK_OK(vmm_obj_destroy(v, wall));
	CHECK_OK(vmm_sync(v));

	/* 2. the freed space itself waits (best fit: the same size takes the hole) */
	void *p;
	struct dev_event *ready;
	free_while_read(v, ctx, read_on_device(v, s, done, OBJ));
	uint64_t b = host_obj(v, OBJ);
	double t_b = load_time(v, s, b);
	t_k = kernel_end(done);
	CHECK_MSG(t_b > t_k,
	          "a copy into space still read landed at %.3f ms, the reader ended at %.3f",
	          t_b * 1e3, t_k * 1e3);
	CHECK_OK(vmm_obj_destroy(v, b));
	CHECK_OK(vmm_sync(v));

	/* 3. allocated and freed again with no reader of its own in between: the
	 * next copy into it still waits for the first reader (walled in, so no
	 * merge with tagged free space can hide a lost tag) */
	a = read_on_device(v, s, done, OBJ);
	wall = resident(v, OBJ);
	free_while_read(v, ctx, a);
	uint64_t x = host_obj(v, OBJ), y = host_obj(v, OBJ);
	CHECK_OK(vmm_acquire(v, x, 0, VMM_OVERWRITE, &p, &ready)); /* the hole, no copy */
	CHECK_OK(vmm_release(v, x, 0, NULL));                      /* no fence */
	CHECK_OK(vmm_discard(v, x));                               /* freed, nothing reads it */
	double t_y = load_time(v, s, y);
	t_k = kernel_end(done);
	CHECK_MSG(t_y > t_k,
	          "space freed while read, allocated and freed again: a copy into it landed at "
	          "%.3f ms, before its first reader ended at %.3f ms",
	          t_y * 1e3, t_k * 1e3);
	CHECK_OK(vmm_obj_destroy(v, x));
	CHECK_OK(vmm_obj_destroy(v, y));
	CHECK_OK(vmm_obj_destroy(v, wall));
	CHECK_OK(vmm_sync(v));

	/* 5. both parts of a split hole keep the tag: a 2 x OBJ hole walled in,
	 * its low half taken with no copy, then a copy into its high half */
	a = read_on_device(v, s, done, 2 * OBJ);
	wall = resident(v, OBJ);
	uint64_t wall2 = resident(v, OBJ);
	free_while_read(v, ctx, a);
	x = host_obj(v, OBJ);
	y = host_obj(v, OBJ);
	CHECK_OK(vmm_acquire(v, x, 0, VMM_OVERWRITE, &p, &ready)); /* the low half */
	CHECK_OK(vmm_release(v, x, 0, NULL));
	t_y = load_time(v, s, y);
	t_k = kernel_end(done);
	CHECK_MSG(t_y > t_k,
	          "a copy into the rest of a split hole landed at %.3f ms, its reader "
	          "ended at %.3f",
	          t_y * 1e3, t_k * 1e3);
	uint64_t all[] = {x, y, wall, wall2};
	for (int i = 0; i < 4; i++)
		CHECK_OK(vmm_obj_destroy(v, all[i]));
	CHECK_OK(vmm_sync(v));

	/* 4. merged holes keep the tag: the read hole above a resident object
	 * joins the free rest, then the object below is freed and its block (no
	 * tag) absorbs the tagged one; a 3 x OBJ copy from the bottom waits */
	wall = resident(v, OBJ);
	a = read_on_device(v, s, done, OBJ);
	free_while_read(v, ctx, a);
	CHECK_OK(vmm_evict(v, wall, 0));
	uint64_t z = host_obj(v, 3 * OBJ);
	double t_z = load_time(v, s, z);
	t_k = kernel_end(done);
	CHECK_MSG(t_z > t_k,
	          "a copy across merged holes landed at %.3f ms, the reader ended at %.3f",
	          t_z * 1e3, t_k * 1e3);
	CHECK_OK(vmm_obj_destroy(v, z));
	CHECK_OK(vmm_obj_destroy(v, wall));

	CHECK_OK(dev_event_destroy(done));
	CHECK_OK(dev_stream_destroy(s));
	vmm_close(v);
	dev_close(ctx);
	TEST_PASS();
}
