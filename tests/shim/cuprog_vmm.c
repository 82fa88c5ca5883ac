/* tests/shim/cuprog_vmm.c — a program that maps its own device memory, as
 * PyTorch's expandable segments do: the shim's tests run it with and without
 * the shim at 3x the budget and compare what it prints.
 *
 *   cuprog_vmm NBUF MIB ITERS
 * One reserved range of NBUF chunks of MIB MiB (cuMemAddressReserve), each a
 * cuMemCreate chunk mapped into it (cuMemMap, cuMemSetAccess) and filled from
 * the host. ITERS cyclic passes update chunk i from chunk i+1; then every
 * chunk is read back and hashed (FNV-1a), the chunks are unmapped and
 * released, half of the range is mapped again with new chunks (same
 * addresses), written and read once more, and everything is freed. A chunk
 * created with a shareable handle type (exportable) joins the first pass: the
 * shim pins it. Prints "checksum=<hex>", "remap=<hex>" and the emulated
 * device's peak use, "device peak=<bytes>".
 */
#include "tests/shim/cuprog.h"
#include "tests/shim/fakecu.h"

#include <cuda.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
	const unsigned char *c = p;
	for (size_t i = 0; i < n; i++)
		h = (h ^ c[i]) * 1099511628211ull;
	return h;
}

static CUfunction step;

static void launch_step(CUdeviceptr y, CUdeviceptr x, float a, int n, CUstream s)
{
	struct step_args sa = {(float *)(uintptr_t)y, (const float *)(uintptr_t)x, a, n};
	void *params[] = {&sa.y, &sa.x, &sa.a, &sa.n};
	CU_CHECK(cuLaunchKernel(step, 1, 1, 1, 1, 1, 1, 0, s, params, NULL));
}

static void map_chunk(CUdeviceptr at, size_t bytes, const CUmemAllocationProp *prop,
                      CUmemGenericAllocationHandle *h)
{
	CUmemAccessDesc acc = {.location = prop->location,
	                       .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
	CU_CHECK(cuMemCreate(h, bytes, prop, 0));
	CU_CHECK(cuMemMap(at, bytes, 0, *h, 0));
	CU_CHECK(cuMemSetAccess(at, bytes, &acc, 1));
}

static void fill(CUdeviceptr at, float *host, int n, int seed, size_t bytes)
{
	for (int j = 0; j < n; j++)
		host[j] = (float)((seed * 131 + j * 7) % 1000) / 1000.0f;
	CU_CHECK(cuMemcpyHtoD(at, host, bytes));
}

int main(int argc, char **argv)
{
	int nbuf, iters;
	size_t bytes;
	if (cuprog_args(argc, argv, &nbuf, &bytes, &iters) || nbuf < 2)
		return 2;
	int n = (int)(bytes / sizeof(float));
	size_t step_sizes[] = {8, 8, 4, 4};
	fakecu_register_kernel("step", k_step, 4, step_sizes);

	CUdevice dev;
	CUcontext ctx;
	CUmodule mod;
	CUstream s;
	CU_CHECK(cuInit(0));
	CU_CHECK(cuDeviceGet(&dev, 0));
	CU_CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
	CU_CHECK(cuCtxSetCurrent(ctx));
	CU_CHECK(cuModuleLoadData(&mod, "fake image"));
	CU_CHECK(cuModuleGetFunction(&step, mod, "step"));
	CU_CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));

	CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
	                            .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
	size_t gran = 0;
	CU_CHECK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
	if (bytes % gran) {
		fprintf(stderr, "MIB must be a multiple of the granularity (%zu bytes)\n", gran);
		return 2;
	}
	size_t span = (size_t)nbuf * bytes;
	CUdeviceptr va;
	CU_CHECK(cuMemAddressReserve(&va, span + bytes, 0, 0, 0));
	CUmemGenericAllocationHandle *h = calloc((size_t)nbuf + 1, sizeof(*h));
	float *host = malloc(bytes);
	for (int i = 0; i < nbuf; i++) {
		map_chunk(va + (size_t)i * bytes, bytes, &prop, &h[i]);
		fill(va + (size_t)i * bytes, host, n, i, bytes);
	}
	/* an exportable chunk at the end of the range */
	CUmemAllocationProp xprop = prop;
	xprop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
	CUdeviceptr xa = va + span;
	map_chunk(xa, bytes, &xprop, &h[nbuf]);
	fill(xa, host, n, 999, bytes);

	for (int it = 0; it < iters; it++) {
		for (int i = 0; i < nbuf; i++)
			launch_step(va + (size_t)i * bytes, va + (size_t)((i + 1) % nbuf) * bytes,
			            0.25f + 0.01f * (float)i, n, s);
		launch_step(xa, va + (size_t)(it % nbuf) * bytes, 0.5f, n, s);
	}
	CU_CHECK(cuStreamSynchronize(s));
	uint64_t hash = 1469598103934665603ull;
	for (int i = 0; i <= nbuf; i++) {
		CU_CHECK(cuMemcpyDtoH(host, va + (size_t)i * bytes, bytes));
		hash = fnv(hash, host, bytes);
	}
	printf("checksum=%016" PRIx64 "\n", hash);

	/* unmap and release everything, then map half the range again */
	CU_CHECK(cuMemUnmap(va, span + bytes));
	for (int i = 0; i <= nbuf; i++)
		CU_CHECK(cuMemRelease(h[i]));
	int half = nbuf / 2;
	for (int i = 0; i < half; i++) {
		map_chunk(va + (size_t)i * bytes, bytes, &prop, &h[i]);
		fill(va + (size_t)i * bytes, host, n, 7 * i + 1, bytes);
	}
	for (int i = 0; i < half; i++)
		launch_step(va + (size_t)i * bytes, va + (size_t)((i + 1) % half) * bytes, 0.75f, n,
		            s);
	CU_CHECK(cuStreamSynchronize(s));
	hash = 1469598103934665603ull;
	for (int i = 0; i < half; i++) {
		CU_CHECK(cuMemcpyDtoH(host, va + (size_t)i * bytes, bytes));
		hash = fnv(hash, host, bytes);
	}
	printf("remap=%016" PRIx64 "\n", hash);
	for (int i = 0; i < half; i++) {
		CU_CHECK(cuMemUnmap(va + (size_t)i * bytes, bytes));
		CU_CHECK(cuMemRelease(h[i]));
	}
	CU_CHECK(cuMemAddressFree(va, span + bytes));
	printf("device peak=%" PRIu64 "\n", fakecu_device_peak());
	CU_CHECK(cuStreamDestroy(s));
	free(h);
	free(host);
	return 0;
}
