/* tests/shim/cuprog_multi_vmm.c — two devices, each with buffers and a range
 * of cuMemCreate chunks the program maps itself, used from several threads
 * and contexts: the shim's tests run it with and without the shim
 * (FAKECU_DEVICES=2), in every SPILL_SHIM_MODE, and compare what it prints.
 *
 *   cuprog_multi_vmm NBUF MIB ITERS
 * Each device has NBUF units of MIB MiB: NBUF/4 (at least 1) chunks mapped
 * into a range the program reserves (cuMemAddressReserve, cuMemCreate for
 * that device, cuMemMap, cuMemSetAccess for both devices), the rest buffers
 * of cuMemAlloc. Unit i is updated from unit i+1 by the kernel y = y/2 + a*x.
 *  0. First of all, with device 0's context current, one chunk for device 1
 *     ("early") is made and mapped into a range of its own: a device the
 *     program has not used yet.
 *  1. Two threads, each on its own device, build that device's units, fill
 *     them and run ITERS cyclic passes on a stream of their own.
 *     Prints "dev<t> checksum=<hex>".
 *  2. The main thread switches contexts before every launch: ITERS passes,
 *     unit b of device 0 then unit b of device 1, each on its context's
 *     legacy stream; then a pass on device 0 whose x operands are device 1's
 *     chunks (peer access); then every unit of both devices and the early
 *     chunk are read back with device 0's context current.
 *     Prints "switch checksum=<hex>".
 *  3. Two threads, each with its own device's context current, free the
 *     other device's buffers and unmap and release its range (thread 0 the
 *     early chunk's too): memory unmapped by a thread and a context that did
 *     not map it.
 *  4. Chunk X is made for device 1 with device 1's context current, chunk Y
 *     for device 1 with device 0's current; both are mapped into a new range
 *     with device 0's context current, filled, updated twice on device 1,
 *     read back with device 0's current; cuMemRetainAllocationHandle of the
 *     range's start gives X back; another thread unmaps and releases them.
 *     Prints "cross checksum=<hex>".
 * At exit (after the shim's report): "driver peak0=<bytes> peak1=<bytes>
 * prefetched0=<bytes> prefetched1=<bytes>", each device's peak of physical
 * memory and the managed bytes prefetched to it.
 */
#include "tests/shim/cuprog.h"
#include "tests/shim/fakecu.h"

#include <cuda.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NDEV      2
#define FNV_START 1469598103934665603ull

/* One device's units: chunks first (in one reserved range), then buffers. */
struct dev_units {
	int dev;
	CUcontext ctx;
	CUfunction step;
	int nunit, nchunk;
	size_t bytes;
	CUdeviceptr va; /* the range of its chunks */
	CUmemGenericAllocationHandle *h;
	CUdeviceptr *unit;
	uint64_t hash;
};

static struct dev_units devs[NDEV];
static int iters;

static void print_driver(void)
{
	printf("driver peak0=%" PRIu64 " peak1=%" PRIu64 " prefetched0=%" PRIu64
	       " prefetched1=%" PRIu64 "\n",
	       fakecu_device_peak_on(0), fakecu_device_peak_on(1), fakecu_prefetched_on(0),
	       fakecu_prefetched_on(1));
	fflush(stdout);
}

static uint64_t fnv(uint64_t hash, const void *p, size_t n)
{
	const unsigned char *c = p;
	for (size_t i = 0; i < n; i++)
		hash = (hash ^ c[i]) * 1099511628211ull;
	return hash;
}

static void step(CUfunction f, CUstream s, CUdeviceptr y, CUdeviceptr x, float a, int n)
{
	struct step_args sa = {(float *)(uintptr_t)y, (const float *)(uintptr_t)x, a, n};
	void *params[] = {&sa.y, &sa.x, &sa.a, &sa.n};
	CU_CHECK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, params, NULL));
}

static void fill(CUdeviceptr at, float *host, size_t bytes, int seed)
{
	int n = (int)(bytes / sizeof(float));
	for (int i = 0; i < n; i++)
		host[i] = (float)((seed * 131 + i * 7) % 1000) / 1000.0f;
	CU_CHECK(cuMemcpyHtoD(at, host, bytes));
}

