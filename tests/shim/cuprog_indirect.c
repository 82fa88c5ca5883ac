/* tests/shim/cuprog_indirect.c — kernels that reach their buffers through a
 * pointer table in device memory, which the shim cannot see: with the host
 * fallback (SPILL_SHIM_HOST_FALLBACK=1, the default) an evicted buffer is
 * pinned host memory mapped at its address, so they read and write it there;
 * without it they touch an unmapped range and the program crashes, as a GPU
 * would fault.
 *
 *   cuprog_indirect NBUF MIB ITERS
 * NBUF buffers of MIB MiB, a table of their addresses (device memory), then
 * ITERS iterations of: each buffer updated from the next one by the visible
 * "step" kernel (its parameters are the buffers), a "gather" kernel summing
 * every buffer into out[] through the table, and a "scatter" kernel adding
 * out[] back into the first elements of every buffer through the table. Prints
 * "checksum=<hex>" of every buffer and out[] at the end.
 */
#include "tests/shim/cuprog.h"
#include "tests/shim/fakecu.h"

#include <cuda.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOUCH 64 /* elements of each buffer the scatter kernel writes */

struct table_args {
	float *const *table; /* device memory: nbuf buffer addresses */
	float *out;
	int nbuf, n;
};

static void k_gather(const void *p)
{
	const struct table_args *a = p;
	for (int b = 0; b < a->nbuf; b++) {
		float s = 0;
		for (int i = 0; i < a->n; i += 97)
			s += a->table[b][i];
		a->out[b] = s;
	}
}

static void k_scatter(const void *p)
{
	const struct table_args *a = p;
	for (int b = 0; b < a->nbuf; b++)
		for (int i = 0; i < TOUCH; i++)
			a->table[b][i] += 1e-3f * a->out[(b + 1) % a->nbuf];
}

int main(int argc, char **argv)
{
	int nbuf, iters;
	size_t bytes;
	if (cuprog_args(argc, argv, &nbuf, &bytes, &iters))
		return 2;
	int n = (int)(bytes / sizeof(float));
	size_t step_sizes[] = {8, 8, 4, 4}, table_sizes[] = {8, 8, 4, 4};
	fakecu_register_kernel("step", k_step, 4, step_sizes);
	fakecu_register_kernel("gather", k_gather, 4, table_sizes);
	fakecu_register_kernel("scatter", k_scatter, 4, table_sizes);

	CUdevice dev;
	CUcontext ctx;
	CUmodule mod;
	CUfunction step, gather, scatter;
	CUstream s;
	CU_CHECK(cuInit(0));
	CU_CHECK(cuDeviceGet(&dev, 0));
	CU_CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
	CU_CHECK(cuCtxSetCurrent(ctx));
	CU_CHECK(cuModuleLoadData(&mod, "fake image"));
	CU_CHECK(cuModuleGetFunction(&step, mod, "step"));
	CU_CHECK(cuModuleGetFunction(&gather, mod, "gather"));
	CU_CHECK(cuModuleGetFunction(&scatter, mod, "scatter"));
	CU_CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));

	CUdeviceptr *buf = calloc((size_t)nbuf, sizeof(*buf)), table, out;
	float *host = malloc(bytes);
	for (int b = 0; b < nbuf; b++) {
		CU_CHECK(cuMemAlloc(&buf[b], bytes));
		for (int i = 0; i < n; i++)
			host[i] = (float)((b * 37 + i * 11) % 1000) / 1000.0f;
		CU_CHECK(cuMemcpyHtoD(buf[b], host, bytes));
	}
	CU_CHECK(cuMemAlloc(&table, (size_t)nbuf * sizeof(CUdeviceptr)));
	CU_CHECK(cuMemAlloc(&out, (size_t)nbuf * sizeof(float)));
	CU_CHECK(cuMemcpyHtoD(table, buf, (size_t)nbuf * sizeof(CUdeviceptr)));
	for (int it = 0; it < iters; it++) {
		for (int b = 0; b < nbuf; b++) {
			struct step_args a = {(float *)(uintptr_t)buf[b],
			                      (const float *)(uintptr_t)buf[(b + 1) % nbuf],
			                      0.25f + 0.01f * (float)b, n};
			void *params[] = {&a.y, &a.x, &a.a, &a.n};
			CU_CHECK(cuLaunchKernel(step, 1, 1, 1, 1, 1, 1, 0, s, params, NULL));
		}
		struct table_args t = {(float *const *)(uintptr_t)table, (float *)(uintptr_t)out,
		                       nbuf, n};
		void *params[] = {&t.table, &t.out, &t.nbuf, &t.n};
		CU_CHECK(cuLaunchKernel(gather, 1, 1, 1, 1, 1, 1, 0, s, params, NULL));
		CU_CHECK(cuLaunchKernel(scatter, 1, 1, 1, 1, 1, 1, 0, s, params, NULL));
	}
	CU_CHECK(cuStreamSynchronize(s));
	uint64_t hash = 1469598103934665603ull;
	for (int b = 0; b <= nbuf; b++) {
		size_t sz = b < nbuf ? bytes : (size_t)nbuf * sizeof(float);
		CU_CHECK(cuMemcpyDtoH(host, b < nbuf ? buf[b] : out, sz));
		const unsigned char *p = (const unsigned char *)host;
		for (size_t i = 0; i < sz; i++)
			hash = (hash ^ p[i]) * 1099511628211ull;
	}
	printf("checksum=%016" PRIx64 "\n", hash);
	for (int b = 0; b < nbuf; b++)
		CU_CHECK(cuMemFree(buf[b]));
	CU_CHECK(cuMemFree(table));
	CU_CHECK(cuMemFree(out));
	CU_CHECK(cuStreamDestroy(s));
	free(buf);
	free(host);
	return 0;
}
