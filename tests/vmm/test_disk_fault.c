/* tests/vmm/test_disk_fault.c — every failure path of the disk tier loses
 * nothing: injected write ENOSPC/EIO/EFBIG and read EIO (SPILL_DISK_FAULT's spec
 * through vmm_disk_config.fault), single- and multi-chunk requests, "N+" rules,
 * and a real file-size limit (RLIMIT_FSIZE in a forked child, SIGXFSZ ignored)
 * that makes a write fail with EFBIG. Each failure must reach the ticket with a
 * clear message, leave the source buffer untouched, leave earlier extents
 * readable and the tier usable afterwards. */
#include "common/error.h"
#include "common/params.h"
#include "tests/test.h"
#include "vmm/disk.h"

#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[256];

static void fill(uint8_t *p, size_t n, uint64_t seed)
{
	uint64_t s = seed | 1;
	for (size_t i = 0; i < n; i++) {
		s ^= s << 13;
		s ^= s >> 7;
		s ^= s << 17;
		p[i] = (uint8_t)s;
	}
}

static uint64_t sum(const uint8_t *p, size_t n)
{
	uint64_t h = 1469598103934665603ull;
	for (size_t i = 0; i < n; i++)
		h = (h ^ p[i]) * 1099511628211ull;
	return h;
}

static struct vmm_disk *open_disk(const char *fault, unsigned qd, size_t block)
{
	struct vmm_disk_config cfg = {
	    .path = dir, .capacity = 0, .queue_depth = qd, .block = block, .fault = fault};
	struct vmm_disk *d = NULL;
	int rc = vmm_disk_open(&cfg, &d);
	if (rc == -ENOTSUP)
		TEST_SKIP("%s", sp_last_error());
	CHECK_OK(rc);
	return d;
}

/* Writes and waits; returns the ticket's result (message in sp_last_error()). */
static int write_sync(struct vmm_disk *d, uint64_t e, const void *src, size_t n)
{
	uint64_t t;
	CHECK_OK(vmm_disk_write_async(d, e, src, n, &t));
	int rc = vmm_disk_wait(d, t);
	CHECK(vmm_disk_poll(d, t) == rc); /* the result sticks until release */
	vmm_disk_ticket_release(d, t);
	return rc;
}

static int read_sync(struct vmm_disk *d, uint64_t e, void *dst, size_t n)
{
	uint64_t t;
	CHECK_OK(vmm_disk_read_async(d, e, dst, n, &t));
	int rc = vmm_disk_wait(d, t);
	vmm_disk_ticket_release(d, t);
	return rc;
}

static void test_injected(size_t n, unsigned qd, size_t block)
{
	struct vmm_disk *d =
	    open_disk("write:2:ENOSPC,write:3:EIO,write:4:EFBIG,read:2:EIO", qd, block);
	uint8_t *src = malloc(n), *dst = malloc(n);
	CHECK(src && dst);
	fill(src, n, n);
	uint64_t h = sum(src, n);
	uint64_t a, b;
	CHECK_OK(vmm_disk_alloc(d, n, &a));
	CHECK_OK(vmm_disk_alloc(d, n, &b));
	CHECK_OK(write_sync(d, a, src, n)); /* write 1 */

	int rc = write_sync(d, b, src, n); /* write 2 */
	CHECK_MSG(rc == -ENOSPC, "rc %d", rc);
	CHECK_MSG(strstr(sp_last_error(), "injected") && strstr(sp_last_error(), "untouched"),
	          "message: %s", sp_last_error());
	rc = write_sync(d, b, src, n); /* write 3 */
	CHECK_MSG(rc == -EIO, "rc %d", rc);
	rc = write_sync(d, b, src, n); /* write 4 */
	CHECK_MSG(rc == -EFBIG, "rc %d", rc);
	CHECK(sum(src, n) == h);            /* the host copy is intact */
	CHECK_OK(write_sync(d, b, src, n)); /* write 5: the tier still works */

	CHECK_OK(read_sync(d, a, dst, n)); /* read 1 */
	CHECK(memcmp(src, dst, n) == 0);
	rc = read_sync(d, b, dst, n); /* read 2 */
	CHECK_MSG(rc == -EIO, "rc %d", rc);
	CHECK(strstr(sp_last_error(), "read"));
	memset(dst, 0, n);
	CHECK_OK(read_sync(d, b, dst, n)); /* read 3 */
	CHECK(memcmp(src, dst, n) == 0);

	struct vmm_disk_stats_snapshot st;
	vmm_disk_stats(d, &st);
	CHECK_MSG(st.errors == 4 && st.writes == 2 && st.reads == 2, "errors %llu w %llu r %llu",
	          (unsigned long long)st.errors, (unsigned long long)st.writes,
	          (unsigned long long)st.reads);
	CHECK(st.bytes_written == 2 * n);
	CHECK_OK(vmm_disk_free(d, a)); /* nothing left in flight on failed requests */
	CHECK_OK(vmm_disk_free(d, b));
	vmm_disk_close(d);
	free(src);
	free(dst);
}