static uint64_t hash_range(uint64_t hash, CUdeviceptr at, float *host, size_t bytes)
{
	CU_CHECK(cuMemcpyDtoH(host, at, bytes));
	return fnv(hash, host, bytes);
}

static CUmemAllocationProp chunk_prop(int dev)
{
	return (CUmemAllocationProp){.type = CU_MEM_ALLOCATION_TYPE_PINNED,
	                             .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev}};
}

/* Maps h at `at`, readable and writable from both devices. */
static void map_both(CUdeviceptr at, size_t bytes, CUmemGenericAllocationHandle h)
{
	CUmemAccessDesc acc[NDEV];
	for (int d = 0; d < NDEV; d++)
		acc[d] =
		    (CUmemAccessDesc){.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = d},
		                      .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
	CU_CHECK(cuMemMap(at, bytes, 0, h, 0));
	CU_CHECK(cuMemSetAccess(at, bytes, acc, NDEV));
}

/* 1: device u->dev's units, built, filled and updated by their own thread. */
static void *build(void *arg)
{
	struct dev_units *u = arg;
	int n = (int)(u->bytes / sizeof(float));
	CU_CHECK(cuCtxSetCurrent(u->ctx));
	CUmemAllocationProp prop = chunk_prop(u->dev);
	CU_CHECK(cuMemAddressReserve(&u->va, (size_t)u->nchunk * u->bytes, 0, 0, 0));
	float *host = malloc(u->bytes);
	for (int i = 0; i < u->nunit; i++) {
		if (i < u->nchunk) {
			u->unit[i] = u->va + (size_t)i * u->bytes;
			CU_CHECK(cuMemCreate(&u->h[i], u->bytes, &prop, 0));
			map_both(u->unit[i], u->bytes, u->h[i]);
		} else {
			CU_CHECK(cuMemAlloc(&u->unit[i], u->bytes));
		}
		fill(u->unit[i], host, u->bytes, i + 17 * u->dev);
	}
	CUstream s;
	CU_CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	for (int it = 0; it < iters; it++)
		for (int i = 0; i < u->nunit; i++)
			step(u->step, s, u->unit[i], u->unit[(i + 1) % u->nunit],
			     0.25f + 0.1f * (float)u->dev + 0.01f * (float)i, n);
	CU_CHECK(cuStreamSynchronize(s));
	CU_CHECK(cuStreamDestroy(s));
	u->hash = FNV_START;
	for (int i = 0; i < u->nunit; i++)
		u->hash = hash_range(u->hash, u->unit[i], host, u->bytes);
	free(host);
	return NULL;
}

/* 3: the other device's memory, let go from this device's context. */
struct release_job {
	CUcontext ctx;
	struct dev_units *other;
	CUdeviceptr early_va; /* 0, or a range of one chunk to let go as well */
	CUmemGenericAllocationHandle early_h;
};

static void *release(void *arg)
{
	struct release_job *j = arg;
	struct dev_units *u = j->other;
	CU_CHECK(cuCtxSetCurrent(j->ctx));
	for (int i = u->nchunk; i < u->nunit; i++)
		CU_CHECK(cuMemFree(u->unit[i]));
	CU_CHECK(cuMemUnmap(u->va, (size_t)u->nchunk * u->bytes));
	for (int i = 0; i < u->nchunk; i++)
		CU_CHECK(cuMemRelease(u->h[i]));
	CU_CHECK(cuMemAddressFree(u->va, (size_t)u->nchunk * u->bytes));
	if (j->early_va) {
		CU_CHECK(cuMemUnmap(j->early_va, u->bytes));
		CU_CHECK(cuMemRelease(j->early_h));
		CU_CHECK(cuMemAddressFree(j->early_va, u->bytes));
	}
	return NULL;
}

/* 4: chunks X and Y let go by a thread with device 1's context current. */
struct cross_job {
	CUcontext ctx;
	CUdeviceptr va;
	size_t bytes;
	CUmemGenericAllocationHandle h[2];
};

