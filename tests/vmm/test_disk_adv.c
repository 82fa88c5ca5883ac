/* tests/vmm/test_disk_adv.c — adversarial checks of the disk tier's contract
 * (vmm/disk.h, striped over several directories by vmm/disk.c). Soft checks:
 * every failed expectation is printed ("FAIL <case>: ...") and the test exits 1
 * at the end; the rest keeps running. Run: build/release/tests/vmm/test_disk_adv
 * [case-substring]. */
#include "common/error.h"
#include "tests/test.h"
#include "vmm/disk.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

static char base[256], dirs[20][300], list3[1024];

static void fill(uint8_t *p, size_t n, uint64_t seed)
{
	uint64_t s = seed * 0x9e3779b97f4a7c15ull | 1;
	for (size_t i = 0; i < n; i++) {
		s ^= s << 13;
		s ^= s >> 7;
		s ^= s << 17;
		p[i] = (uint8_t)s;
	}
}

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

static int wr(struct vmm_disk *d, uint64_t e, const void *p, size_t n)
{
	uint64_t t;
	int rc = vmm_disk_write_async(d, e, p, n, &t);
	if (rc)
		return rc;
	rc = vmm_disk_wait(d, t);
	vmm_disk_ticket_release(d, t);
	return rc;
}
static int rd(struct vmm_disk *d, uint64_t e, void *p, size_t n)
{
	uint64_t t;
	int rc = vmm_disk_read_async(d, e, p, n, &t);
	if (rc)
		return rc;
	rc = vmm_disk_wait(d, t);
	vmm_disk_ticket_release(d, t);
	return rc;
}

/* Sizes around every boundary, on 1, 2, 3 and 5 drives; prefixes. */
static void t_sizes(void)
{
	static const size_t sizes[] = {1,
	                               4095,
	                               4096,
	                               4097,
	                               2 * 4096,
	                               3 * 4096,
	                               3 * 4096 + 1,
	                               4 * 4096,
	                               5 * 4096 - 1,
	                               7 * 4096 + 3,
	                               16384 * 3 + 1,
	                               100000,
	                               (8u << 20) + 4097};
	for (int nd = 1; nd <= 5; nd++) {
		if (nd == 4)
			continue;
		char path[2048] = "";
		for (int k = 0; k < nd; k++) {
			strcat(path, dirs[k]);
			if (k + 1 < nd)
				strcat(path, ",");
		}
		struct vmm_disk *d = open_path(path, 0, "", NULL);
		SOFT(d, "open %d drives\n", nd);
		if (!d)
			continue;
		for (size_t i = 0; i < SP_ARRAY_SIZE(sizes); i++) {
			size_t n = sizes[i];
			uint8_t *src = malloc(n + 8192), *dst = malloc(n + 8192);
			fill(src, n, n + nd);
			uint64_t e;
			int rc = vmm_disk_alloc(d, n, &e);
			SOFT(rc == 0, "alloc %zu on %d drives: %d\n", n, nd, rc);
			if (rc)
				continue;
			rc = wr(d, e, src, n);
			SOFT(rc == 0, "write %zu on %d drives: %d\n", n, nd, rc);
			memset(dst, 0xee, n + 1);
			rc = rd(d, e, dst, n);
			SOFT(rc == 0 && !memcmp(src, dst, n) && dst[n] == 0xee,
			     "read %zu on %d drives: rc %d\n", n, nd, rc);
			/* prefixes of the extent */
			size_t pre[] = {1, 10, 4095, 4096, 4097, 8191, 8193, 12289, n / 2, n - 1};
			for (size_t j = 0; j < SP_ARRAY_SIZE(pre); j++) {
				if (pre[j] == 0 || pre[j] >= n)
					continue;
				memset(dst, 0xee, n + 1);
				rc = rd(d, e, dst, pre[j]);
				SOFT(rc == 0 && !memcmp(src, dst, pre[j]) && dst[pre[j]] == 0xee,
				     "prefix read %zu of %zu on %d drives: rc %d\n", pre[j], n, nd,
				     rc);
			}
			/* a shorter write, then read of the same prefix */
			if (n > 4097) {
				size_t m = n / 3 + 1;
				fill(src, m, 999 + n);
				rc = wr(d, e, src, m);
				SOFT(rc == 0, "short write %zu of %zu: %d\n", m, n, rc);
				memset(dst, 0xee, n + 1);
				rc = rd(d, e, dst, m);
				SOFT(rc == 0 && !memcmp(src, dst, m),
				     "short write %zu of %zu then read on %d drives: rc %d\n", m, n,
				     nd, rc);
			}
			/* I/O past the extent's rounded size */
			size_t r = (n + 4095) & ~(size_t)4095;
			uint64_t t;
			rc = vmm_disk_write_async(d, e, src, r + 1, &t);
			SOFT(rc == -EINVAL, "write %zu into extent of %zu: %d\n", r + 1, n, rc);
			if (rc == 0) {
				int w_ = vmm_disk_wait(d, t);
				(void)w_;
				vmm_disk_ticket_release(d, t);
			}
			/* exactly the rounded size is allowed */
			rc = wr(d, e, src, r);
			SOFT(rc == 0, "write rounded %zu into extent of %zu on %d drives: %d\n", r,
			     n, nd, rc);
			rc = vmm_disk_free(d, e);
			SOFT(rc == 0, "free: %d\n", rc);
			free(src);
			free(dst);
		}
		struct vmm_disk_stats_snapshot st;
		vmm_disk_stats(d, &st);
		SOFT(st.used == 0 && st.ndrives == nd, "used %" PRIu64 " ndrives %d (%d)\n",
		     st.used, st.ndrives, nd);
		vmm_disk_close(d);
	}
}

