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
