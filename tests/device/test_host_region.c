/* tests/device/test_host_region.c — growing pinned host regions on the host
 * backend (dev_host_reserve / dev_host_commit; the common contract is in
 * conformance.h):
 *  - nothing is resident at the reserve; a commit faults its pages in (the
 *    host backend's pinning): RSS grows by what was committed, not before;
 *  - a part not committed faults (a child that reads it dies of SIGSEGV; one
 *    that reads a committed part exits cleanly);
 *  - SPILL_HOST_PIN_LIMIT (dev_config.host_pin_limit, from the params): a
 *    commit or a dev_host_alloc past it is -ENOMEM naming the limit, what was
 *    committed stays; the model backend refuses the knob;
 *  - a commit larger than the machine's available memory is -ENOMEM naming
 *    MemAvailable, refused before any page is touched.
 */
#include "common/params.h"
#include "device/device.h"
#include "tests/child.h"
#include "tests/test.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define MiB ((uint64_t)1 << 20)

static volatile uint64_t sink;

static uint64_t rss_bytes(void)
{
	unsigned long long size = 0, res = 0;
	FILE *f = fopen("/proc/self/statm", "r");
	CHECK(f && fscanf(f, "%llu %llu", &size, &res) == 2);
	fclose(f);
	return (uint64_t)res * (uint64_t)sysconf(_SC_PAGESIZE);
}

static struct dev_ctx *open_host(uint64_t pin_limit)
{
	struct dev_config cfg = {.backend = DEV_BACKEND_HOST,
	                         .ndevices = 1,
	                         .device_mem = 16 << 20,
	                         .host_pin_limit = pin_limit};
	struct dev_ctx *ctx;
	CHECK_OK(dev_open(&cfg, &ctx));
	return ctx;
}

static int child(const char *what)
{
	struct dev_ctx *ctx = open_host(0);
	void *r;
	CHECK_OK(dev_host_reserve(ctx, 4 * MiB, &r));
	CHECK_OK(dev_host_commit(ctx, r, 0, 1 * MiB));
	if (!strcmp(what, "committed"))
		sink = ((volatile uint64_t *)r)[1000];
	else
		sink = ((volatile uint64_t *)r)[(1 * MiB) / 8 + 7];
	dev_close(ctx);
	return !strcmp(what, "committed") ? 0 : 3; /* 3: should have died */
}

static void residency(void)
{
	struct dev_ctx *ctx = open_host(0);
	void *r;
	uint64_t rss0 = rss_bytes();
	CHECK_OK(dev_host_reserve(ctx, 1024 * MiB, &r));
	uint64_t after_reserve = rss_bytes();
	CHECK_MSG(after_reserve < rss0 + 4 * MiB, "RSS +%" PRIu64 " at the reserve",
	          after_reserve - rss0);
	CHECK_OK(dev_host_commit(ctx, r, 256 * MiB, 64 * MiB));
	uint64_t after_commit = rss_bytes();
	CHECK_MSG(after_commit >= rss0 + 60 * MiB, "RSS +%" PRIu64 " after pinning 64 MiB",
	          after_commit - rss0);
	CHECK(dev_host_committed(ctx, r) == 64 * MiB);
	printf("1 GiB reserved: RSS +%.1f MiB; 64 MiB committed: RSS +%.1f MiB\n",
	       (double)(after_reserve - rss0) / MiB, (double)(after_commit - rss0) / MiB);
	CHECK_OK(dev_host_free(ctx, r));
	dev_close(ctx);
}

static void pin_limit(void)
{
	struct sp_params p;
	sp_params_defaults(&p);
	CHECK_OK(sp_params_set(&p, "SPILL_HOST_PIN_LIMIT", "3M"));
	struct dev_config cfg;
	CHECK_OK(dev_config_from_params(&p, &cfg));
	CHECK(cfg.host_pin_limit == 3 * MiB);
	struct dev_ctx *ctx = open_host(cfg.host_pin_limit);
	void *r, *h;
	CHECK_OK(dev_host_reserve(ctx, 8 * MiB, &r));
	CHECK_OK(dev_host_commit(ctx, r, 0, 2 * MiB));
	int rc = dev_host_commit(ctx, r, 2 * MiB, 2 * MiB);
	CHECK_MSG(rc == -ENOMEM && strstr(sp_last_error(), "SPILL_HOST_PIN_LIMIT is 3.00 MiB") &&
	              strstr(sp_last_error(), "2.00 MiB are pinned"),
	          "%d: %s", rc, sp_last_error());
	printf("commit past the limit: %s\n", sp_last_error());
	CHECK(dev_host_committed(ctx, r) == 2 * MiB);
	memset(r, 7, 2 * MiB); /* what was committed stays usable */
	CHECK(dev_host_alloc(ctx, 2 * MiB, &h) == -ENOMEM);
	CHECK_OK(dev_host_alloc(ctx, 1 * MiB, &h));
	CHECK_OK(dev_host_free(ctx, h));
	CHECK_OK(dev_host_free(ctx, r)); /* gives its pinned bytes back */
	CHECK_OK(dev_host_alloc(ctx, 3 * MiB, &h));
	CHECK_OK(dev_host_free(ctx, h));
	dev_close(ctx);
	struct dev_config model = {.backend = DEV_BACKEND_MODEL, .host_pin_limit = 1 * MiB};
	CHECK(dev_open(&model, &ctx) == -EINVAL);
	CHECK_MSG(strstr(sp_last_error(), "SPILL_HOST_PIN_LIMIT"), "%s", sp_last_error());
}

static void beyond_memory(void)
{
	long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
	uint64_t ram = (uint64_t)pages * (uint64_t)psz, want = (ram + 64 * MiB) / MiB * MiB;
	struct dev_ctx *ctx = open_host(0);
	void *r;
	CHECK_OK(dev_host_reserve(ctx, 2 * want, &r)); /* address space: fine */
	uint64_t rss0 = rss_bytes();
	int rc = dev_host_commit(ctx, r, 0, want);
	CHECK_MSG(rc == -ENOMEM && strstr(sp_last_error(), "MemAvailable"), "%d: %s", rc,
	          sp_last_error());
	CHECK(rss_bytes() < rss0 + 4 * MiB && dev_host_committed(ctx, r) == 0);
	printf("more than the machine has: %s\n", sp_last_error());
	CHECK_OK(dev_host_free(ctx, r));
	dev_close(ctx);
}

int main(int argc, char **argv)
{
	if (argc > 1)
		return child(argv[1]);
	int st = test_run_self("committed");
	CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "committed part: status %#x", st);
	st = test_run_self("uncommitted");
	CHECK_MSG(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV,
	          "a part not committed: status %#x, want SIGSEGV", st);
	printf("a part not committed: SIGSEGV; a committed one: readable\n");
	residency();
	pin_limit();
	beyond_memory();
	TEST_PASS();
}
