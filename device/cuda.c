/* device/cuda.c — the cuda backend: real GPUs through cudart.
 *
 * Plain C against the runtime API (libcudart, linked with an rpath); the
 * driver's virtual-memory calls (cuMemCreate, cuMemMap, ...) are resolved at
 * open through cudaGetDriverEntryPointByVersion, never by linking -lcuda, so a
 * binary starts on a machine with no driver and reports "no CUDA device".
 * Streams are non-blocking cudaStreams; a dev_event holds one cudaEvent per
 * device, made on its first record there (CUDA events belong to one device).
 * Event times come from cudaEventElapsedTime against a reference event per
 * device recorded at open, so they share dev_now()'s clock (resolution ~1 µs
 * at first, coarser as the float milliseconds grow over hours).
 * Every call sets the current device first: CUDA's current device is per thread.
 * Link bandwidths: from SPILL_PROFILE when one is named, otherwise H2D and D2H
 * are measured at open and the rest (disk, peer) taken from the default profile.
 */
#include "device/internal.h"

#include "common/log.h"
#include "common/stats.h"

#include <stdlib.h>
#include <string.h>

#if SPILL_HAVE_CUDA
#include <cuda.h>
#include <cuda_runtime_api.h>

struct cuda_drv {
	CUresult (*mem_create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
	                       unsigned long long);
	CUresult (*mem_release)(CUmemGenericAllocationHandle);
	CUresult (*mem_map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
	                    unsigned long long);
	CUresult (*mem_unmap)(CUdeviceptr, size_t);
	CUresult (*mem_set_access)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
	CUresult (*addr_reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
	CUresult (*addr_free)(CUdeviceptr, size_t);
	CUresult (*granularity)(size_t *, const CUmemAllocationProp *,
	                        CUmemAllocationGranularity_flags);
	CUresult (*error_string)(CUresult, const char **);
};

struct cuda_ctx {
	struct cuda_drv drv;
	cudaEvent_t ref[DEV_MAX]; /* recorded at open, completed at ref_t */
	double ref_t[DEV_MAX];
	/* growing host regions (host_grow): host-located cuMemCreate chunks of
	 * location type host_loc, opened to the CPU as host_acc */
	int host_grow;
	CUmemLocationType host_loc, host_acc;
};

struct cuda_event {
	cudaEvent_t ev[DEV_MAX];
	int last_dev; /* device of the last record; -1 = never recorded */
};

static struct cuda_ctx *cctx(const struct dev_ctx *ctx)
{
	return ctx->impl;
}

/* Maps a runtime error to -errno with the detail in the message; clears the
 * (non-sticky) error so it does not surface in a later, unrelated call. */
static int cuda_err(cudaError_t e, const char *what)
{
	cudaGetLastError();
	int rc = e == cudaErrorMemoryAllocation                               ? -ENOMEM
	         : e == cudaErrorInvalidValue                                 ? -EINVAL
	         : e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver ? -ENODEV
	                                                                      : -EIO;
	return sp_error(rc, "cuda: %s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

#define CU_RT(call, what)                                \
	do {                                             \
		cudaError_t cu_rt_e_ = (call);           \
		if (cu_rt_e_ != cudaSuccess)             \
			return cuda_err(cu_rt_e_, what); \
	} while (0)

static int drv_err(const struct cuda_ctx *c, CUresult r, const char *what)
{
	const char *s = NULL;
	if (c->drv.error_string)
		c->drv.error_string(r, &s);
	int rc = r == CUDA_ERROR_OUT_OF_MEMORY   ? -ENOMEM
	         : r == CUDA_ERROR_INVALID_VALUE ? -EINVAL
	                                         : -EIO;
	return sp_error(rc, "cuda driver: %s: %s (%d)", what, s ? s : "unknown error", (int)r);
}

#define CU_DRV(c, call, what)                                 \
	do {                                                  \
		CUresult cu_drv_r_ = (call);                  \
		if (cu_drv_r_ != CUDA_SUCCESS)                \
			return drv_err((c), cu_drv_r_, what); \
	} while (0)

int dev_cuda_available(void)
{
	static int avail = -1;
	int a = __atomic_load_n(&avail, __ATOMIC_RELAXED);
	if (a < 0) {
		int n = 0;
		a = cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
		cudaGetLastError();
		__atomic_store_n(&avail, a, __ATOMIC_RELAXED);
	}
	return a;
}

static int resolve(const char *name, void **fn)
{
	enum cudaDriverEntryPointQueryResult q;
	cudaError_t e = cudaGetDriverEntryPointByVersion(name, fn, 12000, cudaEnableDefault, &q);
	if (e != cudaSuccess || q != cudaDriverEntryPointSuccess || !*fn) {
		cudaGetLastError();
		return sp_error(-ENOSYS, "cuda: driver entry point %s not found", name);
	}
	return 0;
}

static int resolve_driver(struct cuda_drv *d)
{
	SP_CHECK(resolve("cuGetErrorString", (void **)&d->error_string));
	SP_CHECK(resolve("cuMemCreate", (void **)&d->mem_create));
	SP_CHECK(resolve("cuMemRelease", (void **)&d->mem_release));
	SP_CHECK(resolve("cuMemMap", (void **)&d->mem_map));
	SP_CHECK(resolve("cuMemUnmap", (void **)&d->mem_unmap));
	SP_CHECK(resolve("cuMemSetAccess", (void **)&d->mem_set_access));
	SP_CHECK(resolve("cuMemAddressReserve", (void **)&d->addr_reserve));
	SP_CHECK(resolve("cuMemAddressFree", (void **)&d->addr_free));
	SP_CHECK(resolve("cuMemGetAllocationGranularity", (void **)&d->granularity));
	return 0;
}

static CUmemAllocationProp chunk_prop(int dev)
{
	CUmemAllocationProp p;
	memset(&p, 0, sizeof(p));
	p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	p.location.id = dev;
	return p;
}

/* FP32 lanes per SM by architecture, for the peak FLOP/s the cost model uses. */
static int fp32_per_sm(int major, int minor)
{
	if (major >= 9)
		return 128;
	if (major == 8)
		return minor == 0 ? 64 : 128;
	if (major == 7)
		return 64;
	return 128;
}

static int cuda_open_dev(struct dev_ctx *ctx, int d, const struct dev_config *cfg)
{
	struct cuda_ctx *c = cctx(ctx);
	struct dev_info *in = &ctx->info[d];
	struct cudaDeviceProp prop;
	CU_RT(cudaSetDevice(d), "cudaSetDevice");
	CU_RT(cudaFree(NULL), "initialising the device");
	CU_RT(cudaGetDeviceProperties(&prop, d), "cudaGetDeviceProperties");
	size_t free_b = 0, total_b = 0;
	CU_RT(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
	int clock_khz = 0, mem_khz = 0;
	CU_RT(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, d), "clock rate");
	CU_RT(cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, d), "memory clock");
	snprintf(in->name, sizeof(in->name), "%.63s", prop.name);
	/* Leave room for the CUDA context's own allocations (cuBLAS workspaces). */
	uint64_t usable = free_b > (512u << 20) ? free_b - (512u << 20) : free_b / 2;
	if (cfg->device_mem > usable) {
		char a[32], b[32];
		return sp_error(-EINVAL,
		                "SPILL_DEVICE_MEM: %s is more than the %s usable on device "
		                "%d (%s)",
		                sp_format_size(cfg->device_mem, a, 32),
		                sp_format_size(usable, b, 32), d, prop.name);
	}
	in->capacity = cfg->device_mem ? cfg->device_mem : usable;
	in->flops =
	    2.0 * prop.multiProcessorCount * fp32_per_sm(prop.major, prop.minor) * clock_khz * 1e3;
	in->mem_bw = 2.0 * mem_khz * 1e3 * prop.memoryBusWidth / 8;
	/* dense bf16 tensor-core FLOP/clock/SM with fp32 accumulation where known
	 * (A100: 2048, 312 TF; H100: 4096, 989 TF); else 0 (the fp32 rate) */
	int bf16_clk = prop.major == 9 ? 4096 : prop.major == 8 && prop.minor == 0 ? 2048 : 0;
	in->bf16_flops = (double)bf16_clk * prop.multiProcessorCount * clock_khz * 1e3;
	CUmemAllocationProp cp = chunk_prop(d);
	size_t g = 0;
	CU_DRV(c, c->drv.granularity(&g, &cp, CU_MEM_ALLOC_GRANULARITY_MINIMUM), "granularity");
	in->granularity = g;
	/* The reference event for event times on this device. */
	CU_RT(cudaEventCreate(&c->ref[d]), "cudaEventCreate");
	CU_RT(cudaEventRecord(c->ref[d], 0), "cudaEventRecord");
	CU_RT(cudaEventSynchronize(c->ref[d]), "cudaEventSynchronize");
	c->ref_t[d] = sp_now_s();
	return 0;
}

static void cuda_close(struct dev_ctx *ctx);

/* Growing host regions (the vmm's host pool, pinned as it fills): a range
 * reserved with cuMemAddressReserve, each commit a host-located cuMemCreate
 * chunk mapped into it, readable and writable by every device and the CPU.
 * Why not cuMemHostRegister of an anonymous mapping, grain by grain: each
 * grain would be a registration of its own, and the driver promises copies
 * only within one registered range. The pool places objects without regard to
 * grains, so an object across a grain boundary would be copied from two
 * registrations: refused (CUDA_ERROR_INVALID_VALUE) or staged as pageable
 * memory (synchronous), depending on the driver. One reserved range backed by
 * several physical allocations is what the virtual-memory API is for: copies
 * and kernels see one contiguous range whichever chunk backs each part.
 * CUDA 13 creates host memory with CU_MEM_LOCATION_TYPE_HOST (12.2 to 12.x:
 * HOST_NUMA), and the CPU is given access as a HOST_NUMA location; this is
 * tried at open, for real, in the orders drivers accept; where none works a
 * region is one cudaHostAlloc pinned whole at its reserve, as before. */
static CUmemAllocationProp host_prop(CUmemLocationType loc)
{
	CUmemAllocationProp p;
	memset(&p, 0, sizeof(p));
	p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	p.location.type = loc;
	p.location.id = 0; /* NUMA node 0 (ignored for HOST) */
	return p;
}

/* Every device and the CPU (as location type acc) may read and write. */
static size_t host_access(const struct dev_ctx *ctx, CUmemLocationType acc, CUmemAccessDesc *out)
{
	size_t n = 0;
	memset(out, 0, (size_t)(ctx->ndev + 1) * sizeof(*out));
	for (int d = 0; d < ctx->ndev; d++, n++) {
		out[n].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
		out[n].location.id = d;
		out[n].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	}
	out[n].location.type = acc;
	out[n].location.id = 0;
	out[n].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	return n + 1;
}

/* Maps a new host chunk of bytes at a (reserved, unmapped) and opens it;
 * the mapping keeps the memory, so the handle is released at once. */
static CUresult host_chunk_map(const struct dev_ctx *ctx, const struct cuda_drv *drv,
                               CUmemLocationType loc, CUmemLocationType acc, CUdeviceptr a,
                               size_t bytes)
{
	CUmemAllocationProp p = host_prop(loc);
	CUmemAccessDesc ad[DEV_MAX + 1];
	size_t n = host_access(ctx, acc, ad);
	CUmemGenericAllocationHandle h = 0;
	CUresult r = drv->mem_create(&h, bytes, &p, 0);
	if (r != CUDA_SUCCESS)
		return r;
	r = drv->mem_map(a, bytes, 0, h, 0);
	if (r == CUDA_SUCCESS) {
		r = drv->mem_set_access(a, bytes, ad, n);
		if (r != CUDA_SUCCESS)
			drv->mem_unmap(a, bytes);
	}
	drv->mem_release(h);
	return r;
}

/* Finds the location types with which a host chunk can be created, mapped
 * and opened to the devices and the CPU; sets ctx->host_commit_gran. */
static void probe_host_grow(struct dev_ctx *ctx)
{
	struct cuda_ctx *c = cctx(ctx);
	static const CUmemLocationType tries[][2] = {
	    {CU_MEM_LOCATION_TYPE_HOST, CU_MEM_LOCATION_TYPE_HOST_NUMA},
	    {CU_MEM_LOCATION_TYPE_HOST_NUMA, CU_MEM_LOCATION_TYPE_HOST_NUMA},
	    {CU_MEM_LOCATION_TYPE_HOST, CU_MEM_LOCATION_TYPE_HOST}};
	if (cudaSetDevice(0) != cudaSuccess) {
		cudaGetLastError();
		return;
	}
	for (size_t i = 0; i < sizeof(tries) / sizeof(tries[0]) && !c->host_grow; i++) {
		CUmemAllocationProp p = host_prop(tries[i][0]);
		size_t g = 0;
		CUdeviceptr a = 0;
		if (c->drv.granularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS ||
		    !g || (g & (g - 1)) || c->drv.addr_reserve(&a, g, g, 0, 0) != CUDA_SUCCESS)
			continue;
		if (host_chunk_map(ctx, &c->drv, tries[i][0], tries[i][1], a, g) == CUDA_SUCCESS) {
			c->drv.mem_unmap(a, g);
			c->host_grow = 1;
			c->host_loc = tries[i][0];
			c->host_acc = tries[i][1];
			ctx->host_commit_gran = g;
		}
		c->drv.addr_free(a, g);
	}
	cudaGetLastError();
	SP_INFO(DEV, "cuda: the host pool %s",
	        c->host_grow ? "grows (host-located cuMemCreate)"
	                     : "is pinned whole (cudaHostAlloc)");
}

/* Times one copy of bytes from src to dst on device 0, best of three. */
static int time_copy(void *dst, const void *src, size_t bytes, cudaStream_t st, double *bw)
{
	cudaEvent_t a, b;
	CU_RT(cudaEventCreate(&a), "cudaEventCreate");
	CU_RT(cudaEventCreate(&b), "cudaEventCreate");
	float best = 0;
	cudaError_t r = cudaSuccess;
	for (int i = 0; i < 3 && r == cudaSuccess; i++) {
		float ms = 0;
		r = cudaEventRecord(a, st);
		if (r == cudaSuccess)
			r = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, st);
		if (r == cudaSuccess)
			r = cudaEventRecord(b, st);
		if (r == cudaSuccess)
			r = cudaEventSynchronize(b);
		if (r == cudaSuccess)
			r = cudaEventElapsedTime(&ms, a, b);
		if (r == cudaSuccess && ms > 0 && (best == 0 || ms < best))
			best = ms;
	}
	cudaEventDestroy(a);
	cudaEventDestroy(b);
	if (r != cudaSuccess)
		return cuda_err(r, "timing a copy");
	*bw = best > 0 ? bytes / (best * 1e-3) : 0;
	return 0;
}

/* With no profile named, the host links are measured: H2D and D2H of 64 MiB of
 * pinned memory on device 0 (a few milliseconds at open). Called once ndev is
 * set. */
static int measure_links(struct dev_ctx *ctx)
{
	size_t bytes = 64u << 20;
	void *h = NULL, *d = NULL;
	cudaStream_t st = NULL;
	double h2d = 0, d2h = 0;
	int rc = 0;
	CU_RT(cudaSetDevice(0), "cudaSetDevice");
	if (cudaHostAlloc(&h, bytes, cudaHostAllocPortable) != cudaSuccess ||
	    cudaMalloc(&d, bytes) != cudaSuccess ||
	    cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking) != cudaSuccess)
		rc = cuda_err(cudaGetLastError(), "buffers to measure the host link");
	if (rc == 0)
		rc = time_copy(d, h, bytes, st, &h2d);
	if (rc == 0)
		rc = time_copy(h, d, bytes, st, &d2h);
	if (st)
		cudaStreamDestroy(st);
	cudaFree(d);
	cudaFreeHost(h);
	if (rc == 0 && h2d > 0 && d2h > 0) {
		ctx->prof.h2d_bw = h2d;
		ctx->prof.d2h_bw = d2h;
		/* measured on one device: whether the devices share an uplink is
		 * not known, so assume they do not (the vmm then never orders
		 * their copies; a profile's host_link says otherwise) */
		ctx->prof.host_bw = (h2d > d2h ? h2d : d2h) * (ctx->ndev > 0 ? ctx->ndev : 1);
		snprintf(ctx->prof.name, sizeof(ctx->prof.name), "measured");
		SP_INFO(DEV, "cuda: measured H2D %.1f GB/s, D2H %.1f GB/s", h2d / 1e9, d2h / 1e9);
	}
	return rc;
}

