/* shim/hooks.c — who gets a wrapper: exported cu* functions, dlsym and the
 * driver's own resolver cuGetProcAddress.
 *
 * Three ways reach the driver: a direct call to an exported name (the
 * program linked libcuda), dlsym on libcuda's handle (cudart, cuBLAS, NCCL:
 * dlopen + dlsym), and cuGetProcAddress (cudart >= 11.3 gets every other
 * function that way). Each resolver hook asks the real resolver first, with
 * the caller's arguments, then looks at what it returned: only when the
 * pointer is exactly an export of libcuda whose name (dladdr) is in the table
 * below does the caller get the wrapper of that very ABI (cuMemAlloc_v2 is
 * not cuMemAlloc, cuLaunchKernel_ptsz is not cuLaunchKernel). Everything else
 * passes through unchanged. The shim's own driver calls use shim_real, filled
 * from libcuda's handle, so they never come back here.
 */
#include "shim/internal.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdatomic.h>
#include <string.h>

struct shim_real shim_real;

/* ---- the real dlsym and the real driver ------------------------------------------ */

typedef void *(*dlsym_fn)(void *, const char *);
/* Read by the assembly entry of dlsym: hidden, so it is reached PC-relative. */
__attribute__((visibility("hidden"))) dlsym_fn shim_real_dlsym;

/* Runs before the sanitizers' runtimes are ready (they look up their real
 * functions with dlsym while they start): never instrumented. */
#define SHIM_EARLY __attribute__((no_sanitize_thread, no_sanitize_address, noinline))

SHIM_EARLY static dlsym_fn get_real_dlsym(void)
{
	dlsym_fn f = __atomic_load_n(&shim_real_dlsym, __ATOMIC_ACQUIRE);
	if (f)
		return f;
	/* glibc 2.34 moved dlsym into libc; both versions exist there */
	f = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
	if (!f)
		f = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
	__atomic_store_n(&shim_real_dlsym, f, __ATOMIC_RELEASE);
	return f;
}

/* For the assembly entry: the real dlsym, found on first use. */
__attribute__((visibility("hidden"))) SHIM_EARLY void *shim_resolve_dlsym(void)
{
	return (void *)get_real_dlsym();
}

static _Atomic int real_ok;
static __thread int in_init;
static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;
static void *libcuda_base;

int shim_real_init(void)
{
	if (atomic_load_explicit(&real_ok, memory_order_acquire))
		return 0;
	if (in_init) /* libcuda's constructors calling dlsym */
		return -EAGAIN;
	in_init = 1;
	pthread_mutex_lock(&init_lock);
	int rc = 0;
	if (!atomic_load(&real_ok)) {
		dlsym_fn ds = get_real_dlsym();
		void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
		if (!h)
			h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
		if (!h || !ds) {
			rc = -ENODEV;
		} else {
#define SHIM_REAL_SET(name) shim_real.name = (__typeof__(&name))ds(h, #name);
			SHIM_REAL_FNS(SHIM_REAL_SET)
#undef SHIM_REAL_SET
			Dl_info di;
			if (shim_real.cuInit && dladdr((void *)shim_real.cuInit, &di))
				libcuda_base = di.dli_fbase;
			atomic_store_explicit(&real_ok, 1, memory_order_release);
		}
	}
	pthread_mutex_unlock(&init_lock);
	in_init = 0;
	return rc;
}

/* The real function, or CUDA_ERROR_NOT_FOUND from the wrapper: shim_real is
 * read only after real_ok says it is complete. */
#define ENSURE_REAL(fn)                                                                            \
	do {                                                                                       \
		if (!atomic_load_explicit(&real_ok, memory_order_acquire) && shim_real_init() < 0) \
			return CUDA_ERROR_NOT_FOUND;                                               \
		if (!shim_real.fn)                                                                 \
			return CUDA_ERROR_NOT_FOUND;                                               \
	} while (0)

/* ---- operations through shim_op ---------------------------------------------------- */

#define RUN_OP(op, call)                            \
	do {                                        \
		CUresult r_ = shim_op_begin(&(op)); \
		if (r_ != CUDA_SUCCESS)             \
			return r_;                  \
		r_ = (call);                        \
		shim_op_end(&(op), r_);             \
		return r_;                          \
	} while (0)

static struct shim_op copy_op(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s, int ptds)
{
	struct shim_op op = {.kind = "memcpy", .stream = s, .ptds = ptds};
	if (dst)
		op.touch[op.ntouch++] = (struct shim_touch){dst, n, SHIM_USE_OVERWRITE};
	if (src)
		op.touch[op.ntouch++] = (struct shim_touch){src, n, SHIM_USE_READ};
	return op;
}

