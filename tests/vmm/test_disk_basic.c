/* tests/vmm/test_disk_basic.c — the disk tier (vmm/disk.h) end to end: random
 * data of many sizes round-trips bit for bit, many tickets in flight from several
 * threads, capacity enforcement (-ENOSPC), extent reuse, bad input (zero sizes,
 * unknown extents and tickets, double free, oversized I/O), and close with I/O
 * still in flight. Runs in a fresh directory under $TMPDIR (default /tmp). */
#include "common/error.h"
#include "common/params.h"
#include "tests/test.h"
#include "vmm/disk.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[256];

static uint64_t next_rand(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}
static void fill(uint8_t *p, size_t n, uint64_t seed)
{
	uint64_t s = seed | 1;
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)next_rand(&s);
}

static struct vmm_disk *open_disk(uint64_t capacity, unsigned qd, size_t block)
{
	struct vmm_disk_config cfg = {
	    .path = dir, .capacity = capacity, .queue_depth = qd, .block = block, .fault = ""};
	struct vmm_disk *d = NULL;
	int rc = vmm_disk_open(&cfg, &d);
	if (rc == -ENOTSUP)
		TEST_SKIP("%s", sp_last_error());
	CHECK_OK(rc);
	return d;
}

static void test_params(void)
{
	struct sp_params p;
	sp_params_defaults(&p);
	struct vmm_disk_config cfg;
	vmm_disk_config_from_params(&p, &cfg);
	CHECK(cfg.queue_depth == 32 && cfg.block == (1u << 20) && cfg.capacity == 0);
	CHECK(cfg.fault && cfg.fault[0] == '\0');
}

/* Sizes around every boundary: 1 byte, sub-page, page, block +- 1, many blocks. */
static void test_roundtrip(void)
{
	struct vmm_disk *d = open_disk(0, 4, 16384);
	static const size_t sizes[] = {1,     2,      511,   512,   4095,     4096,
	                               4097,  8191,   16383, 16384, 16385,    65536,
	                               65537, 100000, 32768, 49153, 1u << 20, (1u << 20) + 3};
	enum { N = SP_ARRAY_SIZE(sizes) };
	uint64_t ext[N], tw[N], tr[N];
	uint8_t *src[N], *dst[N];
	for (size_t i = 0; i < N; i++) {
		src[i] = malloc(sizes[i]);
		dst[i] = malloc(sizes[i] + 1);
		CHECK(src[i] && dst[i]);
		fill(src[i], sizes[i], i + 1);
		memset(dst[i], 0xee, sizes[i] + 1);
		CHECK_OK(vmm_disk_alloc(d, sizes[i], &ext[i]));
	}
	/* Every write in flight at once, then every read. */
	for (size_t i = 0; i < N; i++)
		CHECK_OK(vmm_disk_write_async(d, ext[i], src[i], sizes[i], &tw[i]));
	for (size_t i = 0; i < N; i++) {
		CHECK_OK(vmm_disk_wait(d, tw[i]));
		CHECK_OK(vmm_disk_poll(d, tw[i])); /* a done ticket polls again */
		vmm_disk_ticket_release(d, tw[i]);
	}
	for (size_t i = 0; i < N; i++)
		CHECK_OK(vmm_disk_read_async(d, ext[i], dst[i], sizes[i], &tr[i]));
	for (size_t i = 0; i < N; i++) {
		int rc;
		while ((rc = vmm_disk_poll(d, tr[i])) == -EAGAIN)
			usleep(100);
		CHECK_OK(rc);
		vmm_disk_ticket_release(d, tr[i]);
		CHECK_MSG(memcmp(src[i], dst[i], sizes[i]) == 0, "size %zu differs", sizes[i]);
		CHECK_MSG(dst[i][sizes[i]] == 0xee, "read of %zu bytes wrote past the end",
		          sizes[i]);
	}
	/* A prefix of an extent reads back too. */
	uint64_t t;
	memset(dst[N - 1], 0, 10);
	CHECK_OK(vmm_disk_read_async(d, ext[N - 1], dst[N - 1], 10, &t));
	CHECK_OK(vmm_disk_wait(d, t));
	vmm_disk_ticket_release(d, t);
	CHECK(memcmp(dst[N - 1], src[N - 1], 10) == 0);

	struct vmm_disk_stats_snapshot st;
	vmm_disk_stats(d, &st);
	uint64_t total = 0;
	for (size_t i = 0; i < N; i++)
		total += sizes[i];
	CHECK_MSG(st.bytes_written == total && st.bytes_read == total + 10,
	          "written %llu read %llu expected %llu", (unsigned long long)st.bytes_written,
	          (unsigned long long)st.bytes_read, (unsigned long long)total);
	CHECK(st.writes == N && st.reads == N + 1 && st.errors == 0);
	CHECK(st.used > total && st.capacity > 0);

	/* Free and reuse: a new extent in the freed space holds new data. */
	for (size_t i = 0; i < N; i += 2)
		CHECK_OK(vmm_disk_free(d, ext[i]));
	for (size_t i = 0; i < N; i += 2) {
		fill(src[i], sizes[i], 1000 + i);
		CHECK_OK(vmm_disk_alloc(d, sizes[i], &ext[i]));
		CHECK_OK(vmm_disk_write_async(d, ext[i], src[i], sizes[i], &t));
		CHECK_OK(vmm_disk_wait(d, t));
		vmm_disk_ticket_release(d, t);
	}
	for (size_t i = 0; i < N; i++) {
		CHECK_OK(vmm_disk_read_async(d, ext[i], dst[i], sizes[i], &t));
		CHECK_OK(vmm_disk_wait(d, t));
		vmm_disk_ticket_release(d, t);
		CHECK_MSG(memcmp(src[i], dst[i], sizes[i]) == 0, "reused size %zu differs",
		          sizes[i]);
	}
	for (size_t i = 0; i < N; i++) {
		CHECK_OK(vmm_disk_free(d, ext[i]));
		free(src[i]);
		free(dst[i]);
	}
	vmm_disk_stats(d, &st);
	CHECK(st.used == 0);
	vmm_disk_close(d);
}