static int cuda_open(struct dev_ctx *ctx, const struct dev_config *cfg)
{
	int count = 0;
	cudaError_t e = cudaGetDeviceCount(&count);
	if (e != cudaSuccess || count == 0) {
		cudaGetLastError();
		return sp_error(-ENODEV, "no CUDA device (%s)",
		                e != cudaSuccess ? cudaGetErrorString(e)
		                                 : "the driver reports none");
	}
	if (count > DEV_MAX)
		count = DEV_MAX;
	if (cfg->ndevices > count)
		return sp_error(-EINVAL,
		                "SPILL_DEVICES: %d devices asked for, %d CUDA device(s) "
		                "present",
		                cfg->ndevices, count);
	struct cuda_ctx *c = calloc(1, sizeof(*c));
	if (!c)
		return sp_error(-ENOMEM, "cuda backend: out of memory");
	ctx->impl = c;
	ctx->ndev = cfg->ndevices ? cfg->ndevices : count;
	int rc = resolve_driver(&c->drv);
	for (int d = 0; rc == 0 && d < ctx->ndev; d++)
		rc = cuda_open_dev(ctx, d, cfg);
	for (int a = 0; rc == 0 && a < ctx->ndev; a++) {
		for (int b = 0; b < ctx->ndev; b++) {
			int can = 0;
			if (a == b || cudaDeviceCanAccessPeer(&can, a, b) != cudaSuccess || !can)
				continue;
			cudaSetDevice(a);
			cudaError_t pe = cudaDeviceEnablePeerAccess(b, 0);
			if (pe != cudaSuccess && pe != cudaErrorPeerAccessAlreadyEnabled) {
				SP_WARN(DEV, "cuda: peer access %d->%d: %s", a, b,
				        cudaGetErrorString(pe));
				cudaGetLastError();
				continue;
			}
			cudaGetLastError();
			ctx->p2p[a][b] = 1;
		}
	}
	if (rc < 0) {
		cuda_close(ctx);
		return rc;
	}
	if (!cfg->profile || !*cfg->profile) {
		rc = measure_links(ctx);
		if (rc < 0) {
			cuda_close(ctx);
			return rc;
		}
	}
	/* Other link figures come from the profile; a one-GPU profile has no peer one. */
	if (ctx->prof.p2p_bw <= 0)
		ctx->prof.p2p_bw = ctx->prof.h2d_bw;
	probe_host_grow(ctx);
	return 0;
}