static struct shim_op set_op(CUdeviceptr dst, size_t n, CUstream s, int ptds)
{
	struct shim_op op = {.kind = "memset", .stream = s, .ptds = ptds};
	op.touch[op.ntouch++] = (struct shim_touch){dst, n, SHIM_USE_OVERWRITE};
	return op;
}

static struct shim_op launch_op(CUfunction f, CUstream s, int ptds, void **params, void **extra)
{
	return (struct shim_op){
	    .fn = f, .stream = s, .ptds = ptds, .params = params, .extra = extra};
}

/* ---- memory ------------------------------------------------------------------------ */

SHIM_API CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytes)
{
	ENSURE_REAL(cuMemAlloc_v2);
	return shim_mem_alloc(dptr, bytes, "cuMemAlloc");
}

SHIM_API CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height,
                                     unsigned int elem)
{
	ENSURE_REAL(cuMemAllocPitch_v2);
	if (!dptr || !pitch || !width || !height || (elem != 4 && elem != 8 && elem != 16))
		return CUDA_ERROR_INVALID_VALUE;
	size_t p = (width + 511) / 512 * 512; /* the driver's texture pitch alignment */
	CUresult r = shim_mem_alloc(dptr, p * height, "cuMemAllocPitch");
	if (r == CUDA_SUCCESS)
		*pitch = p;
	return r;
}

SHIM_API CUresult cuMemFree_v2(CUdeviceptr dptr)
{
	ENSURE_REAL(cuMemFree_v2);
	if (!dptr)
		return CUDA_SUCCESS;
	return shim_mem_free(dptr);
}

SHIM_API CUresult cuMemGetInfo_v2(size_t *free_b, size_t *total_b)
{
	ENSURE_REAL(cuMemGetInfo_v2);
	return shim_mem_get_info(free_b, total_b);
}

SHIM_API CUresult cuMemGetAddressRange_v2(CUdeviceptr *base, size_t *size, CUdeviceptr dptr)
{
	ENSURE_REAL(cuMemGetAddressRange_v2);
	CUdeviceptr b;
	size_t n;
	if (!shim_mem_range(dptr, &b, &n))
		return shim_real.cuMemGetAddressRange_v2(base, size, dptr);
	if (base)
		*base = b;
	if (size)
		*size = n;
	return CUDA_SUCCESS;
}

SHIM_API CUresult cuIpcGetMemHandle(CUipcMemHandle *handle, CUdeviceptr dptr)
{
	ENSURE_REAL(cuIpcGetMemHandle);
	CUdeviceptr b;
	size_t n;
	if (shim_mem_range(dptr, &b, &n)) {
		SP_WARN(SHIM,
		        "cuIpcGetMemHandle on %#llx: IPC of memory the shim manages is not "
		        "supported (its backing comes and goes); returning "
		        "CUDA_ERROR_NOT_SUPPORTED",
		        (unsigned long long)dptr);
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	return shim_real.cuIpcGetMemHandle(handle, dptr);
}

/* ---- memory the program maps itself (vmmap.c) ---------------------------------------- */

SHIM_API CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t size,
                              const CUmemAllocationProp *prop, unsigned long long flags)
{
	ENSURE_REAL(cuMemCreate);
	return shim_chunk_create(h, size, prop, flags);
}

SHIM_API CUresult cuMemRelease(CUmemGenericAllocationHandle h)
{
	ENSURE_REAL(cuMemRelease);
	return shim_chunk_release(h);
}

SHIM_API CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                           CUmemGenericAllocationHandle h, unsigned long long flags)
{
	ENSURE_REAL(cuMemMap);
	return shim_chunk_map(ptr, size, offset, h, flags);
}

SHIM_API CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
	ENSURE_REAL(cuMemUnmap);
	return shim_chunk_unmap(ptr, size);
}

SHIM_API CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc,
                                 size_t count)
{
	ENSURE_REAL(cuMemSetAccess);
	return shim_chunk_set_access(ptr, size, desc, count);
}

SHIM_API CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *h, void *addr)
{
	ENSURE_REAL(cuMemRetainAllocationHandle);
	return shim_chunk_retain(h, addr);
}

SHIM_API CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop,
                                                         CUmemGenericAllocationHandle h)
{
	ENSURE_REAL(cuMemGetAllocationPropertiesFromHandle);
	return shim_chunk_props(prop, h);
}

SHIM_API CUresult cuMemExportToShareableHandle(void *out, CUmemGenericAllocationHandle h,
                                               CUmemAllocationHandleType type,
                                               unsigned long long flags)
{
	ENSURE_REAL(cuMemExportToShareableHandle);
	return shim_chunk_export(out, h, type, flags);
}

