/* tests/device/test_host_chunks.c — host chunks (dev_phys_create on DEV_HOST):
 * one chunk mapped into a host range and into a device range at once shows the
 * same bytes at both addresses (written by the CPU at one, by a device kernel at
 * the other); a copy between the host range and device memory moves them; a
 * device chunk does not map into a host range; the sizes follow
 * dev_host_granularity; the model backend has none (-ENOTSUP). */
#include "common/error.h"
#include "device/device.h"
#include "tests/test.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>

struct fill_args {
	uint32_t *p;
	size_t n;
	uint32_t base;
};

static void fill_cpu(const void *a)
{
	const struct fill_args *f = a;
	for (size_t i = 0; i < f->n; i++)
		f->p[i] = f->base + (uint32_t)i;
}

static const struct dev_kernel fill_kernel = {"fill", fill_cpu, NULL};

static struct dev_ctx *open_ctx(enum dev_backend_kind kind, const char *profile)
{
	struct dev_config dc;
	memset(&dc, 0, sizeof(dc));
	dc.backend = kind;
	dc.ndevices = 1;
	dc.device_mem = 64ull << 20;
	dc.profile = profile;
	dc.threads = 1;
	struct dev_ctx *ctx;
	CHECK_OK(dev_open(&dc, &ctx));
	return ctx;
}

int main(void)
{
	struct dev_ctx *ctx = open_ctx(DEV_BACKEND_HOST, "");
	size_t g = dev_host_granularity(ctx), n = 2 * g;
	CHECK(g > 0);
	struct dev_phys *ph, *dph;
	CHECK(dev_phys_create(ctx, DEV_HOST, g + 1, &ph) == -EINVAL); /* not a granule multiple */
	CHECK_OK(dev_phys_create(ctx, DEV_HOST, n, &ph));
	void *hva, *dva, *mem;
	CHECK_OK(dev_va_reserve(ctx, DEV_HOST, n, &hva));
	CHECK_OK(dev_va_reserve(ctx, 0, n, &dva));
	CHECK_OK(dev_va_map(ctx, hva, n, ph, 0));
	CHECK_OK(dev_va_map(ctx, dva, n, ph, 0)); /* the same chunk at a device address */
	uint32_t *h = hva, *d = dva;
	for (size_t i = 0; i < n / 4; i++)
		h[i] = (uint32_t)i * 3u;
	CHECK(d[7] == 21 && d[n / 4 - 1] == (uint32_t)(n / 4 - 1) * 3u);
	struct dev_stream *s;
	CHECK_OK(dev_stream_create(ctx, 0, &s));
	struct fill_args fa = {d, n / 4, 1000}; /* a device kernel writes it there */
	CHECK_OK(dev_launch(s, &fill_kernel, &fa, sizeof(fa), (struct dev_cost){0, (double)n, 0}));
	CHECK_OK(dev_stream_sync(s));
	CHECK(h[0] == 1000 && h[5] == 1005);
	/* a copy from the host range into device memory and back */
	CHECK_OK(dev_mem_alloc(ctx, 0, n, &mem));
	CHECK_OK(dev_memcpy_async(s, mem, 0, hva, DEV_HOST, n));
	CHECK_OK(dev_stream_sync(s));
	memset(hva, 0, n);
	CHECK_OK(dev_memcpy_async(s, hva, DEV_HOST, mem, 0, n));
	CHECK_OK(dev_stream_sync(s));
	CHECK(h[9] == 1009 && d[9] == 1009);
	/* a device chunk stays out of host ranges */
	void *hva2;
	CHECK_OK(dev_va_reserve(ctx, DEV_HOST, g, &hva2));
	CHECK_OK(dev_phys_create(ctx, 0, g, &dph));
	CHECK(dev_va_map(ctx, hva2, g, dph, 0) == -EINVAL);
	CHECK(dev_phys_destroy(ctx, ph) == -EBUSY); /* still mapped */
	CHECK_OK(dev_va_unmap(ctx, dva, n));
	CHECK(h[9] == 1009); /* the other mapping still holds it */
	CHECK_OK(dev_va_unmap(ctx, hva, n));
	CHECK_OK(dev_phys_destroy(ctx, ph));
	CHECK_OK(dev_phys_destroy(ctx, dph));
	CHECK_OK(dev_va_release(ctx, hva, n));
	CHECK_OK(dev_va_release(ctx, hva2, g));
	CHECK_OK(dev_va_release(ctx, dva, n));
	CHECK_OK(dev_mem_free(ctx, 0, mem));
	CHECK_OK(dev_stream_destroy(s));
	dev_close(ctx);

	struct dev_ctx *m = open_ctx(DEV_BACKEND_MODEL, "h100-sxm");
	CHECK(dev_host_granularity(m) == 0);
	CHECK(dev_phys_create(m, DEV_HOST, 2u << 20, &ph) == -ENOTSUP);
	printf("model backend: %s\n", sp_last_error());
	CHECK(dev_va_reserve(m, DEV_HOST, 2u << 20, &hva) == -ENOTSUP);
	dev_close(m);
	printf("host chunks: one chunk at a host and a device address shows the same bytes\n");
	TEST_PASS();
}