static void cuda_close(struct dev_ctx *ctx)
{
	struct cuda_ctx *c = cctx(ctx);
	if (!c)
		return;
	for (int d = 0; d < DEV_MAX; d++)
		if (c->ref[d])
			cudaEventDestroy(c->ref[d]);
	free(c);
	ctx->impl = NULL;
}

/* ---- memory -------------------------------------------------------------------- */

static int cuda_mem_alloc(struct dev_ctx *ctx, int dev, size_t bytes, void **out)
{
	CU_RT(cudaSetDevice(dev), "cudaSetDevice");
	CU_RT(cudaMalloc(out, bytes), "cudaMalloc");
	return 0;
}

static int cuda_mem_free(struct dev_ctx *ctx, int dev, void *ptr, size_t bytes)
{
	CU_RT(cudaSetDevice(dev), "cudaSetDevice");
	CU_RT(cudaFree(ptr), "cudaFree");
	return 0;
}

static int cuda_host_alloc(struct dev_ctx *ctx, size_t bytes, void **out)
{
	CU_RT(cudaHostAlloc(out, bytes, cudaHostAllocPortable), "cudaHostAlloc");
	return 0;
}

static int cuda_host_free(struct dev_ctx *ctx, void *ptr, size_t bytes)
{
	CU_RT(cudaFreeHost(ptr), "cudaFreeHost");
	return 0;
}

