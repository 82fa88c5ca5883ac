/* tests/shim/cuprog_multi.c — two threads, each on its own device, then peer
 * copies and a kernel reading the other device's memory: the shim's tests run
 * it with and without the shim (FAKECU_DEVICES=2) and compare what it prints.
 *
 *   cuprog_multi NBUF MIB ITERS
 * Thread t makes device t's primary context current, allocates NBUF buffers of
 * MIB MiB on it, fills them and runs ITERS cyclic passes (buffer i updated
 * from buffer i+1) on its own stream; both threads run at once. Then the main
 * thread, on device 0 with peer access to device 1 enabled, copies the first
 * half of device 1's buffers over device 0's (cuMemcpyPeer, and cuMemcpyDtoD
 * across devices), launches one pass on device 0 whose x operands are device
 * 1's buffers, and hashes every buffer of both devices.
 * Prints: "dev<t> checksum=<hex>" after the threads, "peer checksum=<hex>",
 * and at exit (after the shim's report) "driver peak0=<bytes> peak1=<bytes>",
 * each device's peak of physical memory.
 */
#include "tests/shim/cuprog.h"
#include "tests/shim/fakecu.h"

#include <cuda.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NDEV 2

struct job {
	int dev;
	int nbuf, iters;
	size_t bytes;
	CUcontext ctx;
	CUfunction step;
	CUdeviceptr *buf;
	uint64_t hash;
};

static void print_driver(void)
{
	printf("driver peak0=%" PRIu64 " peak1=%" PRIu64 "\n", fakecu_device_peak_on(0),
	       fakecu_device_peak_on(1));
	fflush(stdout);
}

static uint64_t fnv(uint64_t hash, const void *p, size_t n)
{
	const unsigned char *c = p;
	for (size_t i = 0; i < n; i++)
		hash = (hash ^ c[i]) * 1099511628211ull;
	return hash;
}

/* Hashes buffers [0, nbuf) of j, read back on its own device. */
static uint64_t hash_bufs(const struct job *j, float *host, uint64_t hash)
{
	CU_CHECK(cuCtxSetCurrent(j->ctx));
	for (int b = 0; b < j->nbuf; b++) {
		CU_CHECK(cuMemcpyDtoH(host, j->buf[b], j->bytes));
		hash = fnv(hash, host, j->bytes);
	}
	return hash;
}

static void pass(CUfunction step, CUstream s, const CUdeviceptr *y, const CUdeviceptr *x, int nbuf,
                 int n, float a0)
{
	for (int b = 0; b < nbuf; b++) {
		struct step_args a = {(float *)(uintptr_t)y[b],
		                      (const float *)(uintptr_t)x[(b + 1) % nbuf],
		                      a0 + 0.01f * (float)b, n};
		void *params[] = {&a.y, &a.x, &a.a, &a.n};
		CU_CHECK(cuLaunchKernel(step, 1, 1, 1, 1, 1, 1, 0, s, params, NULL));
	}
}

static void *run(void *arg)
{
	struct job *j = arg;
	int n = (int)(j->bytes / sizeof(float));
	CUstream s;
	CU_CHECK(cuCtxSetCurrent(j->ctx));
	CU_CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	float *host = malloc(j->bytes);
	for (int b = 0; b < j->nbuf; b++) {
		CU_CHECK(cuMemAlloc(&j->buf[b], j->bytes));
		for (int i = 0; i < n; i++)
			host[i] = (float)((b * 131 + i * 7 + j->dev * 17) % 1000) / 1000.0f;
		CU_CHECK(cuMemcpyHtoD(j->buf[b], host, j->bytes));
	}
	for (int it = 0; it < j->iters; it++)
		pass(j->step, s, j->buf, j->buf, j->nbuf, n, 0.25f + 0.1f * (float)j->dev);
	CU_CHECK(cuStreamSynchronize(s));
	CU_CHECK(cuStreamDestroy(s));
	j->hash = hash_bufs(j, host, 1469598103934665603ull);
	free(host);
	return NULL;
}

int main(int argc, char **argv)
{
	int nbuf, iters;
	size_t bytes;
	if (cuprog_args(argc, argv, &nbuf, &bytes, &iters))
		return 2;
	atexit(print_driver); /* before the shim's handler: so it runs after */
	size_t step_sizes[] = {8, 8, 4, 4};
	fakecu_register_kernel("step", k_step, 4, step_sizes);

	int count = 0;
	CU_CHECK(cuInit(0));
	CU_CHECK(cuDeviceGetCount(&count));
	if (count < NDEV) {
		fprintf(stderr, "cuprog_multi: needs %d devices, the driver has %d\n", NDEV, count);
		return 77;
	}
	struct job jobs[NDEV];
	pthread_t th[NDEV];
	for (int d = 0; d < NDEV; d++) {
		CUdevice dev;
		CUmodule mod;
		jobs[d] = (struct job){.dev = d, .nbuf = nbuf, .iters = iters, .bytes = bytes};
		jobs[d].buf = calloc((size_t)nbuf, sizeof(CUdeviceptr));
		CU_CHECK(cuDeviceGet(&dev, d));
		CU_CHECK(cuDevicePrimaryCtxRetain(&jobs[d].ctx, dev));
		CU_CHECK(cuCtxSetCurrent(jobs[d].ctx));
		CU_CHECK(cuModuleLoadData(&mod, "fake image"));
		CU_CHECK(cuModuleGetFunction(&jobs[d].step, mod, "step"));
	}
	for (int d = 0; d < NDEV; d++)
		if (pthread_create(&th[d], NULL, run, &jobs[d])) {
			fprintf(stderr, "pthread_create failed\n");
			return 1;
		}
	for (int d = 0; d < NDEV; d++)
		pthread_join(th[d], NULL);
	for (int d = 0; d < NDEV; d++)
		printf("dev%d checksum=%016" PRIx64 "\n", d, jobs[d].hash);

	/* peers: device 1's first half over device 0's, then a pass on device 0
	 * reading device 1's buffers */
	struct job *j0 = &jobs[0], *j1 = &jobs[1];
	int n = (int)(bytes / sizeof(float));
	CU_CHECK(cuCtxSetCurrent(j0->ctx));
	CUresult pr = cuCtxEnablePeerAccess(j1->ctx, 0);
	if (pr != CUDA_SUCCESS && pr != CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED)
		CU_CHECK(pr);
	for (int b = 0; b < nbuf / 2; b++) {
		if (b % 2)
			CU_CHECK(cuMemcpyPeer(j0->buf[b], j0->ctx, j1->buf[b], j1->ctx, bytes));
		else
			CU_CHECK(cuMemcpyDtoD(j0->buf[b], j1->buf[b], bytes));
	}
	CUstream s;
	CU_CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	pass(j0->step, s, j0->buf, j1->buf, nbuf, n, 0.5f);
	CU_CHECK(cuStreamSynchronize(s));
	CU_CHECK(cuStreamDestroy(s));
	float *host = malloc(bytes);
	uint64_t hash = hash_bufs(j0, host, 1469598103934665603ull);
	hash = hash_bufs(j1, host, hash);
	printf("peer checksum=%016" PRIx64 "\n", hash);
	for (int d = 0; d < NDEV; d++) {
		CU_CHECK(cuCtxSetCurrent(jobs[d].ctx));
		for (int b = 0; b < nbuf; b++)
			CU_CHECK(cuMemFree(jobs[d].buf[b]));
		free(jobs[d].buf);
	}
	free(host);
	return 0;
}
