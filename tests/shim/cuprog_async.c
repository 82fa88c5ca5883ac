/* tests/shim/cuprog_async.c — stream-ordered allocation, pools and strided
 * copies: the shim's tests run it with and without the shim at 3x the budget
 * and compare what it prints.
 *
 *   cuprog_async NBUF MIB ITERS
 * NBUF buffers of MIB MiB, half from cuMemAllocAsync (the default pool) on
 * stream A, half from a pool of its own (cuMemAllocFromPoolAsync) on stream
 * B. Each iteration updates buffer b from buffer b+1 on A; a temporary from
 * cuMemAllocAsync takes half of buffer b through a pitched cuMemcpy2DAsync,
 * feeds it back and is freed with cuMemFreeAsync (the next one reuses it);
 * a cuMemcpy3DAsync and a cuMemcpyPeerAsync move parts of buffers. Then:
 *   - reuse across streams: X from A gets a slow kernel on A that fills it
 *     late, is freed on A, and Y is allocated on B (same address when the
 *     allocator reuses it, "reuse=1") and set on B. If the reuse did not wait
 *     for A's work before the free, A's late fill lands in Y: "reuse: ok" or
 *     "reuse: CORRUPTED";
 *   - an exportable pool (POSIX file descriptor handles), exported, whose two
 *     buffers join the checksum: the shim passes it through.
 * Prints "checksum=<hex>", "reuse=<0|1>", "reuse: ok|CORRUPTED" and the
 * emulated device's peak use, "device peak=<bytes>".
 */
#include "tests/shim/cuprog.h"
#include "tests/shim/fakecu.h"

#include <cuda.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct late_args {
	int *p;
	int v, n, usec;
};

/* Sleeps, then fills: work still queued on its stream long after the launch. */
static void k_late_fill(const void *a)
{
	const struct late_args *f = a;
	usleep((useconds_t)f->usec);
	for (int i = 0; i < f->n; i++)
		f->p[i] = f->v;
}

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
	const unsigned char *c = p;
	for (size_t i = 0; i < n; i++)
		h = (h ^ c[i]) * 1099511628211ull;
	return h;
}

static CUfunction step, late;

static void launch_step(CUdeviceptr y, CUdeviceptr x, float a, int n, CUstream s)
{
	struct step_args sa = {(float *)(uintptr_t)y, (const float *)(uintptr_t)x, a, n};
	void *params[] = {&sa.y, &sa.x, &sa.a, &sa.n};
	CU_CHECK(cuLaunchKernel(step, 1, 1, 1, 1, 1, 1, 0, s, params, NULL));
}

/* X filled late on a, freed on a; Y allocated on b and set there. */
static int reuse_across_streams(size_t bytes, CUstream a, CUstream b)
{
	int n = (int)(bytes / sizeof(int));
	CUdeviceptr x, y;
	CU_CHECK(cuMemAllocAsync(&x, bytes, a));
	struct late_args la = {(int *)(uintptr_t)x, 0x0bad0bad, n, 100000};
	void *params[] = {&la.p, &la.v, &la.n, &la.usec};
	CU_CHECK(cuLaunchKernel(late, 1, 1, 1, 1, 1, 1, 0, a, params, NULL));
	CU_CHECK(cuMemFreeAsync(x, a));
	CU_CHECK(cuMemAllocAsync(&y, bytes, b));
	printf("reuse=%d\n", y == x);
	CU_CHECK(cuMemsetD32Async(y, 0x600d600d, (size_t)n, b));
	int *h = malloc(bytes);
	CU_CHECK(cuMemcpyDtoHAsync(h, y, bytes, b));
	CU_CHECK(cuStreamSynchronize(b));
	int bad = 0;
	for (int i = 0; i < n; i++)
		bad += h[i] != 0x600d600d;
	CU_CHECK(cuCtxSynchronize()); /* a late fill has landed by now */
	CU_CHECK(cuMemcpyDtoH(h, y, bytes));
	for (int i = 0; i < n; i++)
		bad += h[i] != 0x600d600d;
	printf("reuse: %s\n", bad ? "CORRUPTED" : "ok");
	free(h);
	CU_CHECK(cuMemFreeAsync(y, b));
	CU_CHECK(cuStreamSynchronize(b));
	return bad != 0;
}