static int cuda_host_reserve(struct dev_ctx *ctx, size_t bytes, void **out, int *pinned_all)
{
	struct cuda_ctx *c = cctx(ctx);
	*pinned_all = !c->host_grow;
	if (!c->host_grow)
		return cuda_host_alloc(ctx, bytes, out);
	CU_RT(cudaSetDevice(0), "cudaSetDevice");
	CUdeviceptr p = 0;
	CU_DRV(c, c->drv.addr_reserve(&p, bytes, ctx->host_commit_gran, 0, 0),
	       "cuMemAddressReserve (a growing host region)");
	*out = (void *)(uintptr_t)p;
	return 0;
}

static int cuda_host_commit(struct dev_ctx *ctx, void *va, size_t bytes)
{
	struct cuda_ctx *c = cctx(ctx);
	CU_RT(cudaSetDevice(0), "cudaSetDevice");
	CU_DRV(c,
	       host_chunk_map(ctx, &c->drv, c->host_loc, c->host_acc, (CUdeviceptr)(uintptr_t)va,
	                      bytes),
	       "pinning host memory (cuMemCreate, cuMemMap, cuMemSetAccess)");
	return 0;
}

static int cuda_host_uncommit(struct dev_ctx *ctx, void *va, size_t bytes)
{
	struct cuda_ctx *c = cctx(ctx);
	CU_DRV(c, c->drv.mem_unmap((CUdeviceptr)(uintptr_t)va, bytes), "cuMemUnmap (host)");
	return 0;
}