SHIM_API CUresult cuMulticastBindMem(CUmemGenericAllocationHandle mc, size_t mc_off,
                                     CUmemGenericAllocationHandle h, size_t off, size_t size,
                                     unsigned long long flags)
{
	ENSURE_REAL(cuMulticastBindMem);
	return shim_chunk_multicast(mc, mc_off, h, off, size, flags);
}

SHIM_API CUresult cuMulticastBindAddr(CUmemGenericAllocationHandle mc, size_t mc_off,
                                      CUdeviceptr ptr, size_t size, unsigned long long flags)
{
	ENSURE_REAL(cuMulticastBindAddr);
	return shim_chunk_multicast_addr(mc, mc_off, ptr, size, flags);
}

/* ---- stream-ordered allocation and pools (pool.c) ---------------------------------- */

SHIM_API CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytes, CUstream s)
{
	ENSURE_REAL(cuMemAllocAsync);
	return shim_alloc_async(dptr, bytes, NULL, 1, s, 0);
}

SHIM_API CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytes, CUstream s)
{
	ENSURE_REAL(cuMemAllocAsync_ptsz);
	return shim_alloc_async(dptr, bytes, NULL, 1, s, 1);
}

SHIM_API CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytes, CUmemoryPool pool,
                                          CUstream s)
{
	ENSURE_REAL(cuMemAllocFromPoolAsync);
	return shim_alloc_async(dptr, bytes, pool, 0, s, 0);
}

SHIM_API CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytes, CUmemoryPool pool,
                                               CUstream s)
{
	ENSURE_REAL(cuMemAllocFromPoolAsync_ptsz);
	return shim_alloc_async(dptr, bytes, pool, 0, s, 1);
}

SHIM_API CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream s)
{
	ENSURE_REAL(cuMemFreeAsync);
	return shim_free_async(dptr, s, 0);
}

SHIM_API CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream s)
{
	ENSURE_REAL(cuMemFreeAsync_ptsz);
	return shim_free_async(dptr, s, 1);
}

SHIM_API CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props)
{
	ENSURE_REAL(cuMemPoolCreate);
	if (!pool || !props)
		return shim_real.cuMemPoolCreate(pool, props);
	return shim_pool_create(pool, props);
}

SHIM_API CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
	ENSURE_REAL(cuMemPoolDestroy);
	return shim_pool_destroy(pool);
}

SHIM_API CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t keep)
{
	ENSURE_REAL(cuMemPoolTrimTo);
	return shim_pool_trim(pool, keep);
}

SHIM_API CUresult cuMemPoolExportToShareableHandle(void *handle, CUmemoryPool pool,
                                                   CUmemAllocationHandleType type,
                                                   unsigned long long flags)
{
	ENSURE_REAL(cuMemPoolExportToShareableHandle);
	return shim_pool_export(handle, pool, type, flags);
}

SHIM_API CUresult cuStreamBeginCapture_v2(CUstream s, CUstreamCaptureMode mode)
{
	ENSURE_REAL(cuStreamBeginCapture_v2);
	shim_mem_pin_all("stream capture");
	return shim_real.cuStreamBeginCapture_v2(s, mode);
}

SHIM_API CUresult cuStreamBeginCapture_v2_ptsz(CUstream s, CUstreamCaptureMode mode)
{
	ENSURE_REAL(cuStreamBeginCapture_v2_ptsz);
	shim_mem_pin_all("stream capture");
	return shim_real.cuStreamBeginCapture_v2_ptsz(s, mode);
}

/* ---- launches ------------------------------------------------------------------- */

SHIM_API CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                 unsigned by, unsigned bz, unsigned shmem, CUstream s,
                                 void **params, void **extra)
{
	ENSURE_REAL(cuLaunchKernel);
	struct shim_op op = launch_op(f, s, 0, params, extra);
	RUN_OP(op, shim_real.cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shmem, s, params, extra));
}

SHIM_API CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                      unsigned bx, unsigned by, unsigned bz, unsigned shmem,
                                      CUstream s, void **params, void **extra)
{
	ENSURE_REAL(cuLaunchKernel_ptsz);
	struct shim_op op = launch_op(f, s, 1, params, extra);
	RUN_OP(op,
	       shim_real.cuLaunchKernel_ptsz(f, gx, gy, gz, bx, by, bz, shmem, s, params, extra));
}

