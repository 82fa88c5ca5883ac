/* tests/device/test_model_timeline.c — the model backend reproduces a timeline
 * computed by hand, exactly (every figure is a power of two, so == holds):
 * a copy overlapping a kernel on another stream, two H2D copies of different
 * devices halving the shared host link, a copy that starts alone and is
 * joined half-way, opposite directions and a peer copy not interfering, and
 * stream order. Then the same run again must give the same times. */
#include "device/device.h"
#include "tests/test.h"

#include <math.h>

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define GiB (1ull << 30)

static const char *profile_text =
    "name = pow2\n"
    "device = pow2 GPU\n"
    "devices = 2\n"
    "memory = 4G\n"
    "flops = 1099511627776 FLOP/s\n" /* 2^40 */
    "mem_bw = 1099511627776 B/s\n"
    "h2d = 1073741824 B/s\n" /* 2^30, each device's own link */
    "d2h = 1073741824 B/s\n"
    "host_link = 1073741824 B/s\n" /* shared: as fast as one device link */
    "p2p = 536870912 B/s\n"        /* 2^29 */
    "disk = 1073741824 B/s\n";

struct rig {
	struct dev_ctx *ctx;
	struct dev_stream *s0a, *s0b, *s1;
	void *d0, *d1, *h;
};

static double rec(struct rig *r, struct dev_stream *s)
{
	struct dev_event *e;
	double t;
	CHECK_OK(dev_event_create(r->ctx, &e));
	CHECK_OK(dev_event_record(e, s));
	CHECK_OK(dev_event_sync(e));
	CHECK_OK(dev_event_time(e, &t));
	CHECK_OK(dev_event_destroy(e));
	return t;
}

static void kernel(struct dev_stream *s, double flops)
{
	static const struct dev_kernel k = {"model_only", NULL, NULL};
	CHECK_OK(dev_launch(s, &k, NULL, 0, (struct dev_cost){flops, 0, 0}));
}

#define EXPECT_T(got, want) \
	CHECK_MSG((got) == (want), "t = %.17g, want %.17g", (double)(got), (double)(want))

static void timeline(const char *prof_path, double out[16])
{
	struct rig r;
	struct dev_config cfg = {.backend = DEV_BACKEND_MODEL, .profile = prof_path};
	CHECK_OK(dev_open(&cfg, &r.ctx));
	CHECK(dev_now(r.ctx) == 0);
	CHECK_OK(dev_stream_create(r.ctx, 0, &r.s0a));
	CHECK_OK(dev_stream_create(r.ctx, 0, &r.s0b));
	CHECK_OK(dev_stream_create(r.ctx, 1, &r.s1));
	CHECK_OK(dev_mem_alloc(r.ctx, 0, GiB, &r.d0));
	CHECK_OK(dev_mem_alloc(r.ctx, 1, GiB, &r.d1));
	CHECK_OK(dev_host_alloc(r.ctx, GiB, &r.h));
	struct dev_event *ea, *eb, *ec;
	CHECK_OK(dev_event_create(r.ctx, &ea));
	CHECK_OK(dev_event_create(r.ctx, &eb));
	CHECK_OK(dev_event_create(r.ctx, &ec));
	int n = 0;

	/* 1. t=0: H2D of 2^29 B on s0a (0.5 s alone) overlaps a 2^40-FLOP kernel on
	 *    s0b (1 s): neither slows the other. */
	CHECK_OK(dev_memcpy_async(r.s0a, r.d0, 0, r.h, DEV_HOST, GiB / 2));
	CHECK_OK(dev_event_record(ea, r.s0a));
	kernel(r.s0b, 1099511627776.0);
	CHECK_OK(dev_event_record(eb, r.s0b));
	CHECK_OK(dev_event_sync(eb));
	CHECK_OK(dev_event_time(ea, &out[n]));
	EXPECT_T(out[n], 0.5);
	n++;
	CHECK_OK(dev_event_time(eb, &out[n]));
	EXPECT_T(out[n], 1.0);
	n++;
	EXPECT_T(dev_now(r.ctx), 1.0);

	/* 2. t=1: H2D 2^29 B to device 0 and to device 1 at once: the shared host
	 *    link (2^30 B/s) gives each half, so both take 1 s, not 0.5 s. */
	CHECK_OK(dev_memcpy_async(r.s0a, r.d0, 0, r.h, DEV_HOST, GiB / 2));
	CHECK_OK(dev_memcpy_async(r.s1, r.d1, 1, r.h, DEV_HOST, GiB / 2));
	out[n] = rec(&r, r.s0a);
	EXPECT_T(out[n], 2.0);
	n++;
	out[n] = rec(&r, r.s1);
	EXPECT_T(out[n], 2.0);
	n++;

	/* 3. t=2: H2D 2^30 B on s0a starts alone. s1 waits for a 0.5 s kernel on
	 *    s0b, then copies 2^28 B to device 1. 2.0-2.5: s0a alone moves 2^29 B;
	 *    2.5-3.0: both at 2^29 B/s, s1 is done at 3.0 and s0a has 2^28 B left;
	 *    alone again at 2^30 B/s it ends at 3.25. */
	CHECK_OK(dev_memcpy_async(r.s0a, r.d0, 0, r.h, DEV_HOST, GiB));
	CHECK_OK(dev_event_record(ea, r.s0a));
	kernel(r.s0b, 549755813888.0);
	CHECK_OK(dev_event_record(eb, r.s0b));
	CHECK_OK(dev_stream_wait_event(r.s1, eb));
	CHECK_OK(dev_memcpy_async(r.s1, r.d1, 1, r.h, DEV_HOST, GiB / 4));
	CHECK_OK(dev_event_record(ec, r.s1));
	CHECK_OK(dev_stream_sync(r.s0a));
	CHECK_OK(dev_event_time(eb, &out[n]));
	EXPECT_T(out[n], 2.5);
	n++;
	CHECK_OK(dev_event_time(ec, &out[n]));
	EXPECT_T(out[n], 3.0);
	n++;
	CHECK_OK(dev_event_time(ea, &out[n]));
	EXPECT_T(out[n], 3.25);
	n++;
	EXPECT_T(dev_now(r.ctx), 3.25);

	/* 4. t=3.25: H2D to device 0 and D2H from device 1 use opposite directions
	 *    of the host link: both take their 0.5 s. A peer copy 0->1 of 2^28 B at
	 *    2^29 B/s on s0b (0.5 s) shares nothing with them. */
	CHECK_OK(dev_memcpy_async(r.s0a, r.d0, 0, r.h, DEV_HOST, GiB / 2));
	CHECK_OK(dev_memcpy_async(r.s1, r.h, DEV_HOST, r.d1, 1, GiB / 2));
	CHECK_OK(dev_memcpy_async(r.s0b, r.d1, 1, r.d0, 0, GiB / 4));
	out[n] = rec(&r, r.s0a);
	EXPECT_T(out[n], 3.75);
	n++;
	out[n] = rec(&r, r.s1);
	EXPECT_T(out[n], 3.75);
	n++;
	out[n] = rec(&r, r.s0b);
	EXPECT_T(out[n], 3.75);
	n++;

	/* 5. Stream order: a 0.25 s kernel, then a 0.25 s H2D, on one stream. */
	kernel(r.s1, 274877906944.0);
	CHECK_OK(dev_event_record(ea, r.s1));
	CHECK_OK(dev_memcpy_async(r.s1, r.d1, 1, r.h, DEV_HOST, GiB / 4));
	out[n] = rec(&r, r.s1);
	EXPECT_T(out[n], 4.25);
	n++;
	CHECK_OK(dev_event_time(ea, &out[n]));
	EXPECT_T(out[n], 4.0);
	n++;

	/* 6. Two kernels on two streams of one device share its compute: each
	 *    0.25 s alone, both end at 0.5 s. */
	kernel(r.s0a, 274877906944.0);
	kernel(r.s0b, 274877906944.0);
	out[n] = rec(&r, r.s0a);
	EXPECT_T(out[n], 4.75);
	n++;
	out[n] = rec(&r, r.s0b);
	EXPECT_T(out[n], 4.75);
	n++;

	CHECK_OK(dev_event_destroy(ea));
	CHECK_OK(dev_event_destroy(eb));
	CHECK_OK(dev_event_destroy(ec));
	dev_close(r.ctx); /* frees the rest */
	CHECK(n <= 16);
}