static int cuda_host_release(struct dev_ctx *ctx, void *va, size_t bytes)
{
	struct cuda_ctx *c = cctx(ctx);
	CU_DRV(c, c->drv.addr_free((CUdeviceptr)(uintptr_t)va, bytes), "cuMemAddressFree (host)");
	return 0;
}

static int cuda_va_reserve(struct dev_ctx *ctx, int dev, size_t bytes, void **out)
{
	struct cuda_ctx *c = cctx(ctx);
	CUdeviceptr p = 0;
	CU_DRV(c, c->drv.addr_reserve(&p, bytes, ctx->info[dev].granularity, 0, 0),
	       "cuMemAddressReserve");
	*out = (void *)(uintptr_t)p;
	return 0;
}

static int cuda_va_release(struct dev_ctx *ctx, void *va, size_t bytes)
{
	struct cuda_ctx *c = cctx(ctx);
	CU_DRV(c, c->drv.addr_free((CUdeviceptr)(uintptr_t)va, bytes), "cuMemAddressFree");
	return 0;
}

static int cuda_phys_create(struct dev_ctx *ctx, struct dev_phys *ph)
{
	struct cuda_ctx *c = cctx(ctx);
	CUmemAllocationProp p = chunk_prop(ph->dev);
	CUmemGenericAllocationHandle h;
	CU_DRV(c, c->drv.mem_create(&h, ph->bytes, &p, 0), "cuMemCreate");
	ph->handle = (uint64_t)h;
	return 0;
}

