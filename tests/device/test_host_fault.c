/* tests/device/test_host_fault.c — the host backend faults, as a GPU's MMU
 * would, when anything touches device memory that is not resident: a child
 * process that reads an unmapped range, one whose copy (on a stream worker)
 * writes into one, and one whose kernel reads one must each die of SIGSEGV;
 * a child that touches the same range while it is mapped exits cleanly.
 * Each child is this program re-executed (tests/child.h). */
#include "device/device.h"
#include "tests/test.h"
#include "tests/child.h"

#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile uint64_t sink;

static void read_kernel(const void *a)
{
	const uint64_t *p = *(const uint64_t *const *)a;
	sink = p[0];
}

static int child(const char *what)
{
	struct dev_config cfg = {
	    .backend = DEV_BACKEND_HOST, .ndevices = 1, .device_mem = 16 << 20};
	struct dev_ctx *ctx;
	CHECK_OK(dev_open(&cfg, &ctx));
	struct dev_info in;
	CHECK_OK(dev_info(ctx, 0, &in));
	size_t g = in.granularity;
	void *va, *h;
	struct dev_phys *ph;
	struct dev_stream *s;
	CHECK_OK(dev_va_reserve(ctx, 0, 2 * g, &va));
	CHECK_OK(dev_phys_create(ctx, 0, g, &ph));
	CHECK_OK(dev_host_alloc(ctx, g, &h));
	CHECK_OK(dev_stream_create(ctx, 0, &s));
	CHECK_OK(dev_va_map(ctx, va, g, ph, 0));
	memset(va, 1, g); /* mapped: fine */
	if (strcmp(what, "mapped") == 0) {
		sink = ((volatile uint64_t *)va)[7];
		dev_close(ctx);
		return 0;
	}
	CHECK_OK(dev_va_unmap(ctx, va, g));
	if (strcmp(what, "read") == 0)
		sink = ((volatile uint64_t *)va)[7];
	else if (strcmp(what, "never-mapped") == 0)
		sink = ((volatile uint64_t *)va)[g / 8 + 1];
	else if (strcmp(what, "copy") == 0)
		CHECK_OK(dev_memcpy_async(s, va, 0, h, DEV_HOST, g));
	else if (strcmp(what, "kernel") == 0) {
		static const struct dev_kernel k = {"read", read_kernel, NULL};
		CHECK_OK(dev_launch(s, &k, &va, sizeof(va), (struct dev_cost){0, 8}));
	}
	CHECK_OK(dev_stream_sync(s));
	return 3; /* should have died */
}

int main(int argc, char **argv)
{
	if (argc > 1)
		return child(argv[1]);
	int st = test_run_self("mapped");
	CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "mapped access: status %#x", st);
	const char *faulting[] = {"read", "never-mapped", "copy", "kernel"};
	for (size_t i = 0; i < SP_ARRAY_SIZE(faulting); i++) {
		st = test_run_self(faulting[i]);
		CHECK_MSG(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV,
		          "%s of an unmapped range: status %#x, want SIGSEGV", faulting[i], st);
		printf("%s of an unmapped range: SIGSEGV\n", faulting[i]);
	}
	TEST_PASS();
}