/* Stats: requests counted once, bytes as asked, per drive arrays sum. */
static void t_stats(void)
{
	struct vmm_disk *d = open_path(list3, 0, "", NULL);
	if (!d)
		return;
	uint8_t buf[5 * 4096];
	fill(buf, sizeof(buf), 3);
	uint64_t e, t;
	CHECK_OK(vmm_disk_alloc(d, sizeof(buf), &e));
	CHECK_OK(vmm_disk_write_async(d, e, buf, 10000, &t));
	SOFT(vmm_disk_wait(d, t) == 0, "wait\n");
	SOFT(vmm_disk_wait(d, t) == 0, "wait again\n");
	SOFT(vmm_disk_poll(d, t) == 0, "poll\n");
	SOFT(vmm_disk_poll(d, t) == 0, "poll again\n");
	vmm_disk_ticket_release(d, t);
	struct vmm_disk_stats_snapshot st;
	vmm_disk_stats(d, &st);
	SOFT(st.writes == 1 && st.bytes_written == 10000,
	     "after one write of 10000 polled 4 times: writes %" PRIu64 " bytes %" PRIu64 "\n",
	     st.writes, st.bytes_written);
	/* a write released in flight, never polled */
	CHECK_OK(vmm_disk_write_async(d, e, buf, sizeof(buf), &t));
	vmm_disk_ticket_release(d, t);
	CHECK_OK(vmm_disk_read_async(d, e, buf, 4096, &t)); /* behind it */
	SOFT(vmm_disk_wait(d, t) == 0, "read\n");
	vmm_disk_ticket_release(d, t);
	for (int i = 0; i < 100; i++) {
		vmm_disk_stats(d, &st);
		if (st.writes == 2)
			break;
		usleep(10000);
	}
	SOFT(st.writes == 2 && st.bytes_written == 10000 + sizeof(buf) && st.reads == 1 &&
	         st.bytes_read == 4096,
	     "after a released write: writes %" PRIu64 " bytes_written %" PRIu64 " reads %" PRIu64
	     " bytes_read %" PRIu64 "\n",
	     st.writes, st.bytes_written, st.reads, st.bytes_read);
	uint64_t sw = 0, sr = 0;
	for (int k = 0; k < st.ndrives; k++)
		sw += st.drive_written[k], sr += st.drive_read[k];
	printf("stats: written %" PRIu64 " (drives %" PRIu64 ") read %" PRIu64 " (drives %" PRIu64
	       ")\n",
	       st.bytes_written, sw, st.bytes_read, sr);
	CHECK_OK(vmm_disk_free(d, e));
	vmm_disk_close(d);
}

/* Handles: double free, stale extents and tickets after slot reuse, released
 * tickets, tickets as extents. */