/* "N+": the disk is gone from the Nth write on; concurrent tickets all fail. */
static void test_and_later(void)
{
	struct vmm_disk *d = open_disk("write:2+:EIO,read:3+:EIO", 4, 8192);
	enum { K = 8, N = 100000 };
	uint8_t *src = malloc(N), *dst = malloc(N);
	fill(src, N, 9);
	uint64_t e[K], t[K];
	for (int i = 0; i < K; i++)
		CHECK_OK(vmm_disk_alloc(d, N, &e[i]));
	for (int i = 0; i < K; i++)
		CHECK_OK(vmm_disk_write_async(d, e[i], src, N, &t[i]));
	for (int i = 0; i < K; i++) {
		int rc = vmm_disk_wait(d, t[i]);
		CHECK_MSG(rc == (i == 0 ? 0 : -EIO), "write %d rc %d", i + 1, rc);
		vmm_disk_ticket_release(d, t[i]);
	}
	for (int i = 0; i < 5; i++) {
		int rc = read_sync(d, e[0], dst, N);
		CHECK_MSG(rc == (i < 2 ? 0 : -EIO), "read %d rc %d", i + 1, rc);
		if (i < 2)
			CHECK(memcmp(src, dst, N) == 0);
	}
	for (int i = 0; i < K; i++)
		CHECK_OK(vmm_disk_free(d, e[i]));
	vmm_disk_close(d);
	free(src);
	free(dst);
}

/* The knob end to end: SPILL_DISK_FAULT through the params table. */
static void test_knob(void)
{
	struct sp_params p;
	sp_params_defaults(&p);
	CHECK_OK(sp_params_set(&p, "SPILL_DISK_PATH", dir));
	CHECK_OK(sp_params_set(&p, "SPILL_DISK_FAULT", "write:1:EIO"));
	CHECK_OK(sp_params_set(&p, "SPILL_IO_QUEUE_DEPTH", "3"));
	CHECK_OK(sp_params_set(&p, "SPILL_IO_BLOCK", "8K"));
	struct vmm_disk_config cfg;
	vmm_disk_config_from_params(&p, &cfg);
	CHECK(cfg.queue_depth == 3 && cfg.block == 8192);
	struct vmm_disk *d = NULL;
	CHECK_OK(vmm_disk_open(&cfg, &d));
	uint8_t buf[20000] = {7};
	uint64_t e;
	CHECK_OK(vmm_disk_alloc(d, sizeof(buf), &e));
	int rc = write_sync(d, e, buf, sizeof(buf));
	CHECK_MSG(rc == -EIO && strstr(sp_last_error(), "SPILL_DISK_FAULT"), "rc %d: %s", rc,
	          sp_last_error());
	CHECK_OK(write_sync(d, e, buf, sizeof(buf)));
	vmm_disk_close(d);
}

/* A real file-size limit: in a child with RLIMIT_FSIZE = 1 MiB, a write whose
 * extent reaches past 1 MiB fails with EFBIG; the first extent stays readable. */
static int fsize_child(void)
{
	signal(SIGXFSZ, SIG_IGN);
	struct rlimit rl = {1 << 20, 1 << 20};
	if (setrlimit(RLIMIT_FSIZE, &rl)) {
		perror("setrlimit");
		return 2;
	}
	struct vmm_disk *d = open_disk("", 4, 65536);
	enum { A = 512 * 1024, B = 1 << 20 };
	uint8_t *src = malloc(B), *dst = malloc(B);
	fill(src, B, 3);
	uint64_t h = sum(src, B);
	uint64_t a, b;
	CHECK_OK(vmm_disk_alloc(d, A, &a));
	CHECK_OK(vmm_disk_alloc(d, B, &b)); /* at offset 512K: ends at 1.5M */
	CHECK_OK(write_sync(d, a, src, A));
	int rc = write_sync(d, b, src, B);
	CHECK_MSG(rc == -EFBIG, "rc %d: %s", rc, sp_last_error());
	CHECK_MSG(strstr(sp_last_error(), "RLIMIT_FSIZE"), "message: %s", sp_last_error());
	CHECK(sum(src, B) == h);
	CHECK_OK(read_sync(d, a, dst, A));
	CHECK(memcmp(src, dst, A) == 0);
	/* Space inside the limit is still usable once b is freed. */
	CHECK_OK(vmm_disk_free(d, b));
	CHECK_OK(vmm_disk_alloc(d, 256 * 1024, &b));
	CHECK_OK(write_sync(d, b, src + 1, 256 * 1024));
	CHECK_OK(read_sync(d, b, dst, 256 * 1024));
	CHECK(memcmp(src + 1, dst, 256 * 1024) == 0);
	vmm_disk_close(d);
	free(src);
	free(dst);
	return 0;
}

static void test_fsize_limit(void)
{
	fflush(NULL);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0)
		_exit(fsize_child());
	int status = 0;
	CHECK(waitpid(pid, &status, 0) == pid);
	if (WIFEXITED(status) && WEXITSTATUS(status) == TEST_SKIP_RC)
		exit(TEST_SKIP_RC);
	CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %#x", status);
}

int main(void)
{
	const char *tmp = getenv("TMPDIR");
	snprintf(dir, sizeof(dir), "%s/spill-test-disk-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	CHECK(mkdtemp(dir));
	test_injected(1, 2, 4096);             /* one sub-page chunk */
	test_injected(300000, 4, 16384);       /* many chunks, some in flight at the failure */
	test_injected((1 << 20) + 7, 1, 4096); /* queue depth 1 */
	test_and_later();
	test_knob();
	test_fsize_limit();
	CHECK_MSG(rmdir(dir) == 0, "%s not empty after close", dir);
	TEST_PASS();
}
