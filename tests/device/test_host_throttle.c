/* tests/device/test_host_throttle.c — SPILL_LINK_THROTTLE on the host backend:
 * a copy takes at least bytes / link bandwidth of wall time, and two H2D copies
 * of different devices over the shared host link take at least twice as long
 * together as one alone (the link serves them one after another). Lower
 * bounds only: a loaded machine may be slower, never faster. */
#include "device/device.h"
#include "tests/test.h"

#include "common/stats.h"

#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <unistd.h>

static const char *profile_text = "name = slow\ndevice = slow GPU\ndevices = 2\nmemory = 1G\n"
                                  "flops = 1 TFLOP/s\nmem_bw = 100 GB/s\nh2d = 1 GB/s\n"
                                  "d2h = 1 GB/s\nhost_link = 1 GB/s\np2p = 0.5 GB/s\n"
                                  "disk = 1 GB/s\n";

int main(void)
{
	char path[] = "/tmp/spill-throttle-XXXXXX.prof";
	int fd = mkstemps(path, 5);
	CHECK(fd >= 0);
	CHECK(write(fd, profile_text, strlen(profile_text)) == (ssize_t)strlen(profile_text));
	close(fd);
	struct dev_config cfg = {.backend = DEV_BACKEND_HOST,
	                         .ndevices = 2,
	                         .device_mem = 64 << 20,
	                         .profile = path,
	                         .link_throttle = 1};
	struct dev_ctx *ctx;
	CHECK_OK(dev_open(&cfg, &ctx));
	unlink(path);
	const size_t n = 32 << 20; /* 32 MiB: 33.5 ms at 1 GB/s */
	const double one = n / 1e9;
	void *h, *d0, *d1;
	struct dev_stream *s0, *s1;
	CHECK_OK(dev_host_alloc(ctx, n, &h));
	CHECK_OK(dev_mem_alloc(ctx, 0, n, &d0));
	CHECK_OK(dev_mem_alloc(ctx, 1, n, &d1));
	CHECK_OK(dev_stream_create(ctx, 0, &s0));
	CHECK_OK(dev_stream_create(ctx, 1, &s1));

	double t0 = sp_now_s();
	CHECK_OK(dev_memcpy_async(s0, d0, 0, h, DEV_HOST, n));
	CHECK_OK(dev_stream_sync(s0));
	double alone = sp_now_s() - t0;

	t0 = sp_now_s();
	CHECK_OK(dev_memcpy_async(s0, d0, 0, h, DEV_HOST, n));
	CHECK_OK(dev_memcpy_async(s1, d1, 1, h, DEV_HOST, n));
	CHECK_OK(dev_stream_sync(s0));
	CHECK_OK(dev_stream_sync(s1));
	double both = sp_now_s() - t0;

	t0 = sp_now_s();
	CHECK_OK(dev_memcpy_async(s0, d1, 1, d0, 0, n));
	CHECK_OK(dev_stream_sync(s0));
	double peer = sp_now_s() - t0;

	printf("one H2D %.1f ms (>= %.1f), two over the shared link %.1f ms (>= %.1f), peer %.1f "
	       "ms (>= %.1f)\n",
	       alone * 1e3, one * 1e3, both * 1e3, 2 * one * 1e3, peer * 1e3, 2 * one * 1e3);
	CHECK(alone >= 0.99 * one);
	CHECK(both >= 0.99 * 2 * one);
	CHECK(peer >= 0.99 * 2 * one);
	dev_close(ctx);
	TEST_PASS();
}