SHIM_API CUresult cuLaunchKernelEx(const CUlaunchConfig *cfg, CUfunction f, void **params,
                                   void **extra)
{
	ENSURE_REAL(cuLaunchKernelEx);
	if (!cfg)
		return shim_real.cuLaunchKernelEx(cfg, f, params, extra);
	struct shim_op op = launch_op(f, cfg->hStream, 0, params, extra);
	RUN_OP(op, shim_real.cuLaunchKernelEx(cfg, f, params, extra));
}

SHIM_API CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *cfg, CUfunction f, void **params,
                                        void **extra)
{
	ENSURE_REAL(cuLaunchKernelEx_ptsz);
	if (!cfg)
		return shim_real.cuLaunchKernelEx_ptsz(cfg, f, params, extra);
	struct shim_op op = launch_op(f, cfg->hStream, 1, params, extra);
	RUN_OP(op, shim_real.cuLaunchKernelEx_ptsz(cfg, f, params, extra));
}

SHIM_API CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                            unsigned bx, unsigned by, unsigned bz, unsigned shmem,
                                            CUstream s, void **params)
{
	ENSURE_REAL(cuLaunchCooperativeKernel);
	struct shim_op op = launch_op(f, s, 0, params, NULL);
	RUN_OP(op,
	       shim_real.cuLaunchCooperativeKernel(f, gx, gy, gz, bx, by, bz, shmem, s, params));
}

SHIM_API CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned gx, unsigned gy,
                                                 unsigned gz, unsigned bx, unsigned by, unsigned bz,
                                                 unsigned shmem, CUstream s, void **params)
{
	ENSURE_REAL(cuLaunchCooperativeKernel_ptsz);
	struct shim_op op = launch_op(f, s, 1, params, NULL);
	RUN_OP(op, shim_real.cuLaunchCooperativeKernel_ptsz(f, gx, gy, gz, bx, by, bz, shmem, s,
	                                                    params));
}

/* ---- copies and sets --------------------------------------------------------------- */

/* The synchronous copies and sets: the legacy stream (ptds: the thread's). */
#define SYNC_COPY(name, ptds, dst, src, n, ...)                             \
	SHIM_API CUresult name(__VA_ARGS__)                                 \
	{                                                                   \
		ENSURE_REAL(name);                                          \
		struct shim_op op = copy_op((dst), (src), (n), NULL, ptds); \
		RUN_OP(op, shim_real.name(a0, a1, n));                      \
	}

/* The argument names a0, a1, n and s are shared by the macros below. */
SYNC_COPY(cuMemcpy, 0, a0, a1, n, CUdeviceptr a0, CUdeviceptr a1, size_t n)
SYNC_COPY(cuMemcpy_ptds, 1, a0, a1, n, CUdeviceptr a0, CUdeviceptr a1, size_t n)
SYNC_COPY(cuMemcpyHtoD_v2, 0, a0, 0, n, CUdeviceptr a0, const void *a1, size_t n)
SYNC_COPY(cuMemcpyHtoD_v2_ptds, 1, a0, 0, n, CUdeviceptr a0, const void *a1, size_t n)
SYNC_COPY(cuMemcpyDtoH_v2, 0, 0, a1, n, void *a0, CUdeviceptr a1, size_t n)
SYNC_COPY(cuMemcpyDtoH_v2_ptds, 1, 0, a1, n, void *a0, CUdeviceptr a1, size_t n)
SYNC_COPY(cuMemcpyDtoD_v2, 0, a0, a1, n, CUdeviceptr a0, CUdeviceptr a1, size_t n)
SYNC_COPY(cuMemcpyDtoD_v2_ptds, 1, a0, a1, n, CUdeviceptr a0, CUdeviceptr a1, size_t n)

#define ASYNC_COPY(name, ptds, dst, src, ...)                          \
	SHIM_API CUresult name(__VA_ARGS__)                            \
	{                                                              \
		ENSURE_REAL(name);                                     \
		struct shim_op op = copy_op((dst), (src), n, s, ptds); \
		RUN_OP(op, shim_real.name(a0, a1, n, s));              \
	}

ASYNC_COPY(cuMemcpyAsync, 0, a0, a1, CUdeviceptr a0, CUdeviceptr a1, size_t n, CUstream s)
ASYNC_COPY(cuMemcpyAsync_ptsz, 1, a0, a1, CUdeviceptr a0, CUdeviceptr a1, size_t n, CUstream s)
ASYNC_COPY(cuMemcpyHtoDAsync_v2, 0, a0, 0, CUdeviceptr a0, const void *a1, size_t n, CUstream s)
ASYNC_COPY(cuMemcpyHtoDAsync_v2_ptsz, 1, a0, 0, CUdeviceptr a0, const void *a1, size_t n,
           CUstream s)