static void t_handles(void)
{
	struct vmm_disk *d = open_path(list3, 0, "", NULL);
	if (!d)
		return;
	uint8_t buf[3 * 4096];
	uint64_t e, e2, t, t2;
	CHECK_OK(vmm_disk_alloc(d, sizeof(buf), &e));
	SOFT(vmm_disk_free(d, e) == 0, "free\n");
	SOFT(vmm_disk_free(d, e) == -EINVAL, "double free\n");
	CHECK_OK(vmm_disk_alloc(d, sizeof(buf), &e2));
	SOFT(e2 != e, "handle reused\n");
	SOFT(vmm_disk_free(d, e) == -EINVAL, "stale free after reuse\n");
	SOFT(vmm_disk_write_async(d, e, buf, 10, &t) == -EINVAL, "stale write after reuse\n");
	SOFT(vmm_disk_read_async(d, e, buf, 10, &t) == -EINVAL, "stale read after reuse\n");
	SOFT(vmm_disk_free(d, e2 + (1ull << 32)) == -EINVAL, "future generation\n");
	SOFT(vmm_disk_free(d, e2 & 0xffffffffull) == -EINVAL || (e2 >> 32) == 0, "gen 0\n");
	SOFT(vmm_disk_free(d, (e2 & ~0xffffffffull) | 0xffffffffull) == -EINVAL, "slot max\n");
	SOFT(vmm_disk_free(d, UINT64_MAX) == -EINVAL, "UINT64_MAX\n");
	CHECK_OK(vmm_disk_write_async(d, e2, buf, sizeof(buf), &t));
	CHECK_OK(vmm_disk_wait(d, t));
	vmm_disk_ticket_release(d, t);
	SOFT(vmm_disk_poll(d, t) == -EINVAL, "poll released\n");
	SOFT(vmm_disk_wait(d, t) == -EINVAL, "wait released\n");
	vmm_disk_ticket_release(d, t); /* twice: warns */
	CHECK_OK(vmm_disk_write_async(d, e2, buf, sizeof(buf), &t2));
	SOFT(t2 != t, "ticket reused\n");
	SOFT(vmm_disk_poll(d, t) == -EINVAL, "stale ticket after reuse: poll\n");
	SOFT(vmm_disk_wait(d, t) == -EINVAL, "stale ticket after reuse: wait\n");
	vmm_disk_ticket_release(d, t); /* stale release must not drop t2 */
	SOFT(vmm_disk_wait(d, t2) == 0, "t2 after stale release of t\n");
	SOFT(vmm_disk_poll(d, t2) == 0, "t2 poll\n");
	vmm_disk_ticket_release(d, t2);
	/* release in flight then wait: -EINVAL, not a hang */
	CHECK_OK(vmm_disk_write_async(d, e2, buf, sizeof(buf), &t));
	vmm_disk_ticket_release(d, t);
	SOFT(vmm_disk_wait(d, t) == -EINVAL, "wait after release in flight\n");
	int rc;
	while ((rc = vmm_disk_free(d, e2)) == -EBUSY)
		usleep(1000);
	SOFT(rc == 0, "free after released write: %d\n", rc);
	struct vmm_disk_stats_snapshot st;
	vmm_disk_stats(d, &st);
	SOFT(st.used == 0, "used %" PRIu64 "\n", st.used);
	vmm_disk_close(d);
}

/* Free while in flight: -EBUSY, then free works, nothing leaks. Repeated with
 * random timings on 3 drives. */
static void t_busy_free(void)
{
	struct vmm_disk *d = open_path(list3, 0, "", NULL);
	if (!d)
		return;
	enum { SZ = 3 << 20 };
	uint8_t *buf = malloc(SZ);
	fill(buf, SZ, 7);
	int busy = 0, weird = 0;
	for (int it = 0; it < 200; it++) {
		uint64_t e, t;
		size_t n = 4096 * (1 + (size_t)(it * 37) % 700);
		CHECK_OK(vmm_disk_alloc(d, n, &e));
		CHECK_OK(vmm_disk_write_async(d, e, buf, n, &t));
		if (it % 3)
			usleep((useconds_t)(it * 13 % 400));
		int rc = vmm_disk_free(d, e);
		if (rc == -EBUSY) {
			busy++;
			CHECK_OK(vmm_disk_wait(d, t));
			vmm_disk_ticket_release(d, t);
			rc = vmm_disk_free(d, e);
			if (rc != 0) {
				weird++;
				SOFT(rc == 0, "free after -EBUSY and wait (size %zu): %d\n", n, rc);
			}
		} else {
			SOFT(rc == 0, "free in flight: %d\n", rc);
			int w = vmm_disk_wait(d, t);
			(void)w;
			vmm_disk_ticket_release(d, t);
		}
	}
	struct vmm_disk_stats_snapshot st;
	vmm_disk_stats(d, &st);
	printf("busy-free: %d of 200 frees were -EBUSY, %d failed after; used %" PRIu64 "\n", busy,
	       weird, st.used);
	SOFT(st.used == 0, "leak: used %" PRIu64 " after freeing everything\n", st.used);
	free(buf);
	vmm_disk_close(d);
}