int main(void)
{
	char path[] = "/tmp/spill-timeline-XXXXXX.prof";
	int fd = mkstemps(path, 5);
	CHECK(fd >= 0);
	FILE *f = fdopen(fd, "w");
	fputs(profile_text, f);
	fclose(f);
	double a[16] = {0}, b[16] = {0};
	timeline(path, a);
	timeline(path, b);
	unlink(path);
	for (int i = 0; i < 16; i++)
		CHECK_MSG(a[i] == b[i], "run 2 differs at %d: %.17g vs %.17g", i, a[i], b[i]);
	printf("timeline reproduced exactly, twice\n");
	/* bf16 products run at the profile's bf16_flops; without one, at flops */
	for (int with = 0; with <= 1; with++) {
		char text[512];
		snprintf(text, sizeof(text),
		         "name = t\ndevice = T\ndevices = 1\nmemory = 1G\nflops = 1 TFLOP/s\n%s"
		         "mem_bw = 1000 GB/s\nh2d = 10 GB/s\nd2h = 10 GB/s\nhost_link = 10 GB/s\n"
		         "p2p = 0\ndisk = 1 GB/s\nlaunch_latency = 0 s\n",
		         with ? "bf16_flops = 8 TFLOP/s\n" : "");
		struct dev_config cfg = {.backend = DEV_BACKEND_MODEL, .profile_text = text};
		struct dev_ctx *ctx;
		struct dev_stream *s;
		CHECK_OK(dev_open(&cfg, &ctx));
		CHECK_OK(dev_stream_create(ctx, 0, &s));
		static const struct dev_kernel k = {"model_only", NULL, NULL};
		double t0 = dev_now(ctx);
		CHECK_OK(dev_launch(s, &k, NULL, 0, (struct dev_cost){1e12, 0, 1}));
		CHECK_OK(dev_stream_sync(s));
		double t1 = dev_now(ctx);
		CHECK_OK(dev_launch(s, &k, NULL, 0, (struct dev_cost){1e12, 0, 0}));
		CHECK_OK(dev_stream_sync(s));
		double t2 = dev_now(ctx);
		printf("1 TFLOP as bf16 products: %.3f s, as fp32: %.3f s (%s bf16_flops)\n",
		       t1 - t0, t2 - t1, with ? "8 TFLOP/s" : "no");
		CHECK(fabs((t1 - t0) - (with ? 0.125 : 1.0)) < 1e-9 &&
		      fabs((t2 - t1) - 1.0) < 1e-9);
		CHECK_OK(dev_stream_destroy(s));
		dev_close(ctx);
	}
	TEST_PASS();
}