ASYNC_COPY(cuMemcpyDtoHAsync_v2, 0, 0, a1, void *a0, CUdeviceptr a1, size_t n, CUstream s)
ASYNC_COPY(cuMemcpyDtoHAsync_v2_ptsz, 1, 0, a1, void *a0, CUdeviceptr a1, size_t n, CUstream s)
ASYNC_COPY(cuMemcpyDtoDAsync_v2, 0, a0, a1, CUdeviceptr a0, CUdeviceptr a1, size_t n, CUstream s)
ASYNC_COPY(cuMemcpyDtoDAsync_v2_ptsz, 1, a0, a1, CUdeviceptr a0, CUdeviceptr a1, size_t n,
           CUstream s)

#define SYNC_SET(name, ptds, T, width)                                   \
	SHIM_API CUresult name(CUdeviceptr a0, T v, size_t n)            \
	{                                                                \
		ENSURE_REAL(name);                                       \
		struct shim_op op = set_op(a0, n * (width), NULL, ptds); \
		RUN_OP(op, shim_real.name(a0, v, n));                    \
	}
SYNC_SET(cuMemsetD8_v2, 0, unsigned char, 1)
SYNC_SET(cuMemsetD8_v2_ptds, 1, unsigned char, 1)
SYNC_SET(cuMemsetD16_v2, 0, unsigned short, 2)
SYNC_SET(cuMemsetD16_v2_ptds, 1, unsigned short, 2)
SYNC_SET(cuMemsetD32_v2, 0, unsigned int, 4)
SYNC_SET(cuMemsetD32_v2_ptds, 1, unsigned int, 4)

#define ASYNC_SET(name, ptds, T, width)                                   \
	SHIM_API CUresult name(CUdeviceptr a0, T v, size_t n, CUstream s) \
	{                                                                 \
		ENSURE_REAL(name);                                        \
		struct shim_op op = set_op(a0, n * (width), s, ptds);     \
		RUN_OP(op, shim_real.name(a0, v, n, s));                  \
	}
ASYNC_SET(cuMemsetD8Async, 0, unsigned char, 1)
ASYNC_SET(cuMemsetD8Async_ptsz, 1, unsigned char, 1)
ASYNC_SET(cuMemsetD16Async, 0, unsigned short, 2)
ASYNC_SET(cuMemsetD16Async_ptsz, 1, unsigned short, 2)
ASYNC_SET(cuMemsetD32Async, 0, unsigned int, 4)
ASYNC_SET(cuMemsetD32Async_ptsz, 1, unsigned int, 4)

/* ---- 2D, 3D and peer copies --------------------------------------------------------- */

/* The device range one side of a strided copy spans (host and array sides
 * touch nothing the shim tracks; a unified pointer is looked up). The
 * destination is overwritten only when its rows and slices are contiguous. */
static void touch_3d(struct shim_op *op, CUmemorytype type, CUdeviceptr dev, size_t x, size_t y,
                     size_t z, size_t pitch, size_t height, size_t w, size_t h, size_t d, int dst)
{
	if ((type != CU_MEMORYTYPE_DEVICE && type != CU_MEMORYTYPE_UNIFIED) || !dev || !w || !h ||
	    !d)
		return;
	size_t slice = pitch * height;
	int contiguous = (h == 1 || pitch == w) && (d == 1 || slice == w * h);
	op->touch[op->ntouch++] = (struct shim_touch){dev + z * slice + y * pitch + x,
	                                              (d - 1) * slice + (h - 1) * pitch + w,
	                                              !dst         ? SHIM_USE_READ
	                                              : contiguous ? SHIM_USE_OVERWRITE
	                                                           : SHIM_USE_WRITE};
}

static struct shim_op copy3d_op(const CUDA_MEMCPY3D *c, CUstream s, int ptds)
{
	struct shim_op op = {.kind = "memcpy", .stream = s, .ptds = ptds};
	touch_3d(&op, c->dstMemoryType, c->dstDevice, c->dstXInBytes, c->dstY, c->dstZ, c->dstPitch,
	         c->dstHeight, c->WidthInBytes, c->Height, c->Depth, 1);
	touch_3d(&op, c->srcMemoryType, c->srcDevice, c->srcXInBytes, c->srcY, c->srcZ, c->srcPitch,
	         c->srcHeight, c->WidthInBytes, c->Height, c->Depth, 0);
	return op;
}

