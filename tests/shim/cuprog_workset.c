/* tests/shim/cuprog_workset.c — a plain CUDA driver-API program whose working
 * set is larger than the shim's budget: the shim's tests run it with and
 * without the shim and compare what it prints.
 *
 *   cuprog_workset NBUF MIB ITERS
 * NBUF buffers of MIB MiB each, filled from the host, then ITERS iterations
 * of a cyclic pass (buffer i updated from buffer i+1, the access pattern LRU
 * handles worst) with an "extra"-form kernel every third buffer; at the end
 * every buffer comes back and its FNV-1a hash is printed. It reaches the
 * driver both ways a real program does: direct calls (linked against
 * libcuda.so.1) for memory, and cuGetProcAddress (found with dlopen + dlsym,
 * as cudart does) for launches. Kernels are host functions registered with
 * the emulated driver (tests/shim/fakecu.h).
 * Prints: "checksum=<hex>", "app h2d=<bytes> d2h=<bytes>" (its own copies)
 * and, at exit (after the shim's report), "driver h2d=.. d2h=.. launches=..
 * prefetched=..".
 */
#include "tests/shim/cuprog.h"
#include "tests/shim/fakecu.h"

#include <cuda.h>
#include <dlfcn.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef CUDA_API_PER_THREAD_DEFAULT_STREAM
#define PROC_FLAGS CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
#else
#define PROC_FLAGS CU_GET_PROC_ADDRESS_DEFAULT
#endif

struct scale_args {
	float *y;
	float s;
	int n;
};

static void k_scale(const void *p)
{
	const struct scale_args *s = p;
	for (int i = 0; i < s->n; i++)
		s->y[i] *= s->s;
}

static void print_driver(void)
{
	printf("driver h2d=%" PRIu64 " d2h=%" PRIu64 " d2d=%" PRIu64 " launches=%" PRIu64
	       " prefetched=%" PRIu64 "\n",
	       fakecu_copied(FAKECU_H2D), fakecu_copied(FAKECU_D2H), fakecu_copied(FAKECU_D2D),
	       fakecu_launches(), fakecu_prefetched());
	fflush(stdout);
}

typedef CUresult (*launch_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                              unsigned, unsigned, CUstream, void **, void **);
typedef CUresult (*gpa_fn)(const char *, void **, int, cuuint64_t,
                           CUdriverProcAddressQueryResult *);

int main(int argc, char **argv)
{
	int nbuf, iters;
	size_t bytes;
	if (cuprog_args(argc, argv, &nbuf, &bytes, &iters))
		return 2;
	int n = (int)(bytes / sizeof(float));
	atexit(print_driver); /* before the shim's handler: so it runs after */

	size_t step_sizes[] = {8, 8, 4, 4}, scale_sizes[] = {8, 4, 4};
	fakecu_register_kernel("step", k_step, 4, step_sizes);
	fakecu_register_kernel("scale", k_scale, 3, scale_sizes);

	/* as cudart: the driver through dlopen, dlsym and cuGetProcAddress */
	void *h = dlopen("libcuda.so.1", RTLD_NOW);
	gpa_fn gpa = h ? (gpa_fn)dlsym(h, "cuGetProcAddress_v2") : NULL;
	launch_fn launch = NULL;
	if (!gpa ||
	    gpa("cuLaunchKernel", (void **)&launch, 12000, PROC_FLAGS, NULL) != CUDA_SUCCESS ||
	    !launch) {
		fprintf(stderr, "cannot resolve cuLaunchKernel\n");
		return 1;
	}

	CUdevice dev;
	CUcontext ctx;
	CUmodule mod;
	CUfunction step, scale;
	CUstream s;
	CU_CHECK(cuInit(0));
	CU_CHECK(cuDeviceGet(&dev, 0));
	CU_CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
	CU_CHECK(cuCtxSetCurrent(ctx));
	CU_CHECK(cuModuleLoadData(&mod, "fake image"));
	CU_CHECK(cuModuleGetFunction(&step, mod, "step"));
	CU_CHECK(cuModuleGetFunction(&scale, mod, "scale"));
	CU_CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));

	CUdeviceptr *buf = calloc((size_t)nbuf, sizeof(*buf));
	float *host = malloc(bytes);
	uint64_t app_h2d = 0, app_d2h = 0;
	for (int b = 0; b < nbuf; b++) {
		CU_CHECK(cuMemAlloc(&buf[b], bytes));
		for (int i = 0; i < n; i++)
			host[i] = (float)((b * 131 + i * 7) % 1000) / 1000.0f;
		CU_CHECK(cuMemcpyHtoD(buf[b], host, bytes));
		app_h2d += bytes;
	}
	for (int it = 0; it < iters; it++) {
		for (int b = 0; b < nbuf; b++) {
			struct step_args a = {(float *)(uintptr_t)buf[b],
			                      (const float *)(uintptr_t)buf[(b + 1) % nbuf],
			                      0.25f + 0.01f * (float)b, n};
			void *params[] = {&a.y, &a.x, &a.a, &a.n};
			CU_CHECK(launch(step, 1, 1, 1, 1, 1, 1, 0, s, params, NULL));
			if (b % 3 == 0) {
				/* the extra form: one packed buffer (y at 0, s at 8, n at 12) */
				struct {
					CUdeviceptr y;
					float s;
					int n;
				} pk = {buf[b], 0.999f, n};
				size_t sz = sizeof(pk);
				void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &pk,
				                 CU_LAUNCH_PARAM_BUFFER_SIZE, &sz,
				                 CU_LAUNCH_PARAM_END};
				CU_CHECK(launch(scale, 1, 1, 1, 1, 1, 1, 0, s, NULL, extra));
			}
		}
	}
	CU_CHECK(cuStreamSynchronize(s));
	uint64_t hash = 1469598103934665603ull;
	for (int b = 0; b < nbuf; b++) {
		CU_CHECK(cuMemcpyDtoH(host, buf[b], bytes));
		app_d2h += bytes;
		const unsigned char *p = (const unsigned char *)host;
		for (size_t i = 0; i < bytes; i++)
			hash = (hash ^ p[i]) * 1099511628211ull;
	}
	printf("checksum=%016" PRIx64 "\n", hash);
	printf("app h2d=%" PRIu64 " d2h=%" PRIu64 "\n", app_h2d, app_d2h);
	for (int b = 0; b < nbuf; b++)
		CU_CHECK(cuMemFree(buf[b]));
	CU_CHECK(cuStreamDestroy(s));
	free(buf);
	free(host);
	return 0;
}
