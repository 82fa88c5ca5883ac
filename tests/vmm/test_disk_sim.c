/* tests/vmm/test_disk_sim.c — the disk tier on the model backend (DESIGN §10:
 * the disk is a tier of the plan, so what-if studies must simulate it).
 *
 * A model-backend vmm with a disk tier opens a simulated one (no file created,
 * no byte moved: host pointers there are address space only). Objects written
 * back to disk and read again take the virtual time of their bytes over the
 * profile's drives: with 1 drive at 1 GB/s, 8 x 64 MiB down take 8 x 64 MiB /
 * 1 GB/s; with 3 drives a third of that, each drive carrying a third of the
 * bytes (within 10%). Bytes are counted per drive and in the vmm's
 * host->disk / disk->host links. A directory that does not exist is refused
 * (and not created); SPILL_DISK_FAULT is refused (nothing real to fault);
 * capacity is enforced (-ENOSPC past it). */
#include "tests/vmm/vmm_test.h"

#include <errno.h>
#include <math.h>
#include <sys/stat.h>

#define MiB  (1024ull * 1024)
#define OBJ  (64 * MiB)
#define NOBJ 8

static struct dev_ctx *open_drives(int ndisks)
{
	char text[512];
	snprintf(text, sizeof(text),
	         "name = t\ndevice = T\ndevices = 1\nmemory = 1G\nflops = 1 TFLOP/s\n"
	         "mem_bw = 100 GB/s\nh2d = 10 GB/s\nd2h = 10 GB/s\nhost_link = 10 GB/s\n"
	         "p2p = 0\ndisk = 1 GB/s\ndisks = %d\n",
	         ndisks);
	struct dev_config dc;
	memset(&dc, 0, sizeof(dc));
	dc.backend = DEV_BACKEND_MODEL;
	dc.profile_text = text;
	struct dev_ctx *ctx = NULL;
	CHECK_OK(dev_open(&dc, &ctx));
	CHECK(dev_disk_count(ctx) == ndisks);
	return ctx;
}

static struct vmm_config disk_config(const char *dir, uint64_t capacity, const char *fault)
{
	struct vmm_config c = vt_config(4 * OBJ, 0, 16 * OBJ);
	c.use_disk = 1;
	c.disk.path = dir;
	c.disk.capacity = capacity;
	c.disk.queue_depth = 8;
	c.disk.block = 64 << 10;
	c.disk.fault = fault;
	return c;
}

/* Writes NOBJ objects down and reads them back; returns the virtual seconds
 * of each direction. */
static void round_trip(int ndisks, const char *dir, double *down, double *up)
{
	struct dev_ctx *ctx = open_drives(ndisks);
	struct vmm_config c = disk_config(dir, 0, "");
	struct vmm *v;
	CHECK_OK(vmm_open(ctx, &c, &v));
	uint64_t id[NOBJ];
	for (int i = 0; i < NOBJ; i++) {
		struct vmm_obj_desc d = {OBJ, VMM_KIND_OPTIM, NULL, 0, 0};
		CHECK_OK(vmm_obj_create(v, &d, &id[i]));
		void *p;
		struct dev_event *ready;
		CHECK_OK(vmm_acquire(v, id[i], VMM_HOST, VMM_OVERWRITE, &p, &ready));
		CHECK_OK(vmm_release(v, id[i], VMM_HOST, NULL));
	}
	double t0 = dev_now(ctx);
	for (int i = 0; i < NOBJ; i++)
		CHECK_OK(vmm_writeback(v, id[i], 1));
	CHECK_OK(vmm_sync(v));
	*down = dev_now(ctx) - t0;
	for (int i = 0; i < NOBJ; i++) {
		CHECK_OK(vmm_evict(v, id[i], VMM_HOST));
		struct vmm_obj_info in;
		CHECK_OK(vmm_obj_info(v, id[i], &in));
		CHECK_MSG(in.valid_mask == VMM_INFO_DISK, "object %d: copies %#x, want disk only",
		          i, in.valid_mask);
	}
	t0 = dev_now(ctx);
	for (int i = 0; i < NOBJ; i++)
		CHECK_OK(vmm_prefetch(v, id[i], VMM_HOST));
	CHECK_OK(vmm_sync(v));
	*up = dev_now(ctx) - t0;
	CHECK(vmm_xfer_bytes(v, VMM_XFER_H2DISK) == NOBJ * OBJ);
	CHECK(vmm_xfer_bytes(v, VMM_XFER_DISK2H) == NOBJ * OBJ);
	struct vmm_disk_stats_snapshot ds;
	vmm_disk_stats_get(v, &ds);
	CHECK(ds.ndrives == ndisks && ds.bytes_written == NOBJ * OBJ &&
	      ds.bytes_read == NOBJ * OBJ);
	uint64_t lo = UINT64_MAX, hi = 0, sum = 0;
	for (int k = 0; k < ndisks; k++) {
		uint64_t b = ds.drive_written[k];
		lo = b < lo ? b : lo;
		hi = b > hi ? b : hi;
		sum += b;
		CHECK(ds.drive_read[k] == ds.drive_written[k]);
	}
	CHECK(sum == NOBJ * OBJ);
	CHECK_MSG(hi <= lo * 1.1, "drives unbalanced: %" PRIu64 " .. %" PRIu64 " bytes", lo, hi);
	printf("%d drive(s) at 1 GB/s: %d x 64 MiB down in %.4f s, up in %.4f s; per drive "
	       "%" PRIu64 "..%" PRIu64 " bytes\n",
	       ndisks, NOBJ, *down, *up, lo, hi);
	vmm_close(v);
	dev_close(ctx);
}

