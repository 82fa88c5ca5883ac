/* tests/device/test_gpu_device.c — the device conformance suite (conformance.h)
 * on the cuda backend: every device present, with the capacity cut to 1 GiB so
 * the beyond-capacity paths are quick. Exits 77 (skip) with no CUDA device. */
#include "tests/device/conformance.h"

int main(void)
{
	if (!dev_cuda_available())
		TEST_SKIP("no CUDA device");
	struct dev_config cfg = {.backend = DEV_BACKEND_CUDA, .device_mem = 1ull << 30};
	struct dev_ctx *ctx;
	CHECK_OK(dev_open(&cfg, &ctx));
	for (int d = 0; d < dev_count(ctx); d++) {
		struct dev_info in;
		CHECK_OK(dev_info(ctx, d, &in));
		printf("dev %d: %s, granularity %zu, %.1f TFLOP/s fp32, %.0f GB/s, H2D %.1f GB/s, "
		       "D2H %.1f GB/s\n",
		       d, in.name, in.granularity, in.flops / 1e12, in.mem_bw / 1e9,
		       dev_link_bw(ctx, DEV_HOST, d) / 1e9, dev_link_bw(ctx, d, DEV_HOST) / 1e9);
	}
	conformance_run(ctx, 1, 1);
	conformance_close(ctx);
	TEST_PASS();
}