/* Several threads, each with many tickets in flight on its own extents. */
struct worker {
	struct vmm_disk *d;
	int id;
	int failed;
};

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	enum { K = 24 };
	uint64_t ext[K], tk[K];
	uint8_t *src[K], *dst[K];
	size_t sz[K];
	uint64_t s = 77 + (uint64_t)w->id;
	for (int round = 0; round < 3; round++) {
		for (int i = 0; i < K; i++) {
			sz[i] = 1 + next_rand(&s) % (200 * 1024);
			src[i] = malloc(sz[i]);
			dst[i] = calloc(1, sz[i]);
			fill(src[i], sz[i], next_rand(&s));
			if (vmm_disk_alloc(w->d, sz[i], &ext[i]) ||
			    vmm_disk_write_async(w->d, ext[i], src[i], sz[i], &tk[i])) {
				w->failed = 1;
				return NULL;
			}
		}
		for (int i = 0; i < K; i++) {
			if (vmm_disk_wait(w->d, tk[i]))
				w->failed = 1;
			vmm_disk_ticket_release(w->d, tk[i]);
			if (vmm_disk_read_async(w->d, ext[i], dst[i], sz[i], &tk[i]))
				w->failed = 1;
		}
		for (int i = 0; i < K; i++) {
			if (vmm_disk_wait(w->d, tk[i]) || memcmp(src[i], dst[i], sz[i]))
				w->failed = 1;
			vmm_disk_ticket_release(w->d, tk[i]);
			if (vmm_disk_free(w->d, ext[i]))
				w->failed = 1;
			free(src[i]);
			free(dst[i]);
		}
	}
	return NULL;
}

static void test_threads(void)
{
	struct vmm_disk *d = open_disk(0, 8, 32768);
	enum { T = 4 };
	pthread_t th[T];
	struct worker w[T];
	for (int i = 0; i < T; i++) {
		w[i] = (struct worker){d, i, 0};
		CHECK(pthread_create(&th[i], NULL, worker_main, &w[i]) == 0);
	}
	for (int i = 0; i < T; i++) {
		pthread_join(th[i], NULL);
		CHECK_MSG(!w[i].failed, "worker %d: %s", i, sp_last_error());
	}
	vmm_disk_close(d);
}