static void *cross_release(void *arg)
{
	struct cross_job *j = arg;
	CU_CHECK(cuCtxSetCurrent(j->ctx));
	CU_CHECK(cuMemUnmap(j->va, 2 * j->bytes));
	for (int i = 0; i < 2; i++)
		CU_CHECK(cuMemRelease(j->h[i]));
	CU_CHECK(cuMemAddressFree(j->va, 2 * j->bytes));
	return NULL;
}

static void join(pthread_t *th, int n)
{
	for (int i = 0; i < n; i++)
		pthread_join(th[i], NULL);
}

static void spawn(pthread_t *th, void *(*fn)(void *), void *arg)
{
	if (pthread_create(th, NULL, fn, arg)) {
		fprintf(stderr, "pthread_create failed\n");
		exit(1);
	}
}

int main(int argc, char **argv)
{
	int nbuf;
	size_t bytes;
	if (cuprog_args(argc, argv, &nbuf, &bytes, &iters) || nbuf < 2)
		return 2;
	atexit(print_driver); /* before the shim's handler: so it runs after */
	size_t step_sizes[] = {8, 8, 4, 4};
	fakecu_register_kernel("step", k_step, 4, step_sizes);
	int n = (int)(bytes / sizeof(float));

	int count = 0;
	CU_CHECK(cuInit(0));
	CU_CHECK(cuDeviceGetCount(&count));
	if (count < NDEV) {
		fprintf(stderr, "cuprog_multi_vmm: needs %d devices, the driver has %d\n", NDEV,
		        count);
		return 77;
	}
	for (int d = 0; d < NDEV; d++) {
		CUdevice dev;
		CUmodule mod;
		struct dev_units *u = &devs[d];
		*u = (struct dev_units){.dev = d, .nunit = nbuf, .bytes = bytes};
		u->nchunk = nbuf / 4 ? nbuf / 4 : 1;
		u->h = calloc((size_t)u->nchunk, sizeof(*u->h));
		u->unit = calloc((size_t)nbuf, sizeof(*u->unit));
		CU_CHECK(cuDeviceGet(&dev, d));
		CU_CHECK(cuDevicePrimaryCtxRetain(&u->ctx, dev));
		CU_CHECK(cuCtxSetCurrent(u->ctx));
		CU_CHECK(cuModuleLoadData(&mod, "fake image"));
		CU_CHECK(cuModuleGetFunction(&u->step, mod, "step"));
	}
	struct dev_units *u0 = &devs[0], *u1 = &devs[1];
	size_t gran = 0;
	CUmemAllocationProp prop1 = chunk_prop(1);
	CU_CHECK(cuMemGetAllocationGranularity(&gran, &prop1, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
	if (bytes % gran) {
		fprintf(stderr, "MIB must be a multiple of the granularity (%zu bytes)\n", gran);
		return 2;
	}
	float *host = malloc(bytes);

	/* 0: a chunk for device 1 before anything ran there, device 0 current */
	CU_CHECK(cuCtxSetCurrent(u0->ctx));
	CUdeviceptr early_va;
	CUmemGenericAllocationHandle early_h;
	CU_CHECK(cuMemAddressReserve(&early_va, bytes, 0, 0, 0));
	CU_CHECK(cuMemCreate(&early_h, bytes, &prop1, 0));
	map_both(early_va, bytes, early_h);
	fill(early_va, host, bytes, 999);

	/* 1: both devices at once, each on its own thread */
	pthread_t th[NDEV];
	for (int d = 0; d < NDEV; d++)
		spawn(&th[d], build, &devs[d]);
	join(th, NDEV);
	for (int d = 0; d < NDEV; d++)
		printf("dev%d checksum=%016" PRIx64 "\n", d, devs[d].hash);

	/* 2: a context switch before every launch, then a peer pass */
	for (int it = 0; it < iters; it++)
		for (int i = 0; i < nbuf; i++)
			for (int d = 0; d < NDEV; d++) {
				struct dev_units *u = &devs[d];
				CU_CHECK(cuCtxSetCurrent(u->ctx));
				step(u->step, NULL, u->unit[i], u->unit[(i + 1) % nbuf],
				     0.3f + 0.01f * (float)(i + d), n);
			}
	/* device 1's legacy stream is not device 0's: its passes end first */
	CU_CHECK(cuCtxSetCurrent(u1->ctx));
	CU_CHECK(cuCtxSynchronize());
	CU_CHECK(cuCtxSetCurrent(u0->ctx));
	CUresult pr = cuCtxEnablePeerAccess(u1->ctx, 0);
	if (pr != CUDA_SUCCESS && pr != CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED)
		CU_CHECK(pr);
	for (int i = 0; i < nbuf; i++)
		step(u0->step, NULL, u0->unit[i], u1->unit[i % u1->nchunk], 0.5f, n);
	step(u0->step, NULL, u0->unit[0], early_va, 0.125f, n);
	for (int d = NDEV - 1; d >= 0; d--) {
		CU_CHECK(cuCtxSetCurrent(devs[d].ctx));
		CU_CHECK(cuCtxSynchronize());
	}
	uint64_t hash = FNV_START;
	for (int d = 0; d < NDEV; d++)
		for (int i = 0; i < nbuf; i++)
			hash = hash_range(hash, devs[d].unit[i], host, bytes);
	hash = hash_range(hash, early_va, host, bytes);
	printf("switch checksum=%016" PRIx64 "\n", hash);

	/* 3: each thread lets go of the other device's memory */
	struct release_job rj[NDEV] = {
	    {.ctx = u0->ctx, .other = u1, .early_va = early_va, .early_h = early_h},
	    {.ctx = u1->ctx, .other = u0}};
	for (int d = 0; d < NDEV; d++)
		spawn(&th[d], release, &rj[d]);
	join(th, NDEV);

	/* 4: chunks of device 1 made and mapped from device 0's context */
	struct cross_job cj = {.ctx = u1->ctx, .bytes = bytes};
	CU_CHECK(cuCtxSetCurrent(u1->ctx));
	CU_CHECK(cuMemCreate(&cj.h[0], bytes, &prop1, 0));
	CU_CHECK(cuCtxSetCurrent(u0->ctx));
	CU_CHECK(cuMemCreate(&cj.h[1], bytes, &prop1, 0));
	CUmemAllocationProp got;
	CU_CHECK(cuMemGetAllocationPropertiesFromHandle(&got, cj.h[1]));
	if (got.location.id != 1) {
		fprintf(stderr, "cuprog_multi_vmm: a chunk of device 1 says device %d\n",
		        got.location.id);
		return 1;
	}
	CU_CHECK(cuMemAddressReserve(&cj.va, 2 * bytes, 0, 0, 0));
	for (int i = 0; i < 2; i++) {
		map_both(cj.va + (size_t)i * bytes, bytes, cj.h[i]);
		fill(cj.va + (size_t)i * bytes, host, bytes, 500 + i);
	}
	CU_CHECK(cuCtxSetCurrent(u1->ctx));
	step(u1->step, NULL, cj.va, cj.va + bytes, 0.75f, n);
	step(u1->step, NULL, cj.va + bytes, cj.va, 0.625f, n);
	CU_CHECK(cuCtxSynchronize());
	CU_CHECK(cuCtxSetCurrent(u0->ctx));
	hash = FNV_START;
	for (int i = 0; i < 2; i++)
		hash = hash_range(hash, cj.va + (size_t)i * bytes, host, bytes);
	CUmemGenericAllocationHandle back;
	CU_CHECK(cuMemRetainAllocationHandle(&back, (void *)(uintptr_t)cj.va));
	if (back != cj.h[0]) {
		fprintf(stderr, "cuprog_multi_vmm: the range's handle is not chunk X's\n");
		return 1;
	}
	CU_CHECK(cuMemRelease(back));
	spawn(&th[0], cross_release, &cj);
	join(th, 1);
	printf("cross checksum=%016" PRIx64 "\n", hash);

	for (int d = 0; d < NDEV; d++) {
		free(devs[d].h);
		free(devs[d].unit);
	}
	free(host);
	return 0;
}
