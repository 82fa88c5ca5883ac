/* tests/device/test_conformance.c — the device conformance suite (conformance.h)
 * on the backends CI has: host (two emulated GPUs, 64 MiB each) and model
 * (the 4x GTX 1080 Ti profile, with its capacity cut to 64 MiB so the
 * beyond-capacity paths are quick). The cuda backend runs it in test_gpu_device. */
#include "tests/device/conformance.h"

static void run(enum dev_backend_kind kind, int ndev)
{
	struct dev_config cfg = {
	    .backend = kind, .ndevices = ndev, .device_mem = 64 << 20, .profile = "gtx1080ti-x4"};
	struct dev_ctx *ctx;
	CHECK_OK(dev_open(&cfg, &ctx));
	CHECK(dev_backend(ctx) == kind);
	conformance_run(ctx, kind != DEV_BACKEND_MODEL, kind != DEV_BACKEND_MODEL);
	conformance_close(ctx);
}

int main(void)
{
	run(DEV_BACKEND_HOST, 2);
	run(DEV_BACKEND_HOST, 1);
	run(DEV_BACKEND_MODEL, 0);
	run(DEV_BACKEND_MODEL, 1);
	TEST_PASS();
}