int main(void)
{
	const char *dir = vt_tmpdir();
	double d1, u1, d3, u3;
	round_trip(1, dir, &d1, &u1);
	round_trip(3, dir, &d3, &u3);
	double want = (double)(NOBJ * OBJ) / 1e9;
	CHECK_MSG(fabs(d1 - want) < 0.01 * want && fabs(u1 - want) < 0.01 * want,
	          "one drive: %.4f s down, %.4f s up, want %.4f", d1, u1, want);
	CHECK_MSG(fabs(d3 - want / 3) < 0.02 * want && fabs(u3 - want / 3) < 0.02 * want,
	          "three drives: %.4f s down, %.4f s up, want %.4f", d3, u3, want / 3);
	/* nothing was created in the directory */
	DIR *dd = opendir(dir);
	CHECK(dd != NULL);
	int files = 0;
	for (struct dirent *e; (e = readdir(dd));)
		files += e->d_name[0] != '.';
	closedir(dd);
	CHECK_MSG(files == 0, "the simulated tier left %d file(s) in %s", files, dir);

	struct dev_ctx *ctx = open_drives(2);
	struct vmm *v = NULL;
	char missing[300];
	snprintf(missing, sizeof(missing), "%s/not-there", dir);
	struct vmm_config c = disk_config(missing, 0, "");
	CHECK(vmm_open(ctx, &c, &v) < 0 && strstr(sp_last_error(), "not-there"));
	struct stat sb;
	CHECK_MSG(stat(missing, &sb) < 0, "%s was created", missing);
	c = disk_config(dir, 0, "write:1:EIO");
	CHECK(vmm_open(ctx, &c, &v) == -EINVAL && strstr(sp_last_error(), "SPILL_DISK_FAULT"));
	/* capacity: two objects fit, the third does not */
	c = disk_config(dir, 2 * OBJ, "");
	CHECK_OK(vmm_open(ctx, &c, &v));
	uint64_t id[3];
	for (int i = 0; i < 3; i++) {
		struct vmm_obj_desc d = {OBJ, VMM_KIND_OPTIM, NULL, 0, 0};
		CHECK_OK(vmm_obj_create(v, &d, &id[i]));
		void *p;
		struct dev_event *ready;
		CHECK_OK(vmm_acquire(v, id[i], VMM_HOST, VMM_OVERWRITE, &p, &ready));
		CHECK_OK(vmm_release(v, id[i], VMM_HOST, NULL));
	}
	CHECK_OK(vmm_writeback(v, id[0], 1));
	CHECK_OK(vmm_writeback(v, id[1], 1));
	CHECK(vmm_writeback(v, id[2], 1) == -ENOSPC);
	CHECK_OK(vmm_sync(v));
	vmm_close(v);
	dev_close(ctx);
	vt_rmdir(dir);
	printf("missing directory, fault knob and capacity refused: ok\n");
	TEST_PASS();
}