/* Capacity split over drives. */
static void t_capacity(void)
{
	int rc;
	struct vmm_disk_stats_snapshot st;
	uint64_t e, e2;
	/* 16 pages over 3 drives: stats say 65536; an extent of 65536 fits? */
	struct vmm_disk *d = open_path(list3, 65536, "", NULL);
	if (d) {
		vmm_disk_stats(d, &st);
		printf("capacity 65536 on 3 drives: stats capacity %" PRIu64 "\n", st.capacity);
		SOFT(st.capacity <= 65536, "capacity %" PRIu64 " > 65536\n", st.capacity);
		rc = vmm_disk_alloc(d, st.capacity, &e);
		SOFT(rc == 0, "alloc of the whole reported capacity %" PRIu64 ": %d\n", st.capacity,
		     rc);
		if (rc == 0)
			CHECK_OK(vmm_disk_free(d, e));
		/* fill with pages: the sum reached equals the capacity */
		uint64_t n = 0, ex[64];
		while (n < 64 && vmm_disk_alloc(d, 4096, &ex[n]) == 0)
			n++;
		vmm_disk_stats(d, &st);
		printf("  one-page extents: %" PRIu64 " fit, used %" PRIu64 "\n", n, st.used);
		SOFT(st.used <= st.capacity, "used %" PRIu64 " > capacity %" PRIu64 "\n", st.used,
		     st.capacity);
		for (uint64_t i = 0; i < n; i++)
			CHECK_OK(vmm_disk_free(d, ex[i]));
		vmm_disk_close(d);
	}
	/* a capacity smaller than a page per drive must not become "free space" */
	d = open_path(list3, 8192, "", &rc);
	if (d) {
		vmm_disk_stats(d, &st);
		printf("capacity 8192 on 3 drives: stats capacity %" PRIu64 "\n", st.capacity);
		SOFT(st.capacity <= 8192, "capacity 8192 reported as %" PRIu64 "\n", st.capacity);
		rc = vmm_disk_alloc(d, 1 << 20, &e);
		SOFT(rc == -ENOSPC, "alloc 1 MiB with capacity 8192: %d\n", rc);
		if (rc == 0)
			CHECK_OK(vmm_disk_free(d, e));
		vmm_disk_close(d);
	} else
		printf("capacity 8192 on 3 drives: open %d (%s)\n", rc, sp_last_error());
	d = open_path(list3, 2, "", &rc);
	if (d) {
		vmm_disk_stats(d, &st);
		printf("capacity 2 on 3 drives: stats capacity %" PRIu64 "\n", st.capacity);
		rc = vmm_disk_alloc(d, 1 << 20, &e);
		SOFT(rc == -ENOSPC, "alloc 1 MiB with capacity 2: %d\n", rc);
		if (rc == 0)
			CHECK_OK(vmm_disk_free(d, e));
		vmm_disk_close(d);
	} else
		printf("capacity 2 on 3 drives: open %d (%s)\n", rc, sp_last_error());
	/* single drive: capacity 5000 */
	d = open_path(dirs[0], 5000, "", &rc);
	if (d) {
		vmm_disk_stats(d, &st);
		printf("capacity 5000 on 1 drive: stats capacity %" PRIu64 "\n", st.capacity);
		rc = vmm_disk_alloc(d, 8192, &e);
		SOFT(rc == -ENOSPC || st.capacity >= 8192, "alloc 8192 with capacity 5000: %d\n",
		     rc);
		if (rc == 0)
			CHECK_OK(vmm_disk_free(d, e));
		vmm_disk_close(d);
	}
	/* overflowing sizes */
	d = open_path(list3, 0, "", NULL);
	if (d) {
		size_t bad[] = {SIZE_MAX, SIZE_MAX - 4094, SIZE_MAX / 2, (size_t)1 << 62};
		for (size_t i = 0; i < SP_ARRAY_SIZE(bad); i++) {
			rc = vmm_disk_alloc(d, bad[i], &e);
			SOFT(rc == -ENOSPC || rc == -EINVAL, "alloc %zu: %d\n", bad[i], rc);
			if (rc == 0)
				CHECK_OK(vmm_disk_free(d, e));
		}
		vmm_disk_close(d);
	}
	/* huge capacity, huge extent: accounting in 64 bits */
	d = open_path(list3, 1ull << 50, "", NULL);
	if (d) {
		uint64_t big = (1ull << 45) + 3 * 4096 + 1;
		rc = vmm_disk_alloc(d, big, &e);
		SOFT(rc == 0, "alloc 2^45 with capacity 2^50: %d\n", rc);
		rc = vmm_disk_alloc(d, 4096, &e2);
		vmm_disk_stats(d, &st);
		SOFT(st.used == (1ull << 45) + 4 * 4096 + 4096,
		     "used %" PRIu64 " after 2^45+12289 and 4096\n", st.used);
		uint8_t b[4096] = {1, 2, 3};
		int w = wr(d, e2, b, 4096);
		SOFT(w == 0, "write small extent next to a 2^45 one: %d\n", w);
		vmm_disk_close(d);
	}
}