static void test_capacity(void)
{
	struct vmm_disk *d = open_disk(64 * 1024, 2, 4096);
	uint64_t a, b, c;
	CHECK_OK(vmm_disk_alloc(d, 40000, &a)); /* rounds up to 40960 */
	CHECK_OK(vmm_disk_alloc(d, 20000, &b)); /* 20480: 61440 used */
	int rc = vmm_disk_alloc(d, 4097, &c);
	CHECK_MSG(rc == -ENOSPC, "rc %d", rc);
	CHECK(strstr(sp_last_error(), "disk tier full"));
	CHECK_OK(vmm_disk_alloc(d, 4096, &c)); /* exactly full */
	struct vmm_disk_stats_snapshot st;
	vmm_disk_stats(d, &st);
	CHECK(st.used == 64 * 1024 && st.capacity == 64 * 1024);
	CHECK_OK(vmm_disk_free(d, a));
	CHECK_OK(vmm_disk_alloc(d, 40960, &a));
	CHECK(vmm_disk_alloc(d, 1, &c) == -ENOSPC);
	vmm_disk_close(d); /* extents still allocated: close frees them */
}

/* Many extents freed in a checkerboard: the free-range list grows past its
 * first allocation, ranges coalesce, and the space is reused exactly. */
static void test_fragmentation(void)
{
	struct vmm_disk *d = open_disk(1000 * 8192, 2, 4096);
	enum { K = 1000 };
	static uint64_t e[K];
	for (int i = 0; i < K; i++)
		CHECK_OK(vmm_disk_alloc(d, 1 + (size_t)(i % 2) * 8191, &e[i]));
	for (int i = 0; i < K; i += 2)
		CHECK_OK(vmm_disk_free(d, e[i])); /* 500 one-page holes */
	uint64_t big;
	CHECK(vmm_disk_alloc(d, 8192 * 300, &big) == 0); /* fits only at the end */
	CHECK_OK(vmm_disk_free(d, big));
	for (int i = 0; i < K; i += 2)
		CHECK_OK(vmm_disk_alloc(d, 4096, &e[i])); /* refills the holes */
	struct vmm_disk_stats_snapshot st;
	vmm_disk_stats(d, &st);
	CHECK(st.used == (K / 2) * 4096 + (K / 2) * 8192);
	/* Write the neighbours of a refilled hole and check nothing overlaps. */
	uint8_t a[8192], b[4096], c[8192];
	memset(a, 0xaa, sizeof(a));
	memset(b, 0xbb, sizeof(b));
	uint64_t t;
	CHECK_OK(vmm_disk_write_async(d, e[1], a, sizeof(a), &t));
	CHECK_OK(vmm_disk_wait(d, t));
	vmm_disk_ticket_release(d, t);
	CHECK_OK(vmm_disk_write_async(d, e[2], b, sizeof(b), &t));
	CHECK_OK(vmm_disk_wait(d, t));
	vmm_disk_ticket_release(d, t);
	CHECK_OK(vmm_disk_read_async(d, e[1], c, sizeof(c), &t));
	CHECK_OK(vmm_disk_wait(d, t));
	vmm_disk_ticket_release(d, t);
	CHECK(memcmp(a, c, sizeof(a)) == 0);
	for (int i = 1; i < K; i += 2)
		CHECK_OK(vmm_disk_free(d, e[i]));
	for (int i = 0; i < K; i += 2)
		CHECK_OK(vmm_disk_free(d, e[i]));
	vmm_disk_stats(d, &st);
	CHECK(st.used == 0);
	CHECK_OK(vmm_disk_alloc(d, 1000 * 8192, &big)); /* everything coalesced */
	CHECK_OK(vmm_disk_free(d, big));
	vmm_disk_close(d);
}

