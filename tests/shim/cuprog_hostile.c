/* tests/shim/cuprog_hostile.c — a program that misuses the driver; under the
 * shim (SHIM_EXPECTED=1, SPILL_DEVICE_MEM=BUDGET_MIB MiB, passed as argv[1])
 * every misuse gets the CUDA error the real driver would give and the
 * program keeps running:
 *   an allocation larger than the budget, a double free, a free of an
 *   unknown pointer, a launch and a copy on freed memory, cuMemGetInfo with
 *   NULL arguments; cuMemGetInfo reports the budget as the device's size.
 * And a launch that must not be refused: a struct parameter holding a freed
 * address in a field the kernel never reads (a stale field), as cuBLAS and
 * PyTorch kernels may have.
 * Prints one line per check and "hostile: ok" at the end.
 */
#include "tests/shim/fakecu.h"

#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fails;

static void expect(int ok, const char *what)
{
	printf("%s: %s\n", ok ? "ok  " : "FAIL", what);
	if (!ok)
		fails++;
}

struct fill_args {
	int *p;
	int v, n;
};

static void k_fill(const void *a)
{
	const struct fill_args *f = a;
	for (int i = 0; i < f->n; i++)
		f->p[i] = f->v;
}

/* one struct parameter: p and n are used, unused is not */
struct fill_struct {
	int *p;
	int *unused;
	int v, n;
};

static void k_fill_struct(const void *a)
{
	const struct fill_struct *f = a;
	for (int i = 0; i < f->n; i++)
		f->p[i] = f->v;
}

int main(int argc, char **argv)
{
	int shim = getenv("SHIM_EXPECTED") && atoi(getenv("SHIM_EXPECTED"));
	size_t budget = (size_t)(argc > 1 ? atoi(argv[1]) : 8) << 20;
	size_t sizes[] = {8, 4, 4};
	fakecu_register_kernel("fill", k_fill, 3, sizes);
	size_t struct_size[] = {sizeof(struct fill_struct)};
	fakecu_register_kernel("fill_struct", k_fill_struct, 1, struct_size);
	CUdevice dev;
	CUcontext ctx;
	CUmodule mod;
	CUfunction fill, fill_struct;
	if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) ||
	    cuCtxSetCurrent(ctx) || cuModuleLoadData(&mod, "img") ||
	    cuModuleGetFunction(&fill, mod, "fill") ||
	    cuModuleGetFunction(&fill_struct, mod, "fill_struct"))
		return 1;

	CUdeviceptr big = 0;
	CUresult r = cuMemAlloc(&big, 2 * budget);
	expect(shim ? r == CUDA_ERROR_OUT_OF_MEMORY : r == CUDA_SUCCESS,
	       "an allocation larger than the budget");
	if (r == CUDA_SUCCESS)
		cuMemFree(big);

	size_t fr = 0, tot = 0;
	expect(cuMemGetInfo(NULL, NULL) == CUDA_ERROR_INVALID_VALUE, "cuMemGetInfo(NULL, NULL)");
	expect(cuMemGetInfo(&fr, &tot) == CUDA_SUCCESS && (!shim || tot == budget) && fr <= tot,
	       "cuMemGetInfo reports the budget");

	CUdeviceptr d = 0;
	expect(cuMemAlloc(&d, 1 << 20) == CUDA_SUCCESS, "cuMemAlloc 1 MiB");
	expect(cuMemFree(d) == CUDA_SUCCESS, "cuMemFree");
	expect(cuMemFree(d) == CUDA_ERROR_INVALID_VALUE, "a double free");
	expect(cuMemFree((CUdeviceptr)0x12345678) == CUDA_ERROR_INVALID_VALUE,
	       "a free of an unknown pointer");
	if (shim) {
		/* without the shim these would fault, as on a GPU */
		struct fill_args fa = {(int *)(uintptr_t)d, 7, 1024};
		void *params[] = {&fa.p, &fa.v, &fa.n};
		expect(cuLaunchKernel(fill, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL) ==
		           CUDA_ERROR_ILLEGAL_ADDRESS,
		       "a launch on freed memory");
		int host[16] = {0};
		expect(cuMemcpyHtoD(d, host, sizeof(host)) == CUDA_ERROR_ILLEGAL_ADDRESS,
		       "a copy to freed memory");
	}

	/* a freed address in a field the kernel does not read: it runs (freed after
	 * the live one is allocated, so that one cannot take its place) */
	CUdeviceptr live = 0, gone = 0;
	expect(cuMemAlloc(&gone, 4096) == CUDA_SUCCESS && cuMemAlloc(&live, 4096) == CUDA_SUCCESS &&
	           cuMemFree(gone) == CUDA_SUCCESS,
	       "two allocations of 4 KiB, the first freed");
	struct fill_struct fs = {(int *)(uintptr_t)live, (int *)(uintptr_t)gone, 5, 1024};
	void *sparams[] = {&fs};
	int got[1024] = {0};
	expect(cuLaunchKernel(fill_struct, 1, 1, 1, 1, 1, 1, 0, NULL, sparams, NULL) ==
	               CUDA_SUCCESS &&
	           cuMemcpyDtoH(got, live, sizeof(got)) == CUDA_SUCCESS && got[0] == 5 &&
	           got[1023] == 5,
	       "a launch whose struct parameter holds a freed address it does not read");
	expect(cuMemFree(live) == CUDA_SUCCESS, "cuMemFree");

	/* and it still works */
	CUdeviceptr e = 0;
	int out[1024];
	struct fill_args fa = {NULL, 42, 1024};
	void *params[] = {&fa.p, &fa.v, &fa.n};
	expect(cuMemAlloc(&e, sizeof(out)) == CUDA_SUCCESS, "cuMemAlloc after the misuse");
	fa.p = (int *)(uintptr_t)e;
	expect(cuLaunchKernel(fill, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL) == CUDA_SUCCESS &&
	           cuMemcpyDtoH(out, e, sizeof(out)) == CUDA_SUCCESS && out[0] == 42 &&
	           out[1023] == 42,
	       "a launch and a copy after the misuse");
	expect(cuMemFree(e) == CUDA_SUCCESS, "cuMemFree");
	printf("hostile: %s\n", fails ? "FAILED" : "ok");
	return fails ? 1 : 0;
}