/* Fault injection per drive. */
static void t_faults(void)
{
	int rc;
	struct vmm_disk_stats_snapshot st;
	uint8_t src[6 * 4096], dst[6 * 4096];
	fill(src, sizeof(src), 11);
	uint64_t e;
	struct vmm_disk *d = open_path(list3, 0, "1/write:1:EIO", NULL);
	SOFT(d, "open with 1/write:1:EIO\n");
	if (d) {
		CHECK_OK(vmm_disk_alloc(d, sizeof(src), &e));
		rc = wr(d, e, src, sizeof(src));
		SOFT(rc == -EIO, "striped write with drive 1 failing: %d\n", rc);
		vmm_disk_stats(d, &st);
		printf("after a failed write: writes %" PRIu64 " bytes_written %" PRIu64
		       " errors %" PRIu64 " drive_written %" PRIu64 " %" PRIu64 " %" PRIu64 "\n",
		       st.writes, st.bytes_written, st.errors, st.drive_written[0],
		       st.drive_written[1], st.drive_written[2]);
		SOFT(st.writes == 0 && st.bytes_written == 0, "failed write counted\n");
		SOFT(st.errors == 1, "errors %" PRIu64 " after one failed request\n", st.errors);
		rc = rd(d, e, dst, sizeof(dst)); /* bytes undefined, but the read works */
		SOFT(rc == 0, "read after a failed write: %d\n", rc);
		rc = wr(d, e, src, sizeof(src));
		SOFT(rc == 0, "rewrite after a one-shot fault: %d\n", rc);
		rc = rd(d, e, dst, sizeof(dst));
		SOFT(rc == 0 && !memcmp(src, dst, sizeof(src)), "read after rewrite: %d\n", rc);
		/* a one-page extent never touches drive 1 */
		vmm_disk_stats(d, &st);
		printf("  end: writes %" PRIu64 " bytes_written %" PRIu64 " reads %" PRIu64
		       " bytes_read %" PRIu64 " errors %" PRIu64 "\n",
		       st.writes, st.bytes_written, st.reads, st.bytes_read, st.errors);
		SOFT(st.writes == 1 && st.bytes_written == sizeof(src) && st.reads == 2 &&
		         st.bytes_read == 2 * sizeof(src),
		     "stats after fail+read+rewrite+read\n");
		CHECK_OK(vmm_disk_free(d, e));
		vmm_disk_close(d);
	}
	/* first error in drive order */
	d = open_path(list3, 0, "2/write:1:EFBIG,1/write:1:ENOSPC", &rc);
	SOFT(d, "open with two drive rules: %d\n", rc);
	if (d) {
		CHECK_OK(vmm_disk_alloc(d, sizeof(src), &e));
		rc = wr(d, e, src, sizeof(src));
		SOFT(rc == -ENOSPC, "drive 1 ENOSPC, drive 2 EFBIG: %d (want drive 1's)\n", rc);
		CHECK_OK(vmm_disk_free(d, e));
		vmm_disk_close(d);
	}
	/* read fault on drive 2, prefix not reaching drive 2 must not fail */
	d = open_path(list3, 0, "2/read:1+:EIO", &rc);
	if (d) {
		CHECK_OK(vmm_disk_alloc(d, sizeof(src), &e));
		CHECK_OK(wr(d, e, src, sizeof(src)));
		rc = rd(d, e, dst, 4096);
		SOFT(rc == 0, "prefix read not touching drive 2: %d\n", rc);
		rc = rd(d, e, dst, sizeof(dst));
		SOFT(rc == -EIO, "read touching drive 2: %d\n", rc);
		vmm_disk_stats(d, &st);
		SOFT(st.reads <= 1 && st.bytes_read <= 4096,
		     "reads %" PRIu64 " bytes %" PRIu64 "\n", st.reads, st.bytes_read);
		CHECK_OK(vmm_disk_free(d, e));
		vmm_disk_close(d);
	}
	/* bad prefixes */
	const char *bad[] = {"3/write:1:EIO",
	                     "16/write:1:EIO",
	                     "-1/write:1:EIO",
	                     "/write:1:EIO",
	                     "1/",
	                     "1/write:1:EIO,7/read:1:EIO",
	                     "99999999999999999999/write:1:EIO"};
	for (size_t i = 0; i < SP_ARRAY_SIZE(bad); i++) {
		d = open_path(list3, 0, bad[i], &rc);
		SOFT(rc == -EINVAL && !d, "fault '%s' on 3 drives: %d\n", bad[i], rc);
		if (d)
			vmm_disk_close(d);
	}
	d = open_path(dirs[0], 0, "1/write:1:EIO", &rc);
	SOFT(rc == -EINVAL && !d, "fault '1/write:1:EIO' on 1 drive: %d\n", rc);
	if (d)
		vmm_disk_close(d);
	d = open_path(dirs[0], 0, "0/write:1:EIO", &rc);
	SOFT(rc == 0, "fault '0/write:1:EIO' on 1 drive: %d\n", rc);
	if (d) {
		CHECK_OK(vmm_disk_alloc(d, 4096, &e));
		rc = wr(d, e, src, 4096);
		SOFT(rc == -EIO, "0/ rule on 1 drive: %d\n", rc);
		CHECK_OK(vmm_disk_free(d, e));
		vmm_disk_close(d);
	}
}

