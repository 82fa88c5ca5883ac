/* tests/shim/cuprog_bench.c — the cost of a launch and of an allocation as
 * the program sees it; bench/shim.sh runs it with and without the shim.
 *   cuprog_bench LAUNCHES ALLOCS
 * 100 live allocations of 64 KiB; LAUNCHES launches of a kernel with three
 * pointer parameters (into those allocations) and two scalars, synchronized
 * every 1000; then ALLOCS cuMemAlloc + cuMemFree pairs of 64 KiB.
 * Prints "launch_us=<per launch> alloc_us=<per alloc+free pair>".
 */
#include "tests/shim/fakecu.h"

#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

struct noop_args {
	void *a, *b, *c;
	float s;
	int n;
};

static void k_noop(const void *p)
{
	(void)p;
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
	if (argc != 3)
		return 2;
	long nl = atol(argv[1]), na = atol(argv[2]);
	size_t sizes[] = {8, 8, 8, 4, 4};
	fakecu_register_kernel("noop", k_noop, 5, sizes);
	CUdevice dev;
	CUcontext ctx;
	CUmodule mod;
	CUfunction f;
	CUstream s;
	if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) ||
	    cuCtxSetCurrent(ctx) || cuModuleLoadData(&mod, "img") ||
	    cuModuleGetFunction(&f, mod, "noop") || cuStreamCreate(&s, CU_STREAM_NON_BLOCKING))
		return 1;
	CUdeviceptr buf[100];
	for (int i = 0; i < 100; i++)
		if (cuMemAlloc(&buf[i], 64 << 10) || cuMemsetD8(buf[i], 0, 64 << 10))
			return 1;
	/* warm: the layout cache, the allocations resident */
	struct noop_args a = {0};
	void *params[] = {&a.a, &a.b, &a.c, &a.s, &a.n};
	for (int i = 0; i < 100; i++) {
		a.a = (void *)(uintptr_t)buf[i];
		if (cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, params, NULL))
			return 1;
	}
	cuStreamSynchronize(s);
	double t0 = now();
	for (long i = 0; i < nl; i++) {
		a.a = (void *)(uintptr_t)buf[i % 100];
		a.b = (void *)(uintptr_t)buf[(i + 37) % 100];
		a.c = (void *)(uintptr_t)buf[(i + 71) % 100];
		if (cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, params, NULL))
			return 1;
		if (i % 1000 == 999)
			cuStreamSynchronize(s);
	}
	cuStreamSynchronize(s);
	double tl = (now() - t0) / (double)nl;
	t0 = now();
	for (long i = 0; i < na; i++) {
		CUdeviceptr p;
		if (cuMemAlloc(&p, 64 << 10) || cuMemFree(p))
			return 1;
	}
	double ta = (now() - t0) / (double)na;
	printf("launch_us=%.3f alloc_us=%.3f\n", tl * 1e6, ta * 1e6);
	for (int i = 0; i < 100; i++)
		cuMemFree(buf[i]);
	return 0;
}
