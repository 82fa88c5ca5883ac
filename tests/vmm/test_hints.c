/* tests/vmm/test_hints.c — per-place next-use hints and the write-back-clean
 * baseline. A copy's own hint (vmm_hint_at) ranks it on its place over the
 * object's hint, so an object used soon on one device and late on another is
 * kept where it is needed soon; bad ids and places are -EINVAL. With
 * writeback_clean (per-GPU virtual memory, the dp-swap baseline) evicting a
 * clean device copy writes it back all the same; without it, it is dropped. */
#include "tests/vmm/vmm_test.h"

#define KiB 1024ull
#define OBJ (64 * KiB)

static uint64_t d2h(struct vmm *v)
{
	return vmm_xfer_bytes(v, VMM_XFER_D2H);
}

int main(void)
{
	struct dev_ctx *ctx = vt_open_host(2, 4 << 20);
	struct vmm_config c = vt_config(2 * OBJ, 0, 16 * OBJ);
	struct vmm *v;
	CHECK_OK(vmm_open(ctx, &c, &v));
	struct dev_stream *s;
	struct dev_event *done;
	CHECK_OK(dev_stream_create(ctx, 0, &s));
	CHECK_OK(dev_event_create(ctx, &done));
	uint64_t a = vt_create(v, OBJ, VMM_KIND_WEIGHT, "a");
	uint64_t b = vt_create(v, OBJ, VMM_KIND_WEIGHT, "b");
	uint64_t x = vt_create(v, OBJ, VMM_KIND_WEIGHT, "x");
	vt_write_host(v, a, OBJ, 1);
	vt_write_host(v, b, OBJ, 2);
	vt_write_host(v, x, OBJ, 3);
	CHECK(vt_read_dev(v, a, 0, s, done, OBJ, 1) == 0);
	CHECK(vt_read_dev(v, b, 0, s, done, OBJ, 2) == 0);
	/* object hints: b is needed last, so bringing x evicts b */
	CHECK_OK(vmm_hint(v, a, 10));
	CHECK_OK(vmm_hint(v, b, 20));
	CHECK(vt_read_dev(v, x, 0, s, done, OBJ, 3) == 0);
	struct vmm_obj_info ia, ib;
	CHECK_OK(vmm_obj_info(v, a, &ia));
	CHECK_OK(vmm_obj_info(v, b, &ib));
	CHECK(ia.valid_mask & 1 && !(ib.valid_mask & 1));
	/* device 0 holds a (10) and x; x's object hint 50: without a per-place
	 * hint a would stay; a's copy on device 0 is needed late (100) */
	CHECK_OK(vmm_hint(v, x, 50));
	CHECK_OK(vmm_hint_at(v, a, 0, 100));
	CHECK(vt_read_dev(v, b, 0, s, done, OBJ, 2) == 0);
	struct vmm_obj_info ix;
	CHECK_OK(vmm_obj_info(v, a, &ia));
	CHECK_OK(vmm_obj_info(v, x, &ix));
	CHECK_MSG(!(ia.valid_mask & 1) && (ix.valid_mask & 1),
	          "the per-place hint did not rank a on device 0 (a %#x, x %#x)", ia.valid_mask,
	          ix.valid_mask);
	CHECK(vmm_hint_at(v, a, 7, 1) == -EINVAL);
	CHECK(vmm_hint_at(v, a, VMM_DISK, 1) == -EINVAL);
	CHECK(vmm_hint_at(v, a + (1ull << 32), 0, 1) == -EINVAL);
	CHECK_OK(vmm_hint_at(v, a, VMM_HOST, VMM_NO_HINT));
	/* clean copies are dropped: no D2H so far */
	CHECK_OK(vmm_sync(v));
	CHECK(d2h(v) == 0);
	vmm_close(v);
	CHECK_OK(dev_event_destroy(done));
	CHECK_OK(dev_stream_destroy(s));
	dev_close(ctx);

	/* the baseline: a clean copy is written back when evicted */
	ctx = vt_open_host(2, 4 << 20);
	CHECK_OK(dev_stream_create(ctx, 0, &s));
	CHECK_OK(dev_event_create(ctx, &done));
	c.writeback_clean = 1;
	CHECK_OK(vmm_open(ctx, &c, &v));
	a = vt_create(v, OBJ, VMM_KIND_WEIGHT, "a");
	vt_write_host(v, a, OBJ, 1);
	CHECK(vt_read_dev(v, a, 0, s, done, OBJ, 1) == 0);
	CHECK_OK(vmm_evict(v, a, 0));
	CHECK_OK(vmm_obj_wait(v, a));
	CHECK_MSG(d2h(v) == OBJ, "writeback_clean: %llu bytes D2H", (unsigned long long)d2h(v));
	CHECK(vt_read_host(v, a, OBJ, 1) == 0);
	vt_check_accounting(v, ctx, 2);
	vmm_close(v);
	CHECK_OK(dev_event_destroy(done));
	CHECK_OK(dev_stream_destroy(s));
	dev_close(ctx);
	TEST_PASS();
}