/* Paths. */
static void t_paths(void)
{
	char p[4096];
	int rc;
	struct vmm_disk *d;
	struct {
		const char *what;
		int ok;
	} cases[8];
	int nc = 0;
	(void)cases;
	(void)nc;
#define TRYP(path, want_ok)                                                                      \
	do {                                                                                     \
		d = open_path(path, 0, "", &rc);                                                 \
		printf("path '%s': rc %d%s%s\n", path, rc, rc ? ": " : "",                       \
		       rc ? sp_last_error() : "");                                               \
		SOFT((rc == 0) == (want_ok), "path '%s': rc %d\n", path, rc);                    \
		if (d) {                                                                         \
			struct vmm_disk_stats_snapshot s_;                                       \
			vmm_disk_stats(d, &s_);                                                  \
			printf("   ndrives %d capacity %" PRIu64 "\n", s_.ndrives, s_.capacity); \
			vmm_disk_close(d);                                                       \
		}                                                                                \
	} while (0)
	snprintf(p, sizeof(p), "%s/nope", base);
	TRYP(p, 0);
	SOFT(access(p, F_OK) != 0, "created %s\n", p);
	snprintf(p, sizeof(p), "%s,%s/nope", dirs[0], base);
	TRYP(p, 0);
	snprintf(p, sizeof(p), "%s/afile", base);
	FILE *f = fopen(p, "w");
	fclose(f);
	TRYP(p, 0);
	snprintf(p, sizeof(p), "%s,,%s", dirs[0], dirs[1]);
	TRYP(p, 0);
	snprintf(p, sizeof(p), "%s,", dirs[0]);
	TRYP(p, 0);
	snprintf(p, sizeof(p), ",%s", dirs[0]);
	TRYP(p, 0);
	TRYP(",", 0);
	snprintf(p, sizeof(p), "%s, %s", dirs[0], dirs[1]);
	TRYP(p, 0);
	/* a directory where no file can be made: an error naming it */
	d = open_path("/proc", 0, "", &rc);
	printf("path '/proc': rc %d: %s\n", rc, rc ? sp_last_error() : "");
	SOFT(rc < 0 && strstr(sp_last_error(), "/proc"), "/proc: %d\n", rc);
	if (d)
		vmm_disk_close(d);
	snprintf(p, sizeof(p), "%s,/proc", dirs[0]);
	d = open_path(p, 0, "", &rc);
	SOFT(rc < 0 && strstr(sp_last_error(), "/proc"), "d0,/proc: %d\n", rc);
	if (d)
		vmm_disk_close(d);
	/* 17 directories */
	p[0] = 0;
	for (int k = 0; k < 17; k++) {
		strcat(p, dirs[k]);
		if (k < 16)
			strcat(p, ",");
	}
	TRYP(p, 0);
	/* exactly 16 */
	p[0] = 0;
	for (int k = 0; k < 16; k++) {
		strcat(p, dirs[k]);
		if (k < 15)
			strcat(p, ",");
	}
	d = open_path(p, 0, "", &rc);
	SOFT(rc == 0, "16 drives: %d\n", rc);
	if (d) {
		uint8_t src[17 * 4096 + 5], dst[17 * 4096 + 5];
		fill(src, sizeof(src), 77);
		uint64_t e;
		CHECK_OK(vmm_disk_alloc(d, sizeof(src), &e));
		rc = wr(d, e, src, sizeof(src));
		SOFT(rc == 0, "write on 16 drives %d\n", rc);
		rc = rd(d, e, dst, sizeof(dst));
		SOFT(rc == 0 && !memcmp(src, dst, sizeof(src)), "read on 16 drives %d\n", rc);
		struct vmm_disk_stats_snapshot st;
		vmm_disk_stats(d, &st);
		SOFT(st.ndrives == 16, "ndrives %d\n", st.ndrives);
		CHECK_OK(vmm_disk_free(d, e));
		vmm_disk_close(d);
	}
	/* same directory twice */
	snprintf(p, sizeof(p), "%s,%s", dirs[0], dirs[0]);
	d = open_path(p, 0, "", &rc);
	printf("same dir twice: rc %d %s\n", rc, rc ? sp_last_error() : "");
	if (d) {
		struct vmm_disk_stats_snapshot st, s1;
		vmm_disk_stats(d, &st);
		struct vmm_disk *d1 = open_path(dirs[0], 0, "", NULL);
		vmm_disk_stats(d1, &s1);
		vmm_disk_close(d1);
		printf("   capacity %" PRIu64 " (one listing: %" PRIu64 ")\n", st.capacity,
		       s1.capacity);
		SOFT(st.capacity <= s1.capacity + s1.capacity / 100,
		     "same directory twice doubles the free-space capacity: %" PRIu64 " vs %" PRIu64
		     "\n",
		     st.capacity, s1.capacity);
		uint8_t src[8 * 4096], dst[8 * 4096];
		fill(src, sizeof(src), 5);
		uint64_t e;
		CHECK_OK(vmm_disk_alloc(d, sizeof(src), &e));
		SOFT(wr(d, e, src, sizeof(src)) == 0, "write twice-listed\n");
		SOFT(rd(d, e, dst, sizeof(dst)) == 0 && !memcmp(src, dst, sizeof(src)), "read\n");
		CHECK_OK(vmm_disk_free(d, e));
		vmm_disk_close(d);
	}
	/* long path: each entry near PATH_MAX */
	char longdir[2048];
	snprintf(longdir, sizeof(longdir), "%.200s", base);
	while (strlen(longdir) < 1200) {
		strcat(longdir, "/ddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddd"
		                "ddddddddddddddddddddddddd");
		mkdir(longdir, 0700);
	}
	snprintf(p, sizeof(p), "%s,%s", dirs[0], longdir);
	d = open_path(p, 0, "", &rc);
	SOFT(rc == 0, "long directory (%zu chars) as drive 1: %d\n", strlen(longdir), rc);
	if (d)
		vmm_disk_close(d);
	/* a long path whose truncation names an existing directory must not be used */
	snprintf(p, sizeof(p), "%s/nonexistent", longdir);
	d = open_path(p, 0, "", &rc);
	SOFT(rc != 0, "nonexistent long directory accepted\n");
	if (d)
		vmm_disk_close(d);
	snprintf(p, sizeof(p), "%s,%s/nonexistent", dirs[0], longdir);
	d = open_path(p, 0, "", &rc);
	SOFT(rc != 0, "nonexistent long directory accepted as drive 1\n");
	if (d)
		vmm_disk_close(d);
}