static struct shim_op copy3d_peer_op(const CUDA_MEMCPY3D_PEER *c, CUstream s, int ptds)
{
	struct shim_op op = {.kind = "memcpy", .stream = s, .ptds = ptds};
	touch_3d(&op, c->dstMemoryType, c->dstDevice, c->dstXInBytes, c->dstY, c->dstZ, c->dstPitch,
	         c->dstHeight, c->WidthInBytes, c->Height, c->Depth, 1);
	touch_3d(&op, c->srcMemoryType, c->srcDevice, c->srcXInBytes, c->srcY, c->srcZ, c->srcPitch,
	         c->srcHeight, c->WidthInBytes, c->Height, c->Depth, 0);
	return op;
}

static struct shim_op copy2d_op(const CUDA_MEMCPY2D *c, CUstream s, int ptds)
{
	struct shim_op op = {.kind = "memcpy", .stream = s, .ptds = ptds};
	touch_3d(&op, c->dstMemoryType, c->dstDevice, c->dstXInBytes, c->dstY, 0, c->dstPitch, 0,
	         c->WidthInBytes, c->Height, 1, 1);
	touch_3d(&op, c->srcMemoryType, c->srcDevice, c->srcXInBytes, c->srcY, 0, c->srcPitch, 0,
	         c->WidthInBytes, c->Height, 1, 0);
	return op;
}

/* A NULL descriptor goes to the driver for its error. */
#define COPY_ND(name, T, mkop, ptds)                     \
	SHIM_API CUresult name(const T *c)               \
	{                                                \
		ENSURE_REAL(name);                       \
		if (!c)                                  \
			return shim_real.name(c);        \
		struct shim_op op = mkop(c, NULL, ptds); \
		RUN_OP(op, shim_real.name(c));           \
	}
#define COPY_ND_ASYNC(name, T, mkop, ptds)             \
	SHIM_API CUresult name(const T *c, CUstream s) \
	{                                              \
		ENSURE_REAL(name);                     \
		if (!c)                                \
			return shim_real.name(c, s);   \
		struct shim_op op = mkop(c, s, ptds);  \
		RUN_OP(op, shim_real.name(c, s));      \
	}
COPY_ND(cuMemcpy2D_v2, CUDA_MEMCPY2D, copy2d_op, 0)
COPY_ND(cuMemcpy2D_v2_ptds, CUDA_MEMCPY2D, copy2d_op, 1)
COPY_ND(cuMemcpy2DUnaligned_v2, CUDA_MEMCPY2D, copy2d_op, 0)
COPY_ND(cuMemcpy2DUnaligned_v2_ptds, CUDA_MEMCPY2D, copy2d_op, 1)
COPY_ND_ASYNC(cuMemcpy2DAsync_v2, CUDA_MEMCPY2D, copy2d_op, 0)
COPY_ND_ASYNC(cuMemcpy2DAsync_v2_ptsz, CUDA_MEMCPY2D, copy2d_op, 1)
COPY_ND(cuMemcpy3D_v2, CUDA_MEMCPY3D, copy3d_op, 0)
COPY_ND(cuMemcpy3D_v2_ptds, CUDA_MEMCPY3D, copy3d_op, 1)
COPY_ND_ASYNC(cuMemcpy3DAsync_v2, CUDA_MEMCPY3D, copy3d_op, 0)
COPY_ND_ASYNC(cuMemcpy3DAsync_v2_ptsz, CUDA_MEMCPY3D, copy3d_op, 1)
COPY_ND(cuMemcpy3DPeer, CUDA_MEMCPY3D_PEER, copy3d_peer_op, 0)
COPY_ND(cuMemcpy3DPeer_ptds, CUDA_MEMCPY3D_PEER, copy3d_peer_op, 1)
COPY_ND_ASYNC(cuMemcpy3DPeerAsync, CUDA_MEMCPY3D_PEER, copy3d_peer_op, 0)
COPY_ND_ASYNC(cuMemcpy3DPeerAsync_ptsz, CUDA_MEMCPY3D_PEER, copy3d_peer_op, 1)

SHIM_API CUresult cuMemcpyPeer(CUdeviceptr dst, CUcontext dc, CUdeviceptr src, CUcontext sc,
                               size_t n)
{
	ENSURE_REAL(cuMemcpyPeer);
	struct shim_op op = copy_op(dst, src, n, NULL, 0);
	RUN_OP(op, shim_real.cuMemcpyPeer(dst, dc, src, sc, n));
}

SHIM_API CUresult cuMemcpyPeer_ptds(CUdeviceptr dst, CUcontext dc, CUdeviceptr src, CUcontext sc,
                                    size_t n)
{
	ENSURE_REAL(cuMemcpyPeer_ptds);
	struct shim_op op = copy_op(dst, src, n, NULL, 1);
	RUN_OP(op, shim_real.cuMemcpyPeer_ptds(dst, dc, src, sc, n));
}

