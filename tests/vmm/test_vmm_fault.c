/* tests/vmm/test_vmm_fault.c — disk faults seen through the vmm: the disk tier
 * is configured from SPILL_* parameters (SPILL_DISK_PATH, SPILL_DISK_MEM,
 * SPILL_DISK_FAULT, read through vmm_config_from_params) and injected ENOSPC,
 * EIO and EFBIG hit host->disk write-backs, evictions (explicit, and the ones an
 * acquire makes to find room) and disk->host reads. Each failure reaches the
 * caller as a negative errno with a message naming the object, and nothing is
 * lost: the host copy (or the disk copy, for a failed read) stays valid, and
 * acquires still return the right bytes. A disk tier too small for an object
 * refuses it with -ENOSPC at once. Each failure is reported once, to its own
 * object or by vmm_sync, never cleared by another object's failure. Accounting
 * still matches the tier's. */
#include "tests/vmm/vmm_test.h"

#define OBJ (64u << 10)

static const char *dir;
static struct dev_ctx *ctx;
static struct dev_stream *s;
static struct dev_event *done;

static struct vmm *open_vmm(const char *fault, const char *disk_mem, const char *host_mem)
{
	struct sp_params p;
	sp_params_defaults(&p);
	CHECK_OK(sp_params_set(&p, "SPILL_DISK_PATH", dir));
	CHECK_OK(sp_params_set(&p, "SPILL_DISK_FAULT", fault));
	CHECK_OK(sp_params_set(&p, "SPILL_DISK_MEM", disk_mem));
	CHECK_OK(sp_params_set(&p, "SPILL_HOST_MEM", host_mem));
	CHECK_OK(sp_params_set(&p, "SPILL_VMM_DEVICE_MEM", "512K"));
	CHECK_OK(sp_params_set(&p, "SPILL_VMM_MAX_OBJECTS", "64"));
	CHECK_OK(sp_params_set(&p, "SPILL_IO_BLOCK", "16K"));
	struct vmm_config c;
	CHECK_OK(vmm_config_from_params(&p, &c));
	CHECK(c.use_disk && strcmp(c.disk.fault, fault) == 0);
#if !SPILL_HAVE_URING
	TEST_SKIP("the disk tier needs liburing");
#endif
	ctx = vt_open_host(1, 4u << 20); /* fresh: its copy counts start at 0 */
	CHECK_OK(dev_stream_create(ctx, 0, &s));
	CHECK_OK(dev_event_create(ctx, &done));
	struct vmm *v;
	CHECK_OK(vmm_open(ctx, &c, &v));
	return v;
}

static struct vmm_obj_info info(struct vmm *v, uint64_t id)
{
	struct vmm_obj_info i;
	CHECK_OK(vmm_obj_info(v, id, &i));
	return i;
}

static void expect_error(int rc, int want, const char *name)
{
	const char *m = sp_last_error();
	CHECK_MSG(rc == want, "rc %d, want %d: %s", rc, want, m);
	CHECK_MSG(strstr(m, name), "message does not name '%s': %s", name, m);
	printf("%s: %s\n", name, m);
}

static void close_vmm(struct vmm *v)
{
	CHECK_OK(vmm_sync(v));
	vt_check_accounting(v, ctx, 1);
	vmm_close(v);
	dev_close(ctx);
}

/* An explicit write-back to disk hits ENOSPC, then EIO, then EFBIG: the host copy
 * stays the object; the fourth try lands. */
static void test_writeback(void)
{
	struct vmm *v = open_vmm("write:1:ENOSPC,write:2:EIO,write:3:EFBIG", "0", "1M");
	uint64_t a = vt_create(v, OBJ, VMM_KIND_OPTIM, "adam.m");
	vt_write_host(v, a, OBJ, 11);
	static const int errs[] = {-ENOSPC, -EIO, -EFBIG};
	for (int k = 0; k < 3; k++) {
		CHECK_OK(vmm_writeback(v, a, 1)); /* asynchronous */
		expect_error(vmm_obj_wait(v, a), errs[k], "adam.m");
		CHECK(strstr(sp_last_error(), "kept"));
		struct vmm_obj_info i = info(v, a);
		CHECK((i.valid_mask & (VMM_INFO_HOST | VMM_INFO_DISK)) == VMM_INFO_HOST);
		CHECK(i.dirty_mask == VMM_INFO_HOST);
		CHECK(i.bytes_moved[VMM_XFER_H2DISK] == 0);
		CHECK(vt_read_host(v, a, OBJ, 11) == 0);
		CHECK(vt_read_dev(v, a, 0, s, done, OBJ, 11) == 0);
	}
	CHECK_OK(vmm_obj_wait(v, a)); /* reported once */
	CHECK_OK(vmm_writeback(v, a, 1));
	CHECK_OK(vmm_obj_wait(v, a));
	CHECK(info(v, a).valid_mask & VMM_INFO_DISK);
	struct vmm_stats st;
	vmm_stats_get(v, &st);
	CHECK(st.disk_errors.total == 3);
	close_vmm(v);
}