static int cuda_phys_destroy(struct dev_ctx *ctx, struct dev_phys *ph)
{
	struct cuda_ctx *c = cctx(ctx);
	CU_DRV(c, c->drv.mem_release((CUmemGenericAllocationHandle)ph->handle), "cuMemRelease");
	return 0;
}

static int cuda_va_map(struct dev_ctx *ctx, int dev, void *va, size_t bytes, struct dev_phys *ph,
                       size_t off)
{
	struct cuda_ctx *c = cctx(ctx);
	CUdeviceptr p = (CUdeviceptr)(uintptr_t)va;
	CU_DRV(c, c->drv.mem_map(p, bytes, off, (CUmemGenericAllocationHandle)ph->handle, 0),
	       "cuMemMap");
	/* The owner and every peer that can reach it may read and write. */
	CUmemAccessDesc acc[DEV_MAX];
	size_t n = 0;
	for (int d = 0; d < ctx->ndev; d++) {
		if (d != dev && !ctx->p2p[d][dev])
			continue;
		acc[n].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
		acc[n].location.id = d;
		acc[n].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
		n++;
	}
	CUresult r = c->drv.mem_set_access(p, bytes, acc, n);
	if (r != CUDA_SUCCESS) {
		c->drv.mem_unmap(p, bytes);
		return drv_err(c, r, "cuMemSetAccess");
	}
	return 0;
}

static int cuda_va_unmap(struct dev_ctx *ctx, int dev, void *va, size_t bytes)
{
	struct cuda_ctx *c = cctx(ctx);
	CU_DRV(c, c->drv.mem_unmap((CUdeviceptr)(uintptr_t)va, bytes), "cuMemUnmap");
	return 0;
}

/* ---- streams and events ------------------------------------------------------------ */

static cudaStream_t cs(const struct dev_stream *s)
{
	return (cudaStream_t)s->native;
}

/* The CUDA device a stream lives on: a DEV_HOST stream is a stream of device
 * 0 that runs host functions. */
static int sdev(const struct dev_stream *s)
{
	return s->dev < 0 ? 0 : s->dev;
}

static int cuda_stream_create(struct dev_stream *s)
{
	cudaStream_t st;
	CU_RT(cudaSetDevice(sdev(s)), "cudaSetDevice");
	CU_RT(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), "cudaStreamCreate");
	s->native = st;
	return 0;
}

static int cuda_stream_destroy(struct dev_stream *s)
{
	CU_RT(cudaSetDevice(sdev(s)), "cudaSetDevice");
	CU_RT(cudaStreamDestroy(cs(s)), "cudaStreamDestroy");
	return 0;
}

static int cuda_stream_sync(struct dev_stream *s)
{
	CU_RT(cudaStreamSynchronize(cs(s)), "cudaStreamSynchronize");
	return 0;
}

static int cuda_event_create(struct dev_event *e)
{
	struct cuda_event *ce = calloc(1, sizeof(*ce));
	if (!ce)
		return sp_error(-ENOMEM, "cuda backend: event: out of memory");
	ce->last_dev = -1;
	e->impl = ce;
	return 0;
}