int main(int argc, char **argv)
{
	int nbuf, iters;
	size_t bytes;
	if (cuprog_args(argc, argv, &nbuf, &bytes, &iters) || nbuf < 4)
		return 2;
	int n = (int)(bytes / sizeof(float));
	size_t step_sizes[] = {8, 8, 4, 4}, late_sizes[] = {8, 4, 4, 4};
	fakecu_register_kernel("step", k_step, 4, step_sizes);
	fakecu_register_kernel("late_fill", k_late_fill, 4, late_sizes);

	CUdevice dev;
	CUcontext ctx;
	CUmodule mod;
	CUstream a, b;
	CU_CHECK(cuInit(0));
	CU_CHECK(cuDeviceGet(&dev, 0));
	CU_CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
	CU_CHECK(cuCtxSetCurrent(ctx));
	CU_CHECK(cuModuleLoadData(&mod, "fake image"));
	CU_CHECK(cuModuleGetFunction(&step, mod, "step"));
	CU_CHECK(cuModuleGetFunction(&late, mod, "late_fill"));
	CU_CHECK(cuStreamCreate(&a, CU_STREAM_NON_BLOCKING));
	CU_CHECK(cuStreamCreate(&b, CU_STREAM_NON_BLOCKING));
	CUmemPoolProps props = {.allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
	                        .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
	CUmemoryPool pool;
	CU_CHECK(cuMemPoolCreate(&pool, &props));

	CUdeviceptr *buf = calloc((size_t)nbuf, sizeof(*buf));
	float *host = malloc(bytes);
	for (int i = 0; i < nbuf; i++) {
		CUstream s = i % 2 ? b : a;
		if (i % 2)
			CU_CHECK(cuMemAllocFromPoolAsync(&buf[i], bytes, pool, s));
		else
			CU_CHECK(cuMemAllocAsync(&buf[i], bytes, s));
		for (int j = 0; j < n; j++)
			host[j] = (float)((i * 131 + j * 7) % 1000) / 1000.0f;
		CU_CHECK(cuMemcpyHtoDAsync(buf[i], host, bytes, s));
	}
	CU_CHECK(cuStreamSynchronize(b));

	/* buffer b as rows of 8 KiB; the temporary takes the first 4 KiB of each */
	size_t row = 8192, half = 4096, rows = bytes / row;
	for (int it = 0; it < iters; it++) {
		for (int i = 0; i < nbuf; i++) {
			launch_step(buf[i], buf[(i + 1) % nbuf], 0.25f + 0.01f * (float)i, n, a);
			CUdeviceptr tmp;
			CU_CHECK(cuMemAllocAsync(&tmp, bytes, a));
			CUDA_MEMCPY2D c2 = {.srcMemoryType = CU_MEMORYTYPE_DEVICE,
			                    .srcDevice = buf[i],
			                    .srcPitch = row,
			                    .dstMemoryType = CU_MEMORYTYPE_DEVICE,
			                    .dstDevice = tmp,
			                    .dstPitch = half,
			                    .WidthInBytes = half,
			                    .Height = rows};
			CU_CHECK(cuMemcpy2DAsync(&c2, a));
			launch_step(buf[(i + 2) % nbuf], tmp, 0.125f,
			            (int)(rows * half / sizeof(float)), a);
			CU_CHECK(cuMemFreeAsync(tmp, a));
		}
		/* 4 slices of 4 rows of 1 KiB, from a 2 KiB x 8 layout to a packed one */
		CUDA_MEMCPY3D c3 = {.srcXInBytes = 512,
		                    .srcY = 2,
		                    .srcZ = 1,
		                    .srcMemoryType = CU_MEMORYTYPE_DEVICE,
		                    .srcDevice = buf[it % nbuf],
		                    .srcPitch = 2048,
		                    .srcHeight = 8,
		                    .dstMemoryType = CU_MEMORYTYPE_UNIFIED,
		                    .dstDevice = buf[(it + 3) % nbuf],
		                    .dstPitch = 1024,
		                    .dstHeight = 4,
		                    .WidthInBytes = 1024,
		                    .Height = 4,
		                    .Depth = 4};
		CU_CHECK(cuMemcpy3DAsync(&c3, a));
		CU_CHECK(cuMemcpyPeerAsync(buf[(it + 1) % nbuf] + 4096, ctx, buf[(it + 2) % nbuf],
		                           ctx, 65536, a));
	}
	CU_CHECK(cuStreamSynchronize(a));

	int corrupted = reuse_across_streams(bytes, a, b);

	/* an exportable pool, exported: passed through by the shim */
	CUmemPoolProps xprops = props;
	xprops.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
	CUmemoryPool xpool;
	CUdeviceptr xb[2];
	int fd = -1;
	CU_CHECK(cuMemPoolCreate(&xpool, &xprops));
	CU_CHECK(cuMemPoolExportToShareableHandle(&fd, xpool,
	                                          CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
	close(fd);
	for (int i = 0; i < 2; i++) {
		CU_CHECK(cuMemAllocFromPoolAsync(&xb[i], bytes, xpool, a));
		CU_CHECK(cuMemcpyDtoDAsync(xb[i], buf[i], bytes, a));
		launch_step(xb[i], buf[i + 2], 0.5f, n, a);
	}
	CU_CHECK(cuStreamSynchronize(a));

	uint64_t hash = 1469598103934665603ull;
	for (int i = 0; i < nbuf + 2; i++) {
		CU_CHECK(cuMemcpyDtoH(host, i < nbuf ? buf[i] : xb[i - nbuf], bytes));
		hash = fnv(hash, host, bytes);
	}
	printf("checksum=%016" PRIx64 "\n", hash);
	for (int i = 0; i < 2; i++)
		CU_CHECK(cuMemFreeAsync(xb[i], a));
	for (int i = 0; i < nbuf; i++)
		CU_CHECK(cuMemFreeAsync(buf[i], i % 2 ? b : a));
	CU_CHECK(cuCtxSynchronize());
	CU_CHECK(cuMemPoolDestroy(xpool));
	CU_CHECK(cuMemPoolDestroy(pool));
	printf("device peak=%" PRIu64 "\n", fakecu_device_peak());
	CU_CHECK(cuStreamDestroy(a));
	CU_CHECK(cuStreamDestroy(b));
	free(buf);
	free(host);
	return corrupted;
}