/* Threads on 3 drives, odd sizes, prefixes, frees of others' extents. */
struct w {
	struct vmm_disk *d;
	int id, failed;
};
static void *worker(void *a)
{
	struct w *w = a;
	uint64_t s = 1234 + w->id;
	for (int round = 0; round < 6; round++) {
		enum { K = 16 };
		uint64_t e[K], t[K];
		size_t sz[K];
		uint8_t *src[K], *dst[K];
		for (int i = 0; i < K; i++) {
			s = s * 6364136223846793005ull + 1442695040888963407ull;
			sz[i] = 1 + (s >> 33) % (300 * 1024);
			src[i] = malloc(sz[i]);
			dst[i] = malloc(sz[i]);
			fill(src[i], sz[i], s);
			if (vmm_disk_alloc(w->d, sz[i], &e[i]) ||
			    vmm_disk_write_async(w->d, e[i], src[i], sz[i], &t[i])) {
				printf("worker %d alloc/write: %s\n", w->id, sp_last_error());
				w->failed = 1;
				return NULL;
			}
		}
		for (int i = 0; i < K; i++) {
			int rc = vmm_disk_wait(w->d, t[i]);
			if (rc) {
				printf("worker %d wait write %zu: %d\n", w->id, sz[i], rc);
				w->failed = 1;
			}
			vmm_disk_ticket_release(w->d, t[i]);
			size_t n = (i & 1) ? sz[i] : (sz[i] + 1) / 2;
			if (vmm_disk_read_async(w->d, e[i], dst[i], n, &t[i]))
				w->failed = 1;
		}
		for (int i = 0; i < K; i++) {
			size_t n = (i & 1) ? sz[i] : (sz[i] + 1) / 2;
			int rc = vmm_disk_wait(w->d, t[i]);
			if (rc || memcmp(src[i], dst[i], n)) {
				printf("worker %d read %zu of %zu: rc %d\n", w->id, n, sz[i], rc);
				w->failed = 1;
			}
			vmm_disk_ticket_release(w->d, t[i]);
			if (vmm_disk_free(w->d, e[i]))
				w->failed = 1;
			free(src[i]);
			free(dst[i]);
		}
	}
	return NULL;
}
static void t_threads(void)
{
	struct vmm_disk *d = open_path(list3, 0, "", NULL);
	if (!d)
		return;
	enum { T = 6 };
	pthread_t th[T];
	struct w w[T];
	for (int i = 0; i < T; i++) {
		w[i] = (struct w){d, i, 0};
		CHECK(pthread_create(&th[i], NULL, worker, &w[i]) == 0);
	}
	for (int i = 0; i < T; i++) {
		pthread_join(th[i], NULL);
		SOFT(!w[i].failed, "worker %d\n", i);
	}
	struct vmm_disk_stats_snapshot st;
	vmm_disk_stats(d, &st);
	SOFT(st.used == 0 && st.errors == 0, "used %" PRIu64 " errors %" PRIu64 "\n", st.used,
	     st.errors);
	SOFT(st.writes == T * 6 * 16 && st.reads == T * 6 * 16,
	     "writes %" PRIu64 " reads %" PRIu64 "\n", st.writes, st.reads);
	vmm_disk_close(d);
}