static int cuda_event_destroy(struct dev_event *e)
{
	struct cuda_event *ce = e->impl;
	int rc = 0;
	for (int d = 0; d < DEV_MAX; d++) {
		if (!ce->ev[d])
			continue;
		cudaError_t r = cudaEventDestroy(ce->ev[d]);
		if (r != cudaSuccess && rc == 0)
			rc = cuda_err(r, "cudaEventDestroy");
	}
	free(ce);
	return rc;
}

static int cuda_event_record(struct dev_event *e, struct dev_stream *s)
{
	struct cuda_event *ce = e->impl;
	CU_RT(cudaSetDevice(sdev(s)), "cudaSetDevice");
	int d = sdev(s);
	if (!ce->ev[d])
		CU_RT(cudaEventCreate(&ce->ev[d]), "cudaEventCreate");
	CU_RT(cudaEventRecord(ce->ev[d], cs(s)), "cudaEventRecord");
	__atomic_store_n(&ce->last_dev, d, __ATOMIC_RELEASE);
	return 0;
}

static int cuda_event_query(struct dev_event *e)
{
	struct cuda_event *ce = e->impl;
	int d = __atomic_load_n(&ce->last_dev, __ATOMIC_ACQUIRE);
	if (d < 0)
		return 0;
	cudaError_t r = cudaEventQuery(ce->ev[d]);
	if (r == cudaErrorNotReady) {
		cudaGetLastError();
		return -EAGAIN;
	}
	CU_RT(r, "cudaEventQuery");
	return 0;
}

static int cuda_event_sync(struct dev_event *e)
{
	struct cuda_event *ce = e->impl;
	int d = __atomic_load_n(&ce->last_dev, __ATOMIC_ACQUIRE);
	if (d >= 0)
		CU_RT(cudaEventSynchronize(ce->ev[d]), "cudaEventSynchronize");
	return 0;
}

static int cuda_stream_wait_event(struct dev_stream *s, struct dev_event *e)
{
	struct cuda_event *ce = e->impl;
	int d = __atomic_load_n(&ce->last_dev, __ATOMIC_ACQUIRE);
	if (d < 0)
		return 0; /* never recorded: nothing to wait for */
	CU_RT(cudaSetDevice(sdev(s)), "cudaSetDevice");
	CU_RT(cudaStreamWaitEvent(cs(s), ce->ev[d], 0), "cudaStreamWaitEvent");
	return 0;
}

static int cuda_event_time(struct dev_event *e, double *out_s)
{
	struct cuda_ctx *c = cctx(e->ctx);
	struct cuda_event *ce = e->impl;
	int d = __atomic_load_n(&ce->last_dev, __ATOMIC_ACQUIRE);
	if (d < 0) {
		*out_s = 0;
		return 0;
	}
	float ms = 0;
	cudaError_t r = cudaEventElapsedTime(&ms, c->ref[d], ce->ev[d]);
	if (r == cudaErrorNotReady) {
		cudaGetLastError();
		return -EAGAIN;
	}
	CU_RT(r, "cudaEventElapsedTime");
	*out_s = c->ref_t[d] + ms * 1e-3;
	return 0;
}

static double cuda_now(const struct dev_ctx *ctx)
{
	return sp_now_s();
}

/* ---- async operations ------------------------------------------------------------- */

static int cuda_memcpy_async(struct dev_stream *s, void *dst, int dst_dev, const void *src,
                             int src_dev, size_t bytes, enum dev_copy_kind kind)
{
	CU_RT(cudaSetDevice(sdev(s)), "cudaSetDevice");
	if (kind == DEV_COPY_P2P)
		CU_RT(cudaMemcpyPeerAsync(dst, dst_dev, src, src_dev, bytes, cs(s)),
		      "cudaMemcpyPeerAsync");
	else
		CU_RT(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, cs(s)),
		      "cudaMemcpyAsync");
	return 0;
}

struct host_memset {
	void *dst;
	int value;
	size_t bytes;
};

static void host_memset_fn(void *arg)
{
	struct host_memset *m = arg;
	memset(m->dst, m->value, m->bytes);
	free(m);
}

