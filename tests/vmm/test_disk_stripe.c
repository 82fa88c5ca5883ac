/* tests/vmm/test_disk_stripe.c — several drives (SPILL_DISK_PATH "d1,d2,d3"):
 * every object is striped over all of them (vmm/disk.c).
 *
 * Host backend, a host pool of 4 objects and 12 objects of odd sizes (from one
 * page to 1 MiB + 4 KiB + 8 bytes): each written on the device, pushed down to
 * disk by the others, then read back on the device in a shuffled order. With
 * three directories the patterns come back exactly as with one (the same bits)
 * and each drive carries a third of the bytes (within 10%).
 * Then a drive that fails ("1/write:3+:EIO": drive 1's third write and later):
 * the error reaches the caller naming the object, the host copies are kept,
 * and every object still reads back its pattern — nothing is lost. */
#include "tests/vmm/vmm_test.h"

#include <errno.h>
#include <sys/stat.h>

#define NOBJ 12
#define MiB  (1024ull * 1024)

static size_t size_of(int i)
{
	static const size_t sz[] = {4096,    8,          1 * MiB + 4096 + 8, 3 * 4096,
	                            300000,  1 * MiB,    65536 + 8,          4096 + 8,
	                            777 * 8, 512 * 1024, 2 * 4096 + 8,       1 * MiB - 8};
	return sz[i];
}

static size_t max_size(void)
{
	size_t m = 0;
	for (int i = 0; i < NOBJ; i++)
		m = size_of(i) > m ? size_of(i) : m;
	return m;
}

/* Runs the round trip with the given disk path list and fault spec. Returns
 * the number of write-back errors met; fills per-drive bytes. */
static int round_trip(const char *paths, const char *fault, uint64_t *drive_bytes, int *ndrives)
{
	struct dev_ctx *ctx = vt_open_host(1, 64 * MiB);
	struct vmm_config c = vt_config(4 * MiB, 0, 4 * max_size() + 4 * MiB);
	vt_config_disk(&c, paths, 0, fault);
	c.policy = VMM_POLICY_LRU;
	struct vmm *v;
	CHECK_OK(vmm_open(ctx, &c, &v));
	struct dev_stream *s;
	struct dev_event *done;
	CHECK_OK(dev_stream_create(ctx, 0, &s));
	CHECK_OK(dev_event_create(ctx, &done));
	uint64_t id[NOBJ];
	for (int i = 0; i < NOBJ; i++) {
		char name[16];
		snprintf(name, sizeof(name), "obj%d", i);
		id[i] = vt_create(v, size_of(i), VMM_KIND_OPTIM, name);
		vt_write_dev(v, id[i], 0, VMM_OVERWRITE, s, done, size_of(i), 100 + i);
		CHECK_OK(dev_event_sync(done));
	}
	int errors = 0;
	for (int i = 0; i < NOBJ; i++) { /* everything down to disk, as far as it goes */
		int rc = vmm_evict(v, id[i], 0);
		if (rc == 0)
			rc = vmm_writeback(v, id[i], 1);
		if (rc == 0)
			rc = vmm_obj_wait(v, id[i]);
		if (rc == 0)
			rc = vmm_evict(v, id[i], VMM_HOST);
		if (rc < 0) {
			CHECK_MSG(rc == -EIO && strstr(sp_last_error(), "obj"), "object %d: %d, %s",
			          i, rc, sp_last_error());
			errors++;
		}
	}
	CHECK_OK(vmm_sync(v));
	for (int k = 0; k < NOBJ; k++) { /* back, shuffled */
		int i = (k * 7 + 3) % NOBJ;
		int bad = vt_read_dev(v, id[i], 0, s, done, size_of(i) & ~(size_t)7, 100 + i);
		CHECK_MSG(bad == 0, "%s: object %d has %d words wrong", paths, i, bad);
	}
	CHECK_OK(vmm_sync(v));
	vt_check_accounting(v, ctx, 1);
	struct vmm_disk_stats_snapshot ds;
	vmm_disk_stats_get(v, &ds);
	*ndrives = ds.ndrives;
	for (int k = 0; k < ds.ndrives; k++)
		drive_bytes[k] = ds.drive_written[k] + ds.drive_read[k];
	CHECK_OK(dev_event_destroy(done));
	CHECK_OK(dev_stream_destroy(s));
	vmm_close(v);
	dev_close(ctx);
	return errors;
}

int main(void)
{
	const char *base = vt_tmpdir();
	char d[3][128], list[400];
	for (int k = 0; k < 3; k++) {
		snprintf(d[k], sizeof(d[k]), "%.100s/drive%d", base, k);
		CHECK(mkdir(d[k], 0700) == 0);
	}
	uint64_t b1[VMM_DISK_DRIVES_MAX], b3[VMM_DISK_DRIVES_MAX];
	int n1, n3;
	CHECK(round_trip(d[0], "", b1, &n1) == 0);
	CHECK(n1 == 1 && b1[0] > 0);
	snprintf(list, sizeof(list), "%s,%s,%s", d[0], d[1], d[2]);
	CHECK(round_trip(list, "", b3, &n3) == 0);
	CHECK(n3 == 3);
	uint64_t lo = b3[0], hi = b3[0], sum = 0;
	for (int k = 0; k < 3; k++) {
		lo = b3[k] < lo ? b3[k] : lo;
		hi = b3[k] > hi ? b3[k] : hi;
		sum += b3[k];
	}
	printf("one drive: %" PRIu64 " bytes; three: %" PRIu64 " %" PRIu64 " %" PRIu64 "\n", b1[0],
	       b3[0], b3[1], b3[2]);
	CHECK_MSG(hi <= lo + lo / 10, "drives unbalanced: %" PRIu64 "..%" PRIu64, lo, hi);
	CHECK(sum >= b1[0]); /* parts round up to whole pages per drive */
	/* drive 1 fails from its third write on: errors reported, nothing lost */
	uint64_t bf[VMM_DISK_DRIVES_MAX];
	int nf;
	int errors = round_trip(list, "1/write:3+:EIO", bf, &nf);
	printf("drive 1 failing from its third write: %d write-back(s) failed, every object "
	       "read back intact\n",
	       errors);
	CHECK(errors > 0);
	/* a bad drive prefix is refused */
	struct dev_ctx *ctx = vt_open_host(1, 64 * MiB);
	struct vmm_config c = vt_config(4 * MiB, 0, 4 * MiB);
	vt_config_disk(&c, list, 0, "x/write:1:EIO");
	struct vmm *v = NULL;
	CHECK(vmm_open(ctx, &c, &v) == -EINVAL && strstr(sp_last_error(), "SPILL_DISK_FAULT"));
	dev_close(ctx);
	for (int k = 0; k < 3; k++) /* the tiers' files are unnamed: nothing is left */
		CHECK_MSG(rmdir(d[k]) == 0, "%s: %s", d[k], strerror(errno));
	vt_rmdir(base);
	TEST_PASS();
}