SHIM_API CUresult cuMemcpyPeerAsync(CUdeviceptr dst, CUcontext dc, CUdeviceptr src, CUcontext sc,
                                    size_t n, CUstream s)
{
	ENSURE_REAL(cuMemcpyPeerAsync);
	struct shim_op op = copy_op(dst, src, n, s, 0);
	RUN_OP(op, shim_real.cuMemcpyPeerAsync(dst, dc, src, sc, n, s));
}

SHIM_API CUresult cuMemcpyPeerAsync_ptsz(CUdeviceptr dst, CUcontext dc, CUdeviceptr src,
                                         CUcontext sc, size_t n, CUstream s)
{
	ENSURE_REAL(cuMemcpyPeerAsync_ptsz);
	struct shim_op op = copy_op(dst, src, n, s, 1);
	RUN_OP(op, shim_real.cuMemcpyPeerAsync_ptsz(dst, dc, src, sc, n, s));
}

/* ---- resolvers ------------------------------------------------------------------ */

SHIM_API CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags);
SHIM_API CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, cuuint64_t flags,
                                      CUdriverProcAddressQueryResult *status);

struct wrapper {
	const char *name;
	void *fn;
};

#define W(name)                      \
	{                            \
#name, (void *)&name \
	}
static const struct wrapper wrappers[] = {
    W(cuGetProcAddress),
    W(cuGetProcAddress_v2),
    W(cuMemAlloc_v2),
    W(cuMemAllocPitch_v2),
    W(cuMemFree_v2),
    W(cuMemGetInfo_v2),
    W(cuMemGetAddressRange_v2),
    W(cuIpcGetMemHandle),
    W(cuMemCreate),
    W(cuMemRelease),
    W(cuMemMap),
    W(cuMemUnmap),
    W(cuMemSetAccess),
    W(cuMemRetainAllocationHandle),
    W(cuMemGetAllocationPropertiesFromHandle),
    W(cuMemExportToShareableHandle),
    W(cuMulticastBindMem),
    W(cuMulticastBindAddr),
    W(cuStreamBeginCapture_v2),
    W(cuStreamBeginCapture_v2_ptsz),
    W(cuLaunchKernel),
    W(cuLaunchKernel_ptsz),
    W(cuLaunchKernelEx),
    W(cuLaunchKernelEx_ptsz),
    W(cuLaunchCooperativeKernel),
    W(cuLaunchCooperativeKernel_ptsz),
    W(cuMemcpy),
    W(cuMemcpy_ptds),
    W(cuMemcpyAsync),
    W(cuMemcpyAsync_ptsz),
    W(cuMemcpyHtoD_v2),
    W(cuMemcpyHtoD_v2_ptds),
    W(cuMemcpyDtoH_v2),
    W(cuMemcpyDtoH_v2_ptds),
    W(cuMemcpyDtoD_v2),
    W(cuMemcpyDtoD_v2_ptds),
    W(cuMemcpyHtoDAsync_v2),
    W(cuMemcpyHtoDAsync_v2_ptsz),
    W(cuMemcpyDtoHAsync_v2),
    W(cuMemcpyDtoHAsync_v2_ptsz),
    W(cuMemcpyDtoDAsync_v2),
    W(cuMemcpyDtoDAsync_v2_ptsz),
    W(cuMemsetD8_v2),
    W(cuMemsetD8_v2_ptds),
    W(cuMemsetD16_v2),
    W(cuMemsetD16_v2_ptds),
    W(cuMemsetD32_v2),
    W(cuMemsetD32_v2_ptds),
    W(cuMemsetD8Async),
    W(cuMemsetD8Async_ptsz),
    W(cuMemsetD16Async),
    W(cuMemsetD16Async_ptsz),
    W(cuMemsetD32Async),
    W(cuMemsetD32Async_ptsz),
    W(cuMemAllocAsync),
    W(cuMemAllocAsync_ptsz),
    W(cuMemAllocFromPoolAsync),
    W(cuMemAllocFromPoolAsync_ptsz),
    W(cuMemFreeAsync),
    W(cuMemFreeAsync_ptsz),
    W(cuMemPoolCreate),
    W(cuMemPoolDestroy),
    W(cuMemPoolTrimTo),
    W(cuMemPoolExportToShareableHandle),
    W(cuMemcpy2D_v2),
    W(cuMemcpy2D_v2_ptds),
    W(cuMemcpy2DUnaligned_v2),
    W(cuMemcpy2DUnaligned_v2_ptds),
    W(cuMemcpy2DAsync_v2),
    W(cuMemcpy2DAsync_v2_ptsz),
    W(cuMemcpy3D_v2),
    W(cuMemcpy3D_v2_ptds),
    W(cuMemcpy3DAsync_v2),
    W(cuMemcpy3DAsync_v2_ptsz),
    W(cuMemcpy3DPeer),
    W(cuMemcpy3DPeer_ptds),
    W(cuMemcpy3DPeerAsync),
    W(cuMemcpy3DPeerAsync_ptsz),
    W(cuMemcpyPeer),
    W(cuMemcpyPeer_ptds),
    W(cuMemcpyPeerAsync),
    W(cuMemcpyPeerAsync_ptsz),
};
#undef W