static int cuda_memset_async(struct dev_stream *s, void *dst, int dst_dev, int value, size_t bytes)
{
	CU_RT(cudaSetDevice(sdev(s)), "cudaSetDevice");
	if (dst_dev >= 0) {
		CU_RT(cudaMemsetAsync(dst, value, bytes, cs(s)), "cudaMemsetAsync");
		return 0;
	}
	/* Pinned host memory: set it in stream order from a host function. */
	struct host_memset *m = malloc(sizeof(*m));
	if (!m)
		return sp_error(-ENOMEM, "dev_memset_async: out of memory");
	*m = (struct host_memset){dst, value, bytes};
	cudaError_t r = cudaLaunchHostFunc(cs(s), host_memset_fn, m);
	if (r != cudaSuccess) {
		free(m);
		return cuda_err(r, "cudaLaunchHostFunc");
	}
	return 0;
}

/* A CPU kernel on a DEV_HOST stream: its args copied, run by a host function. */
struct host_kernel {
	void (*cpu)(const void *);
	_Alignas(16) unsigned char args[];
};

static void host_kernel_fn(void *arg)
{
	struct host_kernel *hk = arg;
	hk->cpu(hk->args);
	free(hk);
}

static int cuda_launch(struct dev_stream *s, const struct dev_kernel *k, const void *args,
                       size_t args_size, struct dev_cost cost)
{
	if (s->dev == DEV_HOST) {
		if (!k->cpu)
			return sp_error(-ENOTSUP,
			                "dev_launch: kernel %s has no CPU implementation "
			                "(host stream)",
			                k->name ? k->name : "?");
		struct host_kernel *hk = malloc(sizeof(*hk) + args_size);
		if (!hk)
			return sp_error(-ENOMEM, "dev_launch %s: out of memory", k->name);
		hk->cpu = k->cpu;
		if (args_size)
			memcpy(hk->args, args, args_size);
		cudaError_t r = cudaLaunchHostFunc(cs(s), host_kernel_fn, hk);
		if (r != cudaSuccess) {
			free(hk);
			return cuda_err(r, "cudaLaunchHostFunc");
		}
		return 0;
	}
	if (!k->cuda)
		return sp_error(-ENOTSUP, "dev_launch: kernel %s has no CUDA implementation",
		                k->name ? k->name : "?");
	CU_RT(cudaSetDevice(sdev(s)), "cudaSetDevice");
	k->cuda(args, s->native);
	cudaError_t r = cudaGetLastError();
	if (r != cudaSuccess)
		return cuda_err(r, k->name ? k->name : "kernel launch");
	return 0;
}

static int cuda_host_callback(struct dev_stream *s, void (*fn)(void *), void *arg)
{
	CU_RT(cudaLaunchHostFunc(cs(s), fn, arg), "cudaLaunchHostFunc");
	return 0;
}

const struct dev_backend_ops dev_cuda_ops = {
    .open = cuda_open,
    .close = cuda_close,
    .mem_alloc = cuda_mem_alloc,
    .mem_free = cuda_mem_free,
    .host_alloc = cuda_host_alloc,
    .host_free = cuda_host_free,
    .host_reserve = cuda_host_reserve,
    .host_commit = cuda_host_commit,
    .host_uncommit = cuda_host_uncommit,
    .host_release = cuda_host_release,
    .va_reserve = cuda_va_reserve,
    .va_release = cuda_va_release,
    .phys_create = cuda_phys_create,
    .phys_destroy = cuda_phys_destroy,
    .va_map = cuda_va_map,
    .va_unmap = cuda_va_unmap,
    .stream_create = cuda_stream_create,
    .stream_destroy = cuda_stream_destroy,
    .stream_sync = cuda_stream_sync,
    .event_create = cuda_event_create,
    .event_destroy = cuda_event_destroy,
    .event_record = cuda_event_record,
    .event_query = cuda_event_query,
    .event_sync = cuda_event_sync,
    .stream_wait_event = cuda_stream_wait_event,
    .event_time = cuda_event_time,
    .now = cuda_now,
    .memcpy_async = cuda_memcpy_async,
    .memset_async = cuda_memset_async,
    .launch = cuda_launch,
    .host_callback = cuda_host_callback,
};

#else /* !SPILL_HAVE_CUDA */

int dev_cuda_available(void)
{
	return 0;
}

static int cuda_open_none(struct dev_ctx *ctx, const struct dev_config *cfg)
{
	return sp_error(-ENODEV, "no CUDA device (spill was built without CUDA: NO_CUDA=1 or no "
	                         "toolkit at build time)");
}

static void cuda_close_none(struct dev_ctx *ctx)
{
}

const struct dev_backend_ops dev_cuda_ops = {.open = cuda_open_none, .close = cuda_close_none};

#endif