/* vmm_evict(VMM_HOST) hits EIO: the host copy is not dropped; an error retired
 * by someone else (here vmm_progress) is still reported by vmm_obj_wait. */
static void test_evict(void)
{
	struct vmm *v = open_vmm("write:1+:EIO", "0", "1M");
	uint64_t a = vt_create(v, OBJ, VMM_KIND_GRAD, "layer3.grad");
	vt_write_dev(v, a, 0, VMM_OVERWRITE, s, done, OBJ, 21);
	CHECK_OK(vmm_evict(v, a, 0)); /* D2H: fine */
	CHECK_OK(vmm_obj_wait(v, a));
	CHECK_OK(vmm_evict(v, a, VMM_HOST)); /* host -> disk: fails */
	expect_error(vmm_obj_wait(v, a), -EIO, "layer3.grad");
	CHECK(info(v, a).valid_mask == VMM_INFO_HOST);
	CHECK(vt_read_dev(v, a, 0, s, done, OBJ, 21) == 0);

	CHECK_OK(vmm_evict(v, a, VMM_HOST));
	while (info(v, a).in_flight >= 0) /* retired by someone else */
		CHECK_OK(vmm_progress(v));
	expect_error(vmm_obj_wait(v, a), -EIO, "layer3.grad");
	CHECK_OK(vmm_obj_wait(v, a));
	CHECK(vt_read_host(v, a, OBJ, 21) == 0);
	close_vmm(v);
}

/* An acquire that must push a host copy to disk to find room, whose first
 * victim's write fails, goes on with another victim and succeeds; the failed
 * victim stays readable and its error waits for vmm_obj_wait. When no victim
 * can go down (test_error_owner), the acquire gets the disk's error. */
static void test_pressure(void)
{
	struct vmm *v = open_vmm("write:2:EIO", "0", "256K"); /* the host pool holds 4 */
	uint64_t o[5];
	char name[16];
	for (int k = 0; k < 4; k++) {
		snprintf(name, sizeof(name), "w%d", k);
		o[k] = vt_create(v, OBJ, VMM_KIND_WEIGHT, name);
		vt_write_host(v, o[k], OBJ, 30 + (uint64_t)k);
	}
	o[4] = vt_create(v, OBJ, VMM_KIND_WEIGHT, "w4");
	vt_write_host(v, o[4], OBJ, 34); /* w0 goes to disk (write 1) */
	CHECK(info(v, o[0]).valid_mask == VMM_INFO_DISK);
	void *p;
	struct dev_event *ready;
	/* w1 -> disk: EIO, w1 stays; w2 -> disk: room for w0 */
	CHECK_OK(vmm_acquire(v, o[0], VMM_HOST, VMM_READ, &p, &ready));
	CHECK_OK(vmm_release(v, o[0], VMM_HOST, NULL));
	CHECK(info(v, o[1]).valid_mask == VMM_INFO_HOST);
	CHECK(info(v, o[2]).valid_mask == VMM_INFO_DISK);
	CHECK(info(v, o[0]).valid_mask == (VMM_INFO_HOST | VMM_INFO_DISK));
	for (int k = 0; k < 5; k++) /* all readable; the disk works again */
		CHECK_MSG(vt_read_dev(v, o[k], 0, s, done, OBJ, 30 + (uint64_t)k) == 0, "w%d", k);
	for (int k = 0; k < 5; k++)
		CHECK(vt_read_host(v, o[k], OBJ, 30 + (uint64_t)k) == 0);
	/* the victim's own error is kept for whoever waits on it */
	expect_error(vmm_obj_wait(v, o[1]), -EIO, "w1");
	CHECK_OK(vmm_obj_wait(v, o[1]));
	close_vmm(v);
}

/* Who reports a failure. An acquire of A that fails because a victim's disk
 * write failed returns the victim's error, and leaves A's own earlier failed
 * write-back for vmm_obj_wait (it used to clear it when the errnos matched).
 * vmm_sync reports the oldest unreported failure once: vmm_obj_wait on that
 * object returns 0 after it, and the next vmm_sync reports the next one. */
