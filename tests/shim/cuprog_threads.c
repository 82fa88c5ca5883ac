/* tests/shim/cuprog_threads.c — several threads allocating, copying,
 * launching and freeing at once, each on its own stream and buffers:
 *   cuprog_threads THREADS NBUF KIB ITERS
 * Each thread runs ITERS cyclic passes over its NBUF buffers (allocated and
 * freed again every pass, so allocation races with launches elsewhere) and
 * prints the FNV-1a hash of its final buffers: the same numbers with and
 * without the shim, and clean under ThreadSanitizer.
 */
#include "tests/shim/cuprog.h"
#include "tests/shim/fakecu.h"

#include <cuda.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int nbuf, iters;
static size_t bytes;
static CUcontext ctx;
static CUfunction step;

#define CHECK(call)                                                                        \
	do {                                                                               \
		CUresult r_ = (call);                                                      \
		if (r_ != CUDA_SUCCESS) {                                                  \
			fprintf(stderr, "thread %d: %s failed: %d\n", id, #call, (int)r_); \
			exit(1);                                                           \
		}                                                                          \
	} while (0)

struct job {
	int id;
	uint64_t hash;
};

static void *run(void *arg)
{
	struct job *j = arg;
	int id = j->id, n = (int)(bytes / sizeof(float));
	CHECK(cuCtxSetCurrent(ctx));
	CUstream s;
	CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	CUdeviceptr *buf = calloc((size_t)nbuf, sizeof(*buf));
	float *host = malloc(bytes);
	for (int i = 0; i < n; i++)
		host[i] = (float)((id * 17 + i) % 97) / 97.0f;
	for (int b = 0; b < nbuf; b++) {
		CHECK(cuMemAlloc(&buf[b], bytes));
		CHECK(cuMemcpyHtoDAsync(buf[b], host, bytes, s));
	}
	for (int it = 0; it < iters; it++) {
		for (int b = 0; b < nbuf; b++) {
			struct step_args a = {(float *)(uintptr_t)buf[b],
			                      (const float *)(uintptr_t)buf[(b + 1) % nbuf],
			                      0.3f + 0.01f * (float)id, n};
			void *params[] = {&a.y, &a.x, &a.a, &a.n};
			CHECK(cuLaunchKernel(step, 1, 1, 1, 1, 1, 1, 0, s, params, NULL));
		}
		/* a fresh buffer replaces the first: copy, free, reallocate */
		CUdeviceptr fresh;
		CHECK(cuMemAlloc(&fresh, bytes));
		CHECK(cuMemcpyDtoDAsync(fresh, buf[0], bytes, s));
		CHECK(cuStreamSynchronize(s));
		CHECK(cuMemFree(buf[0]));
		buf[0] = fresh;
	}
	CHECK(cuStreamSynchronize(s));
	uint64_t h = 1469598103934665603ull;
	for (int b = 0; b < nbuf; b++) {
		CHECK(cuMemcpyDtoH(host, buf[b], bytes));
		const unsigned char *p = (const unsigned char *)host;
		for (size_t i = 0; i < bytes; i++)
			h = (h ^ p[i]) * 1099511628211ull;
		CHECK(cuMemFree(buf[b]));
	}
	CHECK(cuStreamDestroy(s));
	free(buf);
	free(host);
	j->hash = h;
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc != 5) {
		fprintf(stderr, "usage: %s THREADS NBUF KIB ITERS\n", argv[0]);
		return 2;
	}
	int nt = atoi(argv[1]), id = -1;
	nbuf = atoi(argv[2]);
	bytes = (size_t)atoi(argv[3]) << 10;
	iters = atoi(argv[4]);
	size_t sizes[] = {8, 8, 4, 4};
	fakecu_register_kernel("step", k_step, 4, sizes);
	CUdevice dev;
	CUmodule mod;
	CHECK(cuInit(0));
	CHECK(cuDeviceGet(&dev, 0));
	CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
	CHECK(cuCtxSetCurrent(ctx));
	CHECK(cuModuleLoadData(&mod, "img"));
	CHECK(cuModuleGetFunction(&step, mod, "step"));
	pthread_t *t = calloc((size_t)nt, sizeof(*t));
	struct job *jobs = calloc((size_t)nt, sizeof(*jobs));
	for (int i = 0; i < nt; i++) {
		jobs[i].id = i;
		pthread_create(&t[i], NULL, run, &jobs[i]);
	}
	for (int i = 0; i < nt; i++) {
		pthread_join(t[i], NULL);
		printf("thread %d checksum=%016" PRIx64 "\n", i, jobs[i].hash);
	}
	free(t);
	free(jobs);
	return 0;
}
