/* tests/vmm/test_disk_adv2.c — more adversarial checks of the disk tier
 * (vmm/disk.h, vmm/disk.c striping) and of the vmm over it. Soft checks:
 * "FAIL <case>" lines, exit 1 at the end. Run:
 * build/release/tests/vmm/test_disk_adv2 [case-substring]. */
#include "tests/vmm/vmm_test.h"
#include "vmm/disk.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdint.h>
#include <sys/stat.h>

static int failures;
static const char *cur = "";
#define SOFT(cond, ...)                                                          \
	do {                                                                     \
		if (!(cond)) {                                                   \
			failures++;                                              \
			printf("FAIL %s (line %d): %s: ", cur, __LINE__, #cond); \
			printf(__VA_ARGS__);                                     \
			printf("  [last error: %s]\n", sp_last_error());         \
		}                                                                \
	} while (0)

static char base[256], dirs[4][300], list3[1024];

static struct vmm_disk *open_path(const char *path, uint64_t cap, const char *fault, int *rcp)
{
	struct vmm_disk_config cfg = {
	    .path = path, .capacity = cap, .queue_depth = 4, .block = 16384, .fault = fault};
	struct vmm_disk *d = NULL;
	int rc = vmm_disk_open(&cfg, &d);
	if (rcp)
		*rcp = rc;
	if (rc == -ENOTSUP)
		TEST_SKIP("%s", sp_last_error());
	return rc ? NULL : d;
}

static int io(struct vmm_disk *d, int write, uint64_t e, void *p, size_t n)
{
	uint64_t t;
	int rc = write ? vmm_disk_write_async(d, e, p, n, &t) : vmm_disk_read_async(d, e, p, n, &t);
	if (rc)
		return rc;
	rc = vmm_disk_wait(d, t);
	vmm_disk_ticket_release(d, t);
	return rc;
}

/* Stats with 1 and 3 drives must agree: a done write counts before its
 * ticket is released, and a write released in flight counts once done. */
static void t_stats_consistency(void)
{
	const char *paths[2] = {dirs[0], list3};
	for (int i = 0; i < 2; i++) {
		struct vmm_disk *d = open_path(paths[i], 0, "", NULL);
		uint8_t buf[6 * 4096];
		memset(buf, 7, sizeof(buf));
		uint64_t e, t;
		CHECK_OK(vmm_disk_alloc(d, sizeof(buf), &e));
		CHECK_OK(vmm_disk_write_async(d, e, buf, sizeof(buf), &t));
		CHECK_OK(vmm_disk_wait(d, t));
		struct vmm_disk_stats_snapshot st;
		vmm_disk_stats(d, &st);
		printf("%d drive(s): a done write before release: writes %" PRIu64
		       " bytes_written %" PRIu64 "\n",
		       st.ndrives, st.writes, st.bytes_written);
		SOFT(st.writes == 1 && st.bytes_written == sizeof(buf),
		     "%d drive(s): completed write not counted until released\n", st.ndrives);
		vmm_disk_ticket_release(d, t);
		/* released in flight */
		CHECK_OK(vmm_disk_write_async(d, e, buf, sizeof(buf), &t));
		vmm_disk_ticket_release(d, t);
		int rc;
		while ((rc = vmm_disk_free(d, e)) == -EBUSY)
			usleep(1000);
		CHECK_OK(rc);
		vmm_disk_stats(d, &st);
		printf("%d drive(s): + a write released in flight: writes %" PRIu64
		       " bytes_written %" PRIu64 " (drives:",
		       st.ndrives, st.writes, st.bytes_written);
		for (int k = 0; k < st.ndrives; k++)
			printf(" %" PRIu64, st.drive_written[k]);
		printf(")\n");
		SOFT(st.writes == 2 && st.bytes_written == 2 * sizeof(buf),
		     "%d drive(s): a write released in flight is never counted\n", st.ndrives);
		vmm_disk_close(d);
	}
	/* one striped request failing on every drive: errors per request? */
	struct vmm_disk *d = open_path(list3, 0, "write:1:EIO", NULL);
	uint8_t buf[6 * 4096] = {0};
	uint64_t e;
	CHECK_OK(vmm_disk_alloc(d, sizeof(buf), &e));
	SOFT(io(d, 1, e, buf, sizeof(buf)) == -EIO, "EIO\n");
	struct vmm_disk_stats_snapshot st;
	vmm_disk_stats(d, &st);
	printf("one striped write failing on 3 drives: writes %" PRIu64 " errors %" PRIu64 "\n",
	       st.writes, st.errors);
	SOFT(st.errors == 1, "one failed request counted as %" PRIu64 " errors\n", st.errors);
	CHECK_OK(vmm_disk_free(d, e));
	vmm_disk_close(d);
}

/* After vmm_disk_free() returns -EBUSY the extent is still the caller's (as on
 * one drive): once its I/O is done it reads back, and a later free works. */
static void t_busy_then_read(void)
{
	const char *paths[2] = {dirs[0], NULL};
	char shm[1024];
	/* drive 0 on tmpfs (fast), drives 1, 2 on the disk: drive 0's part finishes
	 * first */
	char sd[64];
	snprintf(sd, sizeof(sd), "/dev/shm/spill-adv2-XXXXXX");
	CHECK(mkdtemp(sd));
	snprintf(shm, sizeof(shm), "%s,%s,%s", sd, dirs[1], dirs[2]);
	paths[1] = shm;
	for (int i = 0; i < 2; i++) {
		struct vmm_disk *d = open_path(paths[i], 0, "", NULL);
		enum { SZ = 6 << 20 };
		uint8_t *src = malloc(SZ), *dst = malloc(SZ);
		for (size_t j = 0; j < SZ; j++)
			src[j] = (uint8_t)(j * 7 + 1);
		int busy = 0, partial = 0, lost = 0;
		for (int it = 0; it < 60; it++) {
			uint64_t e, t;
			CHECK_OK(vmm_disk_alloc(d, SZ, &e));
			CHECK_OK(io(d, 1, e, src, SZ));
			struct vmm_disk_stats_snapshot a, b;
			vmm_disk_stats(d, &a);
			CHECK_OK(vmm_disk_read_async(d, e, dst, SZ, &t));
			usleep((useconds_t)(200 + it * 50));
			int rc = vmm_disk_free(d, e);
			vmm_disk_stats(d, &b);
			CHECK_OK(vmm_disk_wait(d, t));
			vmm_disk_ticket_release(d, t);
			if (rc == -EBUSY) {
				busy++;
				partial += b.used < a.used;
				memset(dst, 0, SZ);
				int r = io(d, 0, e, dst, SZ);
				if (r || memcmp(src, dst, SZ))
					lost++;
				if (lost == 1 && (r || memcmp(src, dst, SZ)))
					printf("  read after -EBUSY: rc %d (%s)\n", r,
					       sp_last_error());
				rc = vmm_disk_free(d, e);
				SOFT(rc == 0, "free after -EBUSY: %d\n", rc);
			} else
				SOFT(rc == 0, "free: %d\n", rc);
		}
		struct vmm_disk_stats_snapshot st;
		vmm_disk_stats(d, &st);
		printf("%d drive(s): %d of 60 frees -EBUSY, %d of them freed part of the extent, "
		       "%d extents unreadable after; used at end %" PRIu64 "\n",
		       st.ndrives, busy, partial, lost, st.used);
		SOFT(lost == 0 && partial == 0,
		     "%d drive(s): -EBUSY freed parts of the extent (%d) / lost data (%d)\n",
		     st.ndrives, partial, lost);
		SOFT(st.used == 0, "leak\n");
		free(src);
		free(dst);
		vmm_disk_close(d);
	}
	rmdir(sd);
}

/* A directory name longer than the tier's buffer must not be cut to another
 * (existing) directory. */
static void t_long_path(void)
{
	static char p[8192];
	int n = snprintf(p, sizeof(p), "%s", dirs[0]);
	while (n < 4095)
		p[n++] = '/';
	p[n] = 0;
	strcat(p, "typo-that-does-not-exist");
	struct stat sb;
	SOFT(stat(p, &sb) != 0, "exists?\n");
	int rc;
	struct vmm_disk *d = open_path(p, 0, "", &rc);
	printf("directory of %zu chars that does not exist: rc %d\n", strlen(p), rc);
	SOFT(rc != 0, "a %zu-char path naming no directory was accepted (cut to %s)\n", strlen(p),
	     dirs[0]);
	if (d)
		vmm_disk_close(d);
}

/* Fault rules for drives that do not exist, or that are never parsed. */
static void t_fault_prefix(void)
{
	const char *bad[] = {"7/bogus", "3/write:1:EIO", "1/write:0:EIO", "/write:1:EIO", "1/"};
	for (size_t i = 0; i < SP_ARRAY_SIZE(bad); i++) {
		int rc;
		struct vmm_disk *d = open_path(list3, 0, bad[i], &rc);
		printf("fault '%s' on 3 drives: rc %d\n", bad[i], rc);
		SOFT(rc == -EINVAL, "fault spec '%s' accepted on 3 drives\n", bad[i]);
		if (d)
			vmm_disk_close(d);
	}
	/* "/write:1:EIO" (no K): does it apply to drive 0 only, or to all? */
	int rc;
	struct vmm_disk *d = open_path(list3, 0, "/write:1:EIO", &rc);
	if (d) {
		uint8_t b[3 * 4096] = {0};
		uint64_t e;
		CHECK_OK(vmm_disk_alloc(d, sizeof(b), &e));
		rc = io(d, 1, e, b, sizeof(b));
		printf("  '/write:1:EIO' write: %d\n", rc);
		CHECK_OK(vmm_disk_free(d, e));
		vmm_disk_close(d);
	}
}

/* Sizes that overflow when rounded. */
static void t_alloc_overflow(void)
{
	struct vmm_disk *d = open_path(dirs[0], 0, "", NULL);
	size_t bad[] = {SIZE_MAX, SIZE_MAX - 4094};
	for (size_t i = 0; i < 2; i++) {
		uint64_t e, t;
		int rc = vmm_disk_alloc(d, bad[i], &e);
		SOFT(rc == -ENOSPC || rc == -EINVAL, "alloc(%zu) on 1 drive: %d\n", bad[i], rc);
		if (rc == 0) {
			struct vmm_disk_stats_snapshot st;
			vmm_disk_stats(d, &st);
			uint8_t b[16];
			int w = vmm_disk_write_async(d, e, b, 16, &t);
			printf("  alloc(%zu) gave extent %#" PRIx64 ", used %" PRIu64
			       ", write of 16 bytes: %d\n",
			       bad[i], e, st.used, w);
			CHECK_OK(vmm_disk_free(d, e));
		}
	}
	/* with some space used, a size just under 2^64 wraps the capacity check */
	uint64_t small, huge;
	CHECK_OK(vmm_disk_alloc(d, 8192, &small));
	int rc = vmm_disk_alloc(d, (size_t)0 - 4096, &huge);
	struct vmm_disk_stats_snapshot st;
	vmm_disk_stats(d, &st);
	printf("  after 8192: alloc(2^64-4096) on 1 drive: %d, used %" PRIu64 " capacity %" PRIu64
	       "\n",
	       rc, st.used, st.capacity);
	SOFT(rc == -ENOSPC || rc == -EINVAL, "alloc(2^64-4096) with 8192 used: %d\n", rc);
	if (rc == 0) {
		uint8_t b[8192];
		memset(b, 0x5a, sizeof(b));
		uint64_t other;
		int r2 = vmm_disk_alloc(d, 8192, &other);
		printf("  then alloc(8192): %d\n", r2);
		/* does writing the huge extent's first bytes clobber the small one? */
		memset(b, 0x11, sizeof(b));
		SOFT(io(d, 1, small, b, sizeof(b)) == 0, "write small\n");
		memset(b, 0x22, sizeof(b));
		int w = io(d, 1, huge, b, sizeof(b));
		memset(b, 0, sizeof(b));
		SOFT(io(d, 0, small, b, sizeof(b)) == 0, "read small\n");
		printf("  write into the huge extent: %d; small extent now starts %#x\n", w, b[0]);
		SOFT(b[0] == 0x11, "the huge extent overlaps the small one\n");
		if (vmm_disk_free(d, huge) < 0) {
		}
		if (r2 == 0)
			if (vmm_disk_free(d, other) < 0) {
			}
	}
	CHECK_OK(vmm_disk_free(d, small));
	vmm_disk_close(d);
}

/* Capacity split over drives: one-page extents must fill the whole reported
 * capacity, not drive 0's third of it. */
static void t_small_extents(void)
{
	struct vmm_disk *d = open_path(list3, 30 * 4096, "", NULL);
	struct vmm_disk_stats_snapshot st;
	vmm_disk_stats(d, &st);
	uint64_t e[64];
	int n = 0, rc = 0;
	while (n < 64 && (rc = vmm_disk_alloc(d, 4096, &e[n])) == 0)
		n++;
	struct vmm_disk_stats_snapshot st2;
	vmm_disk_stats(d, &st2);
	printf("capacity %" PRIu64 ": %d one-page extents fit (used %" PRIu64 "), then %d: %s\n",
	       st.capacity, n, st2.used, rc, sp_last_error());
	SOFT((uint64_t)n * 4096 == st.capacity,
	     "only %d one-page extents fit in a reported capacity of %" PRIu64 " (%" PRIu64
	     " used)\n",
	     n, st.capacity, st2.used);
	for (int i = 0; i < n; i++)
		CHECK_OK(vmm_disk_free(d, e[i]));
	/* two-page extents: drives 0 and 1 only */
	n = 0;
	while (n < 64 && vmm_disk_alloc(d, 8192, &e[n]) == 0)
		n++;
	printf("two-page extents: %d fit\n", n);
	SOFT((uint64_t)n * 8192 >= st.capacity - 8192, "only %d two-page extents fit\n", n);
	for (int i = 0; i < n; i++)
		CHECK_OK(vmm_disk_free(d, e[i]));
	vmm_disk_close(d);
	/* capacities below a page per drive */
	uint64_t caps[] = {2, 4096, 8192, 12288, 12289};
	for (size_t i = 0; i < SP_ARRAY_SIZE(caps); i++) {
		d = open_path(list3, caps[i], "", &rc);
		if (!d) {
			printf("capacity %" PRIu64 ": open %d\n", caps[i], rc);
			continue;
		}
		vmm_disk_stats(d, &st);
		printf("SPILL_DISK_MEM %" PRIu64 " on 3 drives: capacity %" PRIu64 "\n", caps[i],
		       st.capacity);
		SOFT(st.capacity <= caps[i], "capacity %" PRIu64 " > SPILL_DISK_MEM %" PRIu64 "\n",
		     st.capacity, caps[i]);
		SOFT(st.capacity + 3 * 4096 > caps[i],
		     "capacity %" PRIu64 " for SPILL_DISK_MEM %" PRIu64 "\n", st.capacity, caps[i]);
		vmm_disk_close(d);
	}
}

/* The vmm over a striped tier with SPILL_DISK_MEM: many one-page objects
 * written down; all fit in the reported capacity. */
static void t_vmm_small_objects(void)
{
	struct dev_ctx *ctx = vt_open_host(1, 64 << 20);
	struct vmm_config c = vt_config(1 << 20, 0, 1 << 20);
	vt_config_disk(&c, list3, 24 * 4096, "");
	struct vmm *v;
	CHECK_OK(vmm_open(ctx, &c, &v));
	enum { N = 24 };
	uint64_t id[N];
	int ok = 0, firstfail = -1, rc = 0;
	for (int i = 0; i < N; i++) {
		id[i] = vt_create(v, 4096, VMM_KIND_OPTIM, NULL);
		vt_write_host(v, id[i], 4096, 500 + i);
		rc = vmm_writeback(v, id[i], 1);
		if (rc == 0)
			rc = vmm_obj_wait(v, id[i]);
		if (rc == 0)
			rc = vmm_evict(v, id[i], VMM_HOST);
		if (rc == 0)
			ok++;
		else if (firstfail < 0) {
			firstfail = i;
			printf("object %d to disk: %d (%s)\n", i, rc, sp_last_error());
		}
	}
	uint64_t used, cap;
	CHECK_OK(vmm_place_usage(v, VMM_DISK, &used, &cap));
	printf("vmm: %d of %d one-page objects went to disk; disk used %" PRIu64 " of %" PRIu64
	       "\n",
	       ok, N, used, cap);
	SOFT(ok == N,
	     "vmm: %d of %d one-page objects fit in a %" PRIu64 "-byte disk tier (used %" PRIu64
	     ")\n",
	     ok, N, cap, used);
	for (int i = 0; i < N; i++)
		SOFT(vt_read_host(v, id[i], 4096, 500 + i) == 0, "object %d\n", i);
	vmm_close(v);
	dev_close(ctx);
}

/* The vmm over 3 drives, drive 1's first read failing: the acquire that reads
 * the object back reports -EIO naming it; a second acquire gets the bytes. */
static void t_vmm_read_fault(void)
{
	struct dev_ctx *ctx = vt_open_host(1, 64 << 20);
	struct vmm_config c = vt_config(1 << 20, 0, 4 << 20);
	vt_config_disk(&c, list3, 0, "1/read:1:EIO");
	struct vmm *v;
	CHECK_OK(vmm_open(ctx, &c, &v));
	enum { SZ = 5 * 4096 + 8 };
	uint64_t id = vt_create(v, SZ, VMM_KIND_OPTIM, "victim");
	vt_write_host(v, id, SZ, 42);
	CHECK_OK(vmm_writeback(v, id, 1));
	CHECK_OK(vmm_obj_wait(v, id));
	CHECK_OK(vmm_evict(v, id, VMM_HOST));
	void *p;
	struct dev_event *ready;
	int rc = vmm_acquire(v, id, VMM_HOST, VMM_READ, &p, &ready);
	printf("acquire with drive 1 failing its read: %d (%s)\n", rc, rc ? sp_last_error() : "");
	SOFT(rc == -EIO && strstr(sp_last_error(), "victim"), "acquire: %d\n", rc);
	if (rc == 0)
		CHECK_OK(vmm_release(v, id, VMM_HOST, NULL));
	int bad = vt_read_host(v, id, SZ, 42);
	SOFT(bad == 0, "%d words wrong after the failed read\n", bad);
	/* prefetch path */
	CHECK_OK(vmm_evict(v, id, VMM_HOST));
	CHECK_OK(vmm_sync(v));
	vt_check_accounting(v, ctx, 1);
	vmm_close(v);
	dev_close(ctx);
}

/* The simulated tier through the same entry points. */
static void t_sim(void)
{
	const char *text = "name = t\ndevice = T\ndevices = 1\nmemory = 1G\nflops = 1 TFLOP/s\n"
	                   "mem_bw = 100 GB/s\nh2d = 10 GB/s\nd2h = 10 GB/s\nhost_link = 10 GB/s\n"
	                   "p2p = 0\ndisk = 1 GB/s\ndisks = 3\n";
	struct dev_config dc;
	memset(&dc, 0, sizeof(dc));
	dc.backend = DEV_BACKEND_MODEL;
	dc.profile_text = text;
	struct dev_ctx *ctx = NULL;
	CHECK_OK(dev_open(&dc, &ctx));
	struct vmm_disk_config cfg = {.path = dirs[0],
	                              .capacity = 1 << 20,
	                              .queue_depth = 4,
	                              .block = 16384,
	                              .fault = "",
	                              .sim = ctx};
	struct vmm_disk *d = NULL;
	CHECK_OK(vmm_disk_open(&cfg, &d));
	uint64_t e, e2, t;
	int rc = vmm_disk_alloc(d, SIZE_MAX, &e);
	SOFT(rc == -ENOSPC || rc == -EINVAL, "sim alloc(SIZE_MAX): %d\n", rc);
	if (rc == 0)
		CHECK_OK(vmm_disk_free(d, e));
	SOFT(vmm_disk_alloc(d, 0, &e) == -EINVAL, "sim alloc(0)\n");
	SOFT(vmm_disk_alloc(d, (1 << 20) + 1, &e) == -ENOSPC, "sim alloc past capacity\n");
	CHECK_OK(vmm_disk_alloc(d, 5000, &e));
	SOFT(vmm_disk_write_async(d, e, NULL, 8193, &t) == -EINVAL, "sim write past extent\n");
	SOFT(vmm_disk_write_async(d, e, NULL, 0, &t) == -EINVAL, "sim write 0 bytes\n");
	rc = vmm_disk_write_async(d, e, NULL, 8192, &t);
	SOFT(rc == 0, "sim write: %d\n", rc);
	if (rc == 0) {
		rc = vmm_disk_free(d, e);
		SOFT(rc == -EBUSY, "sim free while in flight: %d\n", rc);
		SOFT(vmm_disk_wait(d, t) == 0, "sim wait\n");
		SOFT(vmm_disk_poll(d, t) == 0, "sim poll done\n");
		vmm_disk_ticket_release(d, t);
		SOFT(vmm_disk_poll(d, t) == -EINVAL, "sim poll released\n");
		SOFT(vmm_disk_wait(d, t) == -EINVAL, "sim wait released\n");
	}
	if (rc != 0 || vmm_disk_free(d, e) != -EINVAL) /* -EBUSY above left it */
		SOFT(vmm_disk_free(d, e) == 0, "sim free\n");
	SOFT(vmm_disk_free(d, e) == -EINVAL, "sim double free\n");
	CHECK_OK(vmm_disk_alloc(d, 4096, &e2));
	SOFT(e2 != e, "sim handle reused as is\n");
	SOFT(vmm_disk_free(d, e) == -EINVAL, "sim stale free after reuse\n");
	SOFT(vmm_disk_read_async(d, e, NULL, 10, &t) == -EINVAL, "sim stale read after reuse\n");
	SOFT(vmm_disk_poll(d, 0) == -EINVAL, "sim ticket 0 (never given) polls %d\n",
	     vmm_disk_poll(d, 0));
	SOFT(vmm_disk_poll(d, 12345) == -EINVAL, "sim ticket 12345\n");
	rc = vmm_disk_write_async(d, e2, NULL, 10, &t);
	if (rc == 0) {
		CHECK_OK(vmm_disk_wait(d, t));
		vmm_disk_ticket_release(d, t);
	}
	rc = vmm_disk_read_async(d, e2, NULL, 4096, &t);
	if (rc == 0) {
		CHECK_OK(vmm_disk_wait(d, t));
		vmm_disk_ticket_release(d, t);
	}
	struct vmm_disk_stats_snapshot st;
	vmm_disk_stats(d, &st);
	uint64_t sw = 0, sr = 0;
	for (int k = 0; k < st.ndrives; k++)
		sw += st.drive_written[k], sr += st.drive_read[k];
	printf("sim: ndrives %d writes %" PRIu64 " bytes_written %" PRIu64 " (drives %" PRIu64
	       ") reads %" PRIu64 " bytes_read %" PRIu64 " (drives %" PRIu64 ") used %" PRIu64
	       " capacity %" PRIu64 "\n",
	       st.ndrives, st.writes, st.bytes_written, sw, st.reads, st.bytes_read, sr, st.used,
	       st.capacity);
	SOFT(st.ndrives == 3 && st.writes == 2 && st.bytes_written == 8192 + 10 && st.reads == 1 &&
	         st.bytes_read == 4096 && st.used == 4096 && st.capacity == 1 << 20,
	     "sim stats\n");
	if (vmm_disk_free(d, e2) != 0)
		printf("sim: extent e2 was freed through the stale handle e\n");
	vmm_disk_close(d);
	/* sim with several directories: ndrives is still the profile's */
	char two[700];
	snprintf(two, sizeof(two), "%s,%s", dirs[0], dirs[1]);
	cfg.path = two;
	rc = vmm_disk_open(&cfg, &d);
	printf("sim with 2 directories: %d\n", rc);
	if (rc == 0)
		vmm_disk_close(d);
	snprintf(two, sizeof(two), "%s,,%s", dirs[0], dirs[1]);
	rc = vmm_disk_open(&cfg, &d);
	SOFT(rc == -EINVAL, "sim with an empty entry: %d\n", rc);
	if (rc == 0)
		vmm_disk_close(d);
	dev_close(ctx);
}

int main(int argc, char **argv)
{
	const char *tmp = getenv("TMPDIR");
	snprintf(base, sizeof(base), "%s/spill-adv2-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	CHECK(mkdtemp(base));
	for (int k = 0; k < 4; k++) {
		snprintf(dirs[k], sizeof(dirs[k]), "%s/d%d", base, k);
		CHECK(mkdir(dirs[k], 0700) == 0);
	}
	snprintf(list3, sizeof(list3), "%s,%s,%s", dirs[0], dirs[1], dirs[2]);
	struct {
		const char *name;
		void (*fn)(void);
	} cases[] = {{"stats_consistency", t_stats_consistency},
	             {"busy_then_read", t_busy_then_read},
	             {"long_path", t_long_path},
	             {"fault_prefix", t_fault_prefix},
	             {"alloc_overflow", t_alloc_overflow},
	             {"small_extents", t_small_extents},
	             {"vmm_small_objects", t_vmm_small_objects},
	             {"vmm_read_fault", t_vmm_read_fault},
	             {"sim", t_sim}};
	for (size_t i = 0; i < SP_ARRAY_SIZE(cases); i++) {
		if (argc > 1 && !strstr(cases[i].name, argv[1]))
			continue;
		cur = cases[i].name;
		printf("--- %s\n", cur);
		fflush(stdout);
		cases[i].fn();
		fflush(stdout);
	}
	char cmd[600];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", base);
	if (system(cmd) != 0)
		printf("could not remove %s\n", base);
	if (failures) {
		printf("%d failure(s)\n", failures);
		return 1;
	}
	TEST_PASS();
}