static void test_error_owner(void)
{
	struct vmm *v = open_vmm("write:1+:EIO", "0", "256K"); /* host: 4 objects */
	uint64_t a = vt_create(v, OBJ, VMM_KIND_OPTIM, "A");
	vt_write_host(v, a, OBJ, 61);
	CHECK_OK(vmm_writeback(v, a, 1));
	while (info(v, a).in_flight >= 0) /* fails; retired by someone else */
		CHECK_OK(vmm_progress(v));
	uint64_t h[3], d[8];
	char name[16];
	for (int k = 0; k < 3; k++) {
		snprintf(name, sizeof(name), "h%d", k);
		h[k] = vt_create(v, OBJ, VMM_KIND_OPTIM, name);
		vt_write_host(v, h[k], OBJ, 62 + (uint64_t)k);
	}
	for (int k = 0; k < 8; k++) { /* the device pool (512K) is full of dirty copies */
		snprintf(name, sizeof(name), "d%d", k);
		d[k] = vt_create(v, OBJ, VMM_KIND_GRAD, name);
		vt_write_dev(v, d[k], 0, VMM_OVERWRITE, s, done, OBJ, 70 + (uint64_t)k);
	}
	CHECK_OK(dev_stream_sync(s));
	void *p;
	struct dev_event *ready;
	int rc = vmm_acquire(v, a, 0, VMM_READ, &p, &ready);
	expect_error(rc, -EIO, "making room for 'A'");
	CHECK(!strstr(sp_last_error(), "of object 'A'"));
	expect_error(vmm_obj_wait(v, a), -EIO, "A"); /* A's own failure, still there */
	CHECK(strstr(sp_last_error(), "H2DISK") || strstr(sp_last_error(), "disk"));
	CHECK_OK(vmm_obj_wait(v, a)); /* reported once */
	for (int k = 0; k < 3; k++)   /* a victim's own error: reported once too */
		if (vmm_obj_wait(v, h[k]) < 0)
			CHECK_OK(vmm_obj_wait(v, h[k]));
	CHECK(vt_read_host(v, a, OBJ, 61) == 0);
	/* vmm_sync owns what it reports */
	CHECK_OK(vmm_writeback(v, h[0], 1));
	CHECK_OK(vmm_writeback(v, h[1], 1));
	int first = -1;
	for (int n = 0; n < 2; n++) { /* both fail; each sync reports one, in turn */
		expect_error(vmm_sync(v), -EIO, "'h");
		int k = strstr(sp_last_error(), "'h0'") ? 0 : 1;
		CHECK(k != first);
		first = k;
		CHECK_OK(vmm_obj_wait(v, h[k]));
	}
	CHECK_OK(vmm_sync(v));
	for (int k = 0; k < 8; k++)
		CHECK(vt_read_dev(v, d[k], 0, s, done, OBJ, 70 + (uint64_t)k) == 0);
	close_vmm(v);
}

/* A failed disk read: the disk copy stays, the next acquire gets the bytes. */
static void test_read(void)
{
	struct vmm *v = open_vmm("read:1:EIO,read:3:EIO", "0", "1M");
	uint64_t a = vt_create(v, OBJ, VMM_KIND_STASH, "act9");
	vt_write_host(v, a, OBJ, 41);
	CHECK_OK(vmm_evict(v, a, VMM_HOST));
	CHECK_OK(vmm_obj_wait(v, a));
	CHECK(info(v, a).valid_mask == VMM_INFO_DISK);
	void *p;
	struct dev_event *ready;
	expect_error(vmm_acquire(v, a, 0, VMM_READ, &p, &ready), -EIO, "act9");
	CHECK(info(v, a).valid_mask == VMM_INFO_DISK && info(v, a).pinned_mask == 0);
	CHECK(vt_read_dev(v, a, 0, s, done, OBJ, 41) == 0);
	/* a prefetch's failed read is reported by vmm_obj_wait */
	CHECK_OK(vmm_evict(v, a, 0));
	CHECK_OK(vmm_evict(v, a, VMM_HOST));
	CHECK_OK(vmm_obj_wait(v, a));
	CHECK(info(v, a).valid_mask == VMM_INFO_DISK);
	CHECK_OK(vmm_prefetch(v, a, 0)); /* disk read 3: fails */
	expect_error(vmm_obj_wait(v, a), -EIO, "act9");
	CHECK_OK(vmm_progress(v)); /* the abandoned chain starts nothing */
	CHECK(info(v, a).valid_mask == VMM_INFO_DISK && info(v, a).in_flight == -1);
	CHECK(vt_read_dev(v, a, 0, s, done, OBJ, 41) == 0);
	close_vmm(v);
}

/* A disk tier smaller than the object: -ENOSPC at once, naming it. */
static void test_small_disk(void)
{
	struct vmm *v = open_vmm("", "64K", "1M");
	uint64_t big = vt_create(v, 2 * OBJ, VMM_KIND_WEIGHT, "embedding");
	uint64_t a = vt_create(v, OBJ, VMM_KIND_WEIGHT, "fits");
	vt_write_host(v, big, 2 * OBJ, 51);
	vt_write_host(v, a, OBJ, 52);
	expect_error(vmm_writeback(v, big, 1), -ENOSPC, "embedding");
	expect_error(vmm_evict(v, big, VMM_HOST), -ENOSPC, "embedding");
	CHECK(info(v, big).valid_mask == VMM_INFO_HOST);
	CHECK(vt_read_host(v, big, 2 * OBJ, 51) == 0);
	CHECK_OK(vmm_evict(v, a, VMM_HOST));
	CHECK_OK(vmm_obj_wait(v, a));
	CHECK(vt_read_dev(v, a, 0, s, done, OBJ, 52) == 0);
	struct vmm_stats st;
	vmm_stats_get(v, &st);
	CHECK(st.evictions.total == 1); /* the refused one is not counted */
	close_vmm(v);
}

int main(void)
{
	dir = vt_tmpdir();
	test_writeback();
	test_evict();
	test_pressure();
	test_error_owner();
	test_read();
	test_small_disk();
	vt_rmdir(dir);
	TEST_PASS();
}