static void test_bad_input(void)
{
	struct vmm_disk_config cfg = {.path = dir, .queue_depth = 4, .block = 4096, .fault = ""};
	struct vmm_disk *d = NULL;
	cfg.block = 1000;
	CHECK(vmm_disk_open(&cfg, &d) == -EINVAL && d == NULL);
	CHECK(strstr(sp_last_error(), "SPILL_IO_BLOCK"));
	cfg.block = 4096;
	cfg.queue_depth = 0;
	CHECK(vmm_disk_open(&cfg, &d) == -EINVAL && d == NULL);
	cfg.queue_depth = 4;
	cfg.path = "";
	CHECK(vmm_disk_open(&cfg, &d) == -EINVAL && d == NULL);
	cfg.path = "/proc/self/nonexistent/dir";
	CHECK(vmm_disk_open(&cfg, &d) < 0 && d == NULL);
	cfg.path = dir;
	cfg.fault = "write:0:EIO";
	CHECK(vmm_disk_open(&cfg, &d) == -EINVAL && d == NULL);
	CHECK(strstr(sp_last_error(), "write:0:EIO"));
	cfg.fault = "flush:1:EIO";
	CHECK(vmm_disk_open(&cfg, &d) == -EINVAL);
	cfg.fault = "read:1:ENOMEM";
	CHECK(vmm_disk_open(&cfg, &d) == -EINVAL);
	cfg.fault = "";

	d = open_disk(0, 4, 4096);
	uint64_t e, t;
	uint8_t buf[8192] = {1};
	CHECK(vmm_disk_alloc(d, 0, &e) == -EINVAL);
	CHECK_OK(vmm_disk_alloc(d, 5000, &e));
	CHECK(vmm_disk_write_async(d, e, buf, 0, &t) == -EINVAL);
	CHECK(vmm_disk_write_async(d, e, NULL, 10, &t) == -EINVAL);
	CHECK(vmm_disk_write_async(d, e, buf, 8193, &t) == -EINVAL); /* extent is 8192 */
	CHECK(strstr(sp_last_error(), "exceed"));
	CHECK(vmm_disk_read_async(d, e + 1, buf, 10, &t) == -EINVAL);
	CHECK(vmm_disk_read_async(d, 0, buf, 10, &t) == -EINVAL);
	CHECK(vmm_disk_poll(d, 12345) == -EINVAL);
	CHECK(vmm_disk_poll(d, 0) == -EINVAL);
	CHECK(vmm_disk_wait(d, 999) == -EINVAL);
	vmm_disk_ticket_release(d, 4242); /* warns, no crash */

	CHECK_OK(vmm_disk_write_async(d, e, buf, 8192, &t));
	int rc = vmm_disk_free(d, e);
	CHECK(rc == 0 || rc == -EBUSY); /* -EBUSY while the write is in flight */
	CHECK_OK(vmm_disk_wait(d, t));
	vmm_disk_ticket_release(d, t);
	CHECK(vmm_disk_poll(d, t) == -EINVAL); /* released */
	if (rc == -EBUSY)
		CHECK_OK(vmm_disk_free(d, e));
	CHECK(vmm_disk_free(d, e) == -EINVAL); /* double free */
	CHECK(strstr(sp_last_error(), "unknown extent"));
	CHECK(vmm_disk_write_async(d, e, buf, 10, &t) == -EINVAL); /* freed */

	/* A stale handle stays invalid after its slot is reused. */
	uint64_t e2;
	CHECK_OK(vmm_disk_alloc(d, 4096, &e2));
	CHECK(e2 != e);
	CHECK(vmm_disk_free(d, e) == -EINVAL);
	CHECK_OK(vmm_disk_free(d, e2));

	/* Releasing an in-flight ticket forgets it when done. */
	CHECK_OK(vmm_disk_alloc(d, 8192, &e));
	CHECK_OK(vmm_disk_write_async(d, e, buf, 8192, &t));
	vmm_disk_ticket_release(d, t);
	vmm_disk_close(d);
	vmm_disk_close(NULL);
}

/* Close while many writes and reads are in flight: it waits, nothing leaks. */
static void test_close_inflight(void)
{
	struct vmm_disk *d = open_disk(0, 2, 4096);
	enum { K = 32, SZ = 256 * 1024 };
	uint8_t *src = malloc(SZ), *dst = malloc((size_t)K * SZ);
	CHECK(src && dst);
	fill(src, SZ, 5);
	uint64_t e[K], t[K];
	for (int i = 0; i < K; i++) {
		CHECK_OK(vmm_disk_alloc(d, SZ, &e[i]));
		CHECK_OK(vmm_disk_write_async(d, e[i], src, SZ, &t[i]));
		CHECK_OK(vmm_disk_read_async(d, e[i], dst + (size_t)i * SZ, SZ, &t[i]));
	}
	vmm_disk_close(d);
	free(src);
	free(dst);
}

int main(void)
{
	const char *tmp = getenv("TMPDIR");
	snprintf(dir, sizeof(dir), "%s/spill-test-disk-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	CHECK(mkdtemp(dir));
	test_params();
	test_roundtrip();
	test_threads();
	test_capacity();
	test_fragmentation();
	test_bad_input();
	test_close_inflight();
	CHECK_MSG(rmdir(dir) == 0, "%s not empty after close", dir);
	TEST_PASS();
}