/* Close with striped I/O in flight, some tickets released, some not, one
 * extent freed after -EBUSY halfway. */
static void t_close_inflight(void)
{
	struct vmm_disk *d = open_path(list3, 0, "1/write:5+:EIO", NULL);
	if (!d)
		return;
	enum { K = 24, SZ = 200 * 1024 + 5 };
	uint8_t *src = malloc(SZ), *dst = malloc((size_t)K * SZ);
	fill(src, SZ, 9);
	uint64_t e[K], t[K];
	for (int i = 0; i < K; i++) {
		CHECK_OK(vmm_disk_alloc(d, SZ - (size_t)i * 4000, &e[i]));
		CHECK_OK(vmm_disk_write_async(d, e[i], src, SZ - (size_t)i * 4000, &t[i]));
		if (i & 1)
			vmm_disk_ticket_release(d, t[i]);
		CHECK_OK(vmm_disk_read_async(d, e[i], dst + (size_t)i * SZ, 4097, &t[i]));
		if (i % 3 == 0)
			if (vmm_disk_free(d, e[i]) < 0) { /* -EBUSY: in flight, fine */
			}
	}
	vmm_disk_close(d);
	free(src);
	free(dst);
}

int main(int argc, char **argv)
{
	const char *tmp = getenv("TMPDIR");
	snprintf(base, sizeof(base), "%s/spill-adv-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	CHECK(mkdtemp(base));
	for (int k = 0; k < 20; k++) {
		snprintf(dirs[k], sizeof(dirs[k]), "%s/d%d", base, k);
		CHECK(mkdir(dirs[k], 0700) == 0);
	}
	snprintf(list3, sizeof(list3), "%s,%s,%s", dirs[0], dirs[1], dirs[2]);
	struct {
		const char *name;
		void (*fn)(void);
	} cases[] = {{"sizes", t_sizes},
	             {"stats", t_stats},
	             {"handles", t_handles},
	             {"busy_free", t_busy_free},
	             {"capacity", t_capacity},
	             {"faults", t_faults},
	             {"paths", t_paths},
	             {"threads", t_threads},
	             {"close_inflight", t_close_inflight}};
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