/* The wrapper for what a resolver returned, or the pointer itself: only an
 * exact export of libcuda with a wrapper of that name is replaced. */
static void *substitute(void *p)
{
	if (!p || shim_real_init() < 0 || !libcuda_base)
		return p;
	Dl_info di;
	if (!dladdr(p, &di) || di.dli_fbase != libcuda_base || di.dli_saddr != p || !di.dli_sname)
		return p;
	for (size_t i = 0; i < sizeof(wrappers) / sizeof(wrappers[0]); i++)
		if (!strcmp(wrappers[i].name, di.dli_sname))
			return wrappers[i].fn;
	return p;
}

SHIM_API CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags)
{
	ENSURE_REAL(cuGetProcAddress);
	CUresult r = shim_real.cuGetProcAddress(symbol, pfn, version, flags);
	if (r == CUDA_SUCCESS && pfn)
		*pfn = substitute(*pfn);
	return r;
}

SHIM_API CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, cuuint64_t flags,
                                      CUdriverProcAddressQueryResult *status)
{
	ENSURE_REAL(cuGetProcAddress_v2);
	CUresult r = shim_real.cuGetProcAddress_v2(symbol, pfn, version, flags, status);
	if (r == CUDA_SUCCESS && pfn)
		*pfn = substitute(*pfn);
	return r;
}

/* substitute() unless this thread is loading the driver (instrumented code:
 * only driver names reach it, long after the sanitizers started). */
static void *substitute_driver(void *p)
{
	return in_init ? p : substitute(p);
}

/* dlsym: the real lookup with the caller's handle, then substitute() for
 * driver names (cu followed by a capital: never cudnn*, cublas*). */
__attribute__((visibility("hidden"))) SHIM_EARLY void *shim_dlsym_c(void *handle,
                                                                    const char *symbol)
{
	dlsym_fn ds = get_real_dlsym();
	void *r = ds ? ds(handle, symbol) : NULL;
	if (!r || !symbol || symbol[0] != 'c' || symbol[1] != 'u' || symbol[2] < 'A' ||
	    symbol[2] > 'Z')
		return r;
	return substitute_driver(r);
}

#if defined(__x86_64__)
/* RTLD_NEXT is relative to the object that calls dlsym, which glibc finds from
 * its return address: such lookups jump straight to the real dlsym so the
 * caller stays the caller. Everything else goes through shim_dlsym_c. */
__asm__(".text\n"
        ".globl dlsym\n"
        ".type dlsym, @function\n"
        "dlsym:\n"
        "	cmpq $-1, %rdi\n"
        "	jne shim_dlsym_c\n"
        "	movq shim_real_dlsym(%rip), %rax\n"
        "	testq %rax, %rax\n"
        "	jne 1f\n"
        /* not found yet (a sanitizer runtime starting): find it, keeping
         * the arguments and a 16-byte aligned stack for the call */
        "	pushq %rdi\n"
        "	pushq %rsi\n"
        "	subq $8, %rsp\n"
        "	call shim_resolve_dlsym\n"
        "	addq $8, %rsp\n"
        "	popq %rsi\n"
        "	popq %rdi\n"
        "	testq %rax, %rax\n"
        "	je shim_dlsym_c\n"
        "1:	jmp *%rax\n"
        ".size dlsym, .-dlsym\n");
#else
/* Elsewhere RTLD_NEXT lookups resolve relative to the shim (documented). */
SHIM_API void *dlsym(void *handle, const char *symbol)
{
	return shim_dlsym_c(handle, symbol);
}
#endif

/* Resolve the real dlsym early (cheap, no locks): the assembly entry needs it
 * for the RTLD_NEXT lookups of whoever runs before the first hook call. */
__attribute__((constructor)) static void shim_ctor(void)
{
	get_real_dlsym();
}
