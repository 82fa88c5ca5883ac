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

#define CHECK(call)                                                                          \
	do {                                                                                 \
		CUresult r_ = (call);                                                        \
		if (r_ != CUDA_SUCCESS) {                                                    \
			fprintf(stderr, "%s:%d: %s failed: %d\n", __FILE__, __LINE__, #call, \
			        (int)r_);                                                    \
			exit(1);                                                             \
		}                                                                            \
	} while (0)

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
	if (argc != 4) {
		fprintf(stderr, "usage: %s NBUF MIB ITERS\n", argv[0]);
		return 2;
	}
	int nbuf = atoi(argv[1]), iters = atoi(argv[3]);
	size_t bytes = (size_t)atoi(argv[2]) << 20;
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
	CHECK(cuInit(0));
	CHECK(cuDeviceGet(&dev, 0));
	CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
	CHECK(cuCtxSetCurrent(ctx));
	CHECK(cuModuleLoadData(&mod, "fake image"));
	CHECK(cuModuleGetFunction(&step, mod, "step"));
	CHECK(cuModuleGetFunction(&gather, mod, "gather"));
	CHECK(cuModuleGetFunction(&scatter, mod, "scatter"));
	CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));

	CUdeviceptr *buf = calloc((size_t)nbuf, sizeof(*buf)), table, out;
	float *host = malloc(bytes);
	for (int b = 0; b < nbuf; b++) {
		CHECK(cuMemAlloc(&buf[b], bytes));
		for (int i = 0; i < n; i++)
			host[i] = (float)((b * 37 + i * 11) % 1000) / 1000.0f;
		CHECK(cuMemcpyHtoD(buf[b], host, bytes));
	}
	CHECK(cuMemAlloc(&table, (size_t)nbuf * sizeof(CUdeviceptr)));
	CHECK(cuMemAlloc(&out, (size_t)nbuf * sizeof(float)));
	CHECK(cuMemcpyHtoD(table, buf, (size_t)nbuf * sizeof(CUdeviceptr)));
	for (int it = 0; it < iters; it++) {
		for (int b = 0; b < nbuf; b++) {
			struct step_args a = {(float *)(uintptr_t)buf[b],
			                      (const float *)(uintptr_t)buf[(b + 1) % nbuf],
			                      0.25f + 0.01f * (float)b, n};
			void *params[] = {&a.y, &a.x, &a.a, &a.n};
			CHECK(cuLaunchKernel(step, 1, 1, 1, 1, 1, 1, 0, s, params, NULL));
		}
		struct table_args t = {(float *const *)(uintptr_t)table, (float *)(uintptr_t)out,
		                       nbuf, n};
		void *params[] = {&t.table, &t.out, &t.nbuf, &t.n};
		CHECK(cuLaunchKernel(gather, 1, 1, 1, 1, 1, 1, 0, s, params, NULL));
		CHECK(cuLaunchKernel(scatter, 1, 1, 1, 1, 1, 1, 0, s, params, NULL));
	}
	CHECK(cuStreamSynchronize(s));
	uint64_t hash = 1469598103934665603ull;
	for (int b = 0; b <= nbuf; b++) {
		size_t sz = b < nbuf ? bytes : (size_t)nbuf * sizeof(float);
		CHECK(cuMemcpyDtoH(host, b < nbuf ? buf[b] : out, sz));
		const unsigned char *p = (const unsigned char *)host;
		for (size_t i = 0; i < sz; i++)
			hash = (hash ^ p[i]) * 1099511628211ull;
	}
	printf("checksum=%016" PRIx64 "\n", hash);
	for (int b = 0; b < nbuf; b++)
		CHECK(cuMemFree(buf[b]));
	CHECK(cuMemFree(table));
	CHECK(cuMemFree(out));
	CHECK(cuStreamDestroy(s));
	free(buf);
	free(host);
	return 0;
}
