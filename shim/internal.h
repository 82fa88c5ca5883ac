/* shim/internal.h — what the preload shim's files share.
 *
 * The shim is libspill-preload.so: preloaded into an unmodified CUDA program,
 * it backs the program's device allocations with stable-address vmm objects
 * (so they can live on the GPU, in pinned host memory or on disk while the
 * program's pointers stay valid) and makes every allocation an operation
 * touches resident before the operation reaches the driver. Files:
 *   hooks.c   exported cu* wrappers, dlsym, cuGetProcAddress: who gets a wrapper
 *   mem.c     the allocation table, residency before each operation, budget
 *   pool.c    stream-ordered allocation: cuMemAllocAsync, cuMemFreeAsync, pools
 *   record.c  the launch recorder: finds the repeating iteration, Belady hints
 *   mode.c    the baselines SPILL_SHIM_MODE=uvm|uvm-prefetch|hostmap
 *   vmmap.c   cuMemCreate/cuMemMap chunks the program maps itself
 *   report.c  swap volume per allocation and per kernel, JSON, Chrome trace
 * The public interface is the CUDA driver API itself and SPILL_* variables
 * (docs/shim.md). Only cu* and dlsym are exported (shim/exports.map).
 */
#ifndef SP_SHIM_INTERNAL_H
#define SP_SHIM_INTERNAL_H

/* The driver's own spelling of every export (cuMemAlloc_v2 next to the 32-bit
 * cuMemAlloc, cuLaunchKernel_ptsz next to cuLaunchKernel): no renaming macros. */
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

#include "common/log.h"
#include "common/params.h"
#include "device/driver.h"
#include "vmm/vmm.h"

#include <pthread.h>
#include <stdint.h>

#define SHIM_API __attribute__((visibility("default")))

/* ---- hooks.c: the real driver ---- */

/* Real driver entry points by concrete export name, resolved from libcuda.so.1
 * itself (never through the shim's own hooks). NULL when the driver lacks one. */
#define SHIM_REAL_FNS(X)                          \
	X(cuInit)                                 \
	X(cuGetErrorString)                       \
	X(cuGetProcAddress)                       \
	X(cuGetProcAddress_v2)                    \
	X(cuCtxGetCurrent)                        \
	X(cuCtxGetDevice)                         \
	X(cuCtxPushCurrent_v2)                    \
	X(cuCtxPopCurrent_v2)                     \
	X(cuCtxSynchronize)                       \
	X(cuDevicePrimaryCtxRetain)               \
	X(cuDeviceTotalMem_v2)                    \
	X(cuDeviceGetName)                        \
	X(cuMemAlloc_v2)                          \
	X(cuMemAllocPitch_v2)                     \
	X(cuMemFree_v2)                           \
	X(cuMemGetInfo_v2)                        \
	X(cuMemGetAddressRange_v2)                \
	X(cuMemHostAlloc)                         \
	X(cuMemHostGetDevicePointer_v2)           \
	X(cuMemAllocManaged)                      \
	X(cuMemPrefetchAsync_v2)                  \
	X(cuMemPrefetchAsync_v2_ptsz)             \
	X(cuMemFreeHost)                          \
	X(cuMemAddressReserve)                    \
	X(cuMemAddressFree)                       \
	X(cuMemCreate)                            \
	X(cuMemRelease)                           \
	X(cuMemMap)                               \
	X(cuMemUnmap)                             \
	X(cuMemSetAccess)                         \
	X(cuMemRetainAllocationHandle)            \
	X(cuMemGetAllocationPropertiesFromHandle) \
	X(cuMemExportToShareableHandle)           \
	X(cuMulticastBindMem)                     \
	X(cuMulticastBindAddr)                    \
	X(cuMemGetAllocationGranularity)          \
	X(cuIpcGetMemHandle)                      \
	X(cuStreamCreate)                         \
	X(cuStreamDestroy_v2)                     \
	X(cuStreamSynchronize)                    \
	X(cuStreamWaitEvent)                      \
	X(cuStreamBeginCapture_v2)                \
	X(cuStreamBeginCapture_v2_ptsz)           \
	X(cuEventCreate)                          \
	X(cuEventDestroy_v2)                      \
	X(cuEventRecord)                          \
	X(cuEventQuery)                           \
	X(cuEventSynchronize)                     \
	X(cuEventElapsedTime_v2)                  \
	X(cuLaunchHostFunc)                       \
	X(cuFuncGetParamInfo)                     \
	X(cuKernelGetParamInfo)                   \
	X(cuFuncGetName)                          \
	X(cuLaunchKernel)                         \
	X(cuLaunchKernel_ptsz)                    \
	X(cuLaunchKernelEx)                       \
	X(cuLaunchKernelEx_ptsz)                  \
	X(cuLaunchCooperativeKernel)              \
	X(cuLaunchCooperativeKernel_ptsz)         \
	X(cuMemcpy)                               \
	X(cuMemcpy_ptds)                          \
	X(cuMemcpyAsync)                          \
	X(cuMemcpyAsync_ptsz)                     \
	X(cuMemcpyHtoD_v2)                        \
	X(cuMemcpyHtoD_v2_ptds)                   \
	X(cuMemcpyDtoH_v2)                        \
	X(cuMemcpyDtoH_v2_ptds)                   \
	X(cuMemcpyDtoD_v2)                        \
	X(cuMemcpyDtoD_v2_ptds)                   \
	X(cuMemcpyHtoDAsync_v2)                   \
	X(cuMemcpyHtoDAsync_v2_ptsz)              \
	X(cuMemcpyDtoHAsync_v2)                   \
	X(cuMemcpyDtoHAsync_v2_ptsz)              \
	X(cuMemcpyDtoDAsync_v2)                   \
	X(cuMemcpyDtoDAsync_v2_ptsz)              \
	X(cuMemsetD8_v2)                          \
	X(cuMemsetD8_v2_ptds)                     \
	X(cuMemsetD16_v2)                         \
	X(cuMemsetD16_v2_ptds)                    \
	X(cuMemsetD32_v2)                         \
	X(cuMemsetD32_v2_ptds)                    \
	X(cuMemsetD8Async)                        \
	X(cuMemsetD8Async_ptsz)                   \
	X(cuMemsetD16Async)                       \
	X(cuMemsetD16Async_ptsz)                  \
	X(cuMemsetD32Async)                       \
	X(cuMemsetD32Async_ptsz)                  \
	X(cuMemAllocAsync)                        \
	X(cuMemAllocAsync_ptsz)                   \
	X(cuMemFreeAsync)                         \
	X(cuMemFreeAsync_ptsz)                    \
	X(cuMemAllocFromPoolAsync)                \
	X(cuMemAllocFromPoolAsync_ptsz)           \
	X(cuMemPoolCreate)                        \
	X(cuMemPoolDestroy)                       \
	X(cuMemPoolTrimTo)                        \
	X(cuMemPoolExportToShareableHandle)       \
	X(cuDeviceGetMemPool)                     \
	X(cuMemcpy2D_v2)                          \
	X(cuMemcpy2D_v2_ptds)                     \
	X(cuMemcpy2DUnaligned_v2)                 \
	X(cuMemcpy2DUnaligned_v2_ptds)            \
	X(cuMemcpy2DAsync_v2)                     \
	X(cuMemcpy2DAsync_v2_ptsz)                \
	X(cuMemcpy3D_v2)                          \
	X(cuMemcpy3D_v2_ptds)                     \
	X(cuMemcpy3DAsync_v2)                     \
	X(cuMemcpy3DAsync_v2_ptsz)                \
	X(cuMemcpy3DPeer)                         \
	X(cuMemcpy3DPeer_ptds)                    \
	X(cuMemcpy3DPeerAsync)                    \
	X(cuMemcpy3DPeerAsync_ptsz)               \
	X(cuMemcpyPeer)                           \
	X(cuMemcpyPeer_ptds)                      \
	X(cuMemcpyPeerAsync)                      \
	X(cuMemcpyPeerAsync_ptsz)

struct shim_real {
#define SHIM_REAL_FIELD(name) __typeof__(&name) name;
	SHIM_REAL_FNS(SHIM_REAL_FIELD)
#undef SHIM_REAL_FIELD
};
extern struct shim_real shim_real;

/* Resolves the real driver once (cheap; safe from any thread and hook).
 * Returns 0, or -ENODEV when libcuda.so.1 cannot be loaded. */
int shim_real_init(void);

/* ---- modes (mode.c) ---- */

/* SPILL_SHIM_MODE: what backs the program's allocations. */
enum shim_mode {
	SHIM_MODE_SPILL,        /* evictable vmm objects (the shim itself) */
	SHIM_MODE_UVM,          /* managed memory; the driver oversubscribes */
	SHIM_MODE_UVM_PREFETCH, /* managed memory, prefetched before each launch */
	SHIM_MODE_HOSTMAP,      /* the device up to the budget, zero-copy pinned host beyond */
};

/* What one allocation is, as the mode made it. */
enum shim_backing {
	SHIM_BACK_VMM,          /* a stable vmm object (spill) */
	SHIM_BACK_MANAGED,      /* cuMemAllocManaged */
	SHIM_BACK_DEVICE,       /* cuMemAlloc (hostmap, within the budget) */
	SHIM_BACK_DEVICE_ASYNC, /* cuMemAllocAsync/FromPoolAsync (hostmap, within the budget) */
	SHIM_BACK_HOST,         /* cuMemHostAlloc, device-mapped (hostmap, beyond the budget) */
	SHIM_BACK_CHUNK,        /* a cuMemCreate chunk the program mapped (vmmap.c) */
};

/* ---- mem.c: allocations and residency ---- */

/* What an operation does with the memory its pointers reach. */
enum shim_use { SHIM_USE_READ, SHIM_USE_WRITE, SHIM_USE_OVERWRITE };

/* One range an operation touches; bytes 0 = "from ptr to the end of whatever
 * allocation holds it" (kernel parameters). */
struct shim_touch {
	CUdeviceptr ptr;
	size_t bytes;
	enum shim_use use;
};

/* An operation about to reach the driver: its kind names it in the report
 * when it is not a kernel (fn NULL). stream is the program's (0, legacy or
 * per-thread handles included, as the driver sees them); ptds: the stream 0 of
 * a _ptsz/_ptds export, which is the per-thread stream. */
struct shim_op {
	const char *kind; /* "memcpy", "memset", or NULL for a kernel */
	CUfunction fn;
	CUstream stream;
	int ptds;
	struct shim_touch touch[4];
	int ntouch;
	void **params; /* kernels: kernelParams or NULL */
	void **extra;  /* kernels: the extra array or NULL */
};

/* Makes every tracked allocation op touches resident, each on its own device,
 * and orders the program's stream after the transfers. On success the locks
 * of the devices it touches are held until shim_op_end(), which must follow
 * the driver call (so no other thread evicts in between). Returns
 * CUDA_SUCCESS, or the error to return to the program (nothing was done; no
 * lock is held). */
CUresult shim_op_begin(struct shim_op *op);
/* Records the use, updates the policy, drops the lock. */
void shim_op_end(struct shim_op *op, CUresult driver_result);

CUresult shim_mem_alloc(CUdeviceptr *dptr, size_t bytes, const char *api);
CUresult shim_mem_free(CUdeviceptr dptr);
CUresult shim_mem_get_info(size_t *free_b, size_t *total_b);
/* 1 and the range when ptr is inside a tracked allocation. */
int shim_mem_range(CUdeviceptr ptr, CUdeviceptr *base, size_t *bytes);
/* Pins every live allocation for good (graphs being captured may use any). */
void shim_mem_pin_all(const char *why);

struct shim_alloc;
struct shim_dev;
/* The device current in the calling thread's context, locked, its vmm opened
 * at its first use. Returns 0 with *out locked, or -errno and nothing locked
 * (pass through; -EAGAIN: no context yet). */
int shim_dev_enter(struct shim_dev **out);
/* Device ord, locked, its vmm opened at its first use: in the calling
 * thread's context when that is on ord, else in ord's primary context
 * (retained for good). For a chunk made for a device that may not be the
 * current one. Returns as shim_dev_enter. */
int shim_dev_enter_at(int ord, struct shim_dev **out);
/* Makes ctx current in the calling thread unless it is; returns 1 when it
 * pushed it, for shim_ctx_pop. */
int shim_ctx_push(CUcontext ctx);
void shim_ctx_pop(int pushed);
/* Under d's lock: waits for the work queued that may use d's memory (d's
 * context, or every device's once another device's stream used it). */
void shim_dev_sync(struct shim_dev *d);
/* Device locks, taken in ascending order and before shim.lock; the calling
 * thread's held set is what shim_alloc_find searches. */
void shim_dev_lock(struct shim_dev *d);
void shim_dev_unlock(struct shim_dev *d);
/* Locks every open device (rare calls: chunk mapping, capture); returns the set. */
unsigned shim_dev_lock_all(void);
void shim_dev_unlock_set(unsigned set);
/* The device whose table holds p, or NULL (takes shim.lock briefly; the
 * answer may be stale by the time its lock is taken). */
struct shim_dev *shim_dev_of(CUdeviceptr p);
/* Under d's lock (mem.c, for pool.c, mode.c and vmmap.c): */
/* A new stable allocation in d's table. Returns CUDA_SUCCESS or the error. */
CUresult shim_alloc_create(struct shim_dev *d, size_t bytes, const char *api,
                           struct shim_alloc **out);
/* The allocation holding p among the devices whose lock this thread holds. */
struct shim_alloc *shim_alloc_find(CUdeviceptr p);
/* 1 when p is in a range freed lately (a double free, a use after free). */
int shim_alloc_freed(CUdeviceptr p);
/* [base, base+bytes) was handed out again by the driver, to memory that
 * passes through (the driver reuses the addresses the shim freed): no
 * longer a freed range. Takes shim.lock. */
void shim_alloc_reused(CUdeviceptr base, size_t bytes);
/* Out of the table, its range counted as freed; a held copy is released
 * after done (NULL: every use has completed). */
void shim_alloc_retire(struct shim_alloc *a, struct dev_event *done);
/* Out of the table, nothing remembered: a baseline's free (the driver may
 * hand the range out again, and what reaches it is the driver's business). */
void shim_alloc_untrack(struct shim_alloc *a);
/* Back into the table (a reuse of a retired one). Returns 0 or -ENOMEM. */
int shim_alloc_revive(struct shim_alloc *a);
/* Destroys a retired allocation's object; the record goes to the report. */
void shim_alloc_destroy(struct shim_alloc *a);
/* A baseline mode's allocation, made by the driver at base, in the table
 * (backing says what it is). Returns CUDA_SUCCESS or CUDA_ERROR_OUT_OF_MEMORY. */
CUresult shim_alloc_insert(struct shim_dev *d, CUdeviceptr base, size_t bytes,
                           enum shim_backing backing, struct shim_alloc **out);
/* A retired baseline allocation whose memory went back: kept for the report. */
void shim_alloc_bury(struct shim_alloc *a);
/* In d's table: the allocation holding p, or else the first one above p; NULL if none. */
struct shim_alloc *shim_alloc_next(struct shim_dev *d, CUdeviceptr p);
/* Evicts released allocations until the vmm's use, shim.ext_bytes and need fit
 * the budget (pass-through pools count against it). */
void shim_mem_fit_external(struct shim_dev *d, size_t need, struct shim_alloc *const *keep,
                           int nkeep);

/* ---- pool.c: stream-ordered allocation (cuMemAllocAsync, pools) ---- */

CUresult shim_alloc_async(CUdeviceptr *dptr, size_t bytes, CUmemoryPool pool, int current,
                          CUstream s, int ptds);
CUresult shim_free_async(CUdeviceptr dptr, CUstream s, int ptds);
CUresult shim_pool_create(CUmemoryPool *pool, const CUmemPoolProps *props);
CUresult shim_pool_destroy(CUmemoryPool pool);
CUresult shim_pool_trim(CUmemoryPool pool, size_t keep);
CUresult shim_pool_export(void *handle, CUmemoryPool pool, CUmemAllocationHandleType type,
                          unsigned long long flags);
/* What shim_pool_reclaim may do with freed allocations whose free completed. */
enum shim_reclaim {
	SHIM_RECLAIM_LIMITS,   /* destroy beyond the cache's limits */
	SHIM_RECLAIM_PRESSURE, /* destroy all completed (the device is full) */
	SHIM_RECLAIM_WAIT,     /* wait for every free, destroy all */
};
/* Under d's lock. */
void shim_pool_reclaim(struct shim_dev *d, enum shim_reclaim how);
/* Takes the device locks: a pass-through allocation freed with cuMemFree. */
void shim_pool_forget_external(CUdeviceptr p);

/* ---- mode.c: the baselines one program is measured against ---- */

/* The mode named by s (NULL or empty: spill). Returns 0, or -EINVAL with a
 * message naming SPILL_SHIM_MODE and the accepted values. */
int shim_mode_parse(const char *s, enum shim_mode *out);
const char *shim_mode_name(enum shim_mode m);
/* Under d's lock, from d's init in d's context (params and budget set): the
 * uvm modes hold d beyond its budget with one allocation of their own (a
 * balloon), so the driver oversubscribes at the budget. Returns 0 or -errno. */
int shim_base_init(struct shim_dev *d);
/* Under d's lock, d's context current: an allocation of a baseline mode on d
 * (async: stream-ordered; pool NULL: the current device's). Returns
 * CUDA_SUCCESS or the driver's error. */
CUresult shim_base_alloc(struct shim_dev *d, CUdeviceptr *dptr, size_t bytes, const char *api,
                         int async, CUmemoryPool pool, CUstream s, int ptds);
/* Under a's device's lock: frees a baseline allocation now (async 0) or once
 * the work queued on s so far is done (async 1, cuMemFreeAsync). */
CUresult shim_base_free(struct shim_alloc *a, int async, CUstream s, int ptds);
/* Under the locks of d and of every a[i]'s device (uvm-prefetch): prefetches
 * the managed ones to d on s, for d's operation op (each at most once per op). */
void shim_base_prefetch(struct shim_dev *d, struct shim_alloc *const *a, int n, CUstream s,
                        uint64_t op);
/* Under d's lock: cuMemGetInfo on d as the program sees it in a baseline mode. */
void shim_base_get_info(struct shim_dev *d, size_t *free_b, size_t *total_b);
/* With every device's lock: the report's lines of a baseline mode (totals,
 * then one line per device when there are several) and its JSON fields, of
 * device d or (NULL) added up over the devices. */
void shim_base_report(FILE *f);
void shim_base_json(FILE *f, const struct shim_dev *d);

/* ---- vmmap.c: chunks the program maps itself (cuMemCreate, cuMemMap) ---- */

/* The wrappers' work, from any thread and context: each takes the lock of
 * the chunk's device (unmap and set access: every device's); handles and
 * ranges the shim did not make go to the driver. */
CUresult shim_chunk_create(CUmemGenericAllocationHandle *h, size_t size,
                           const CUmemAllocationProp *prop, unsigned long long flags);
CUresult shim_chunk_release(CUmemGenericAllocationHandle h);
CUresult shim_chunk_map(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle h,
                        unsigned long long flags);
CUresult shim_chunk_unmap(CUdeviceptr ptr, size_t size);
CUresult shim_chunk_set_access(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc,
                               size_t count);
CUresult shim_chunk_retain(CUmemGenericAllocationHandle *h, void *addr);
CUresult shim_chunk_props(CUmemAllocationProp *prop, CUmemGenericAllocationHandle h);
CUresult shim_chunk_export(void *out, CUmemGenericAllocationHandle h,
                           CUmemAllocationHandleType type, unsigned long long flags);
CUresult shim_chunk_multicast(CUmemGenericAllocationHandle mc, size_t mc_off,
                              CUmemGenericAllocationHandle h, size_t off, size_t size,
                              unsigned long long flags);
CUresult shim_chunk_multicast_addr(CUmemGenericAllocationHandle mc, size_t mc_off, CUdeviceptr ptr,
                                   size_t size, unsigned long long flags);
/* Under a's device's lock: a chunk entry resident for an operation (its bytes
 * back unless overwrite; room made first in that device's budget; the moves
 * in its context). Returns 0 or -errno. */
int shim_chunk_hold(struct shim_alloc *a, struct shim_alloc *const *keep, int nkeep, int overwrite);
/* Under a's device's lock: copies a released chunk out to that device's vmm
 * and unmaps it. Returns 0, -EBUSY (held, pinned, evicted) or -errno. */
int shim_chunk_evict(struct shim_alloc *a);
int shim_chunk_resident(const struct shim_alloc *a);

/* ---- record.c: the launch recorder and its policy ---- */

struct shim_alloc;
struct shim_rec;
/* Lives as long as the process, like the shim's vmm (neither is closed). */
struct shim_rec *shim_rec_new(int belady);
/* One operation with its touched allocations (keys: their base addresses).
 * Returns the keys to prefetch next (at most max) into out. v NULL: no hints. */
int shim_rec_op(struct shim_rec *r, struct vmm *v, uint64_t sig, struct shim_alloc *const *a, int n,
                uint64_t *prefetch, int max);
/* The latest iteration found (0: none yet) and how many times it repeated;
 * returns 1 while the program follows it. */
int shim_rec_mode(const struct shim_rec *r, uint64_t *period, uint64_t *cycles);

/* ---- report.c ---- */

/* Per kernel name (or "memcpy"/"memset"): operations and the bytes brought in
 * for them. */
struct shim_kstat {
	char name[64];
	uint64_t ops, misses;
	uint64_t h2d, disk2h;
};

struct shim_launch_rec {
	double t;
	uint32_t k; /* kstat index */
};

/* ---- the shim's state (mem.c owns it) ---- */

struct shim_alloc {
	struct shim_dev *dev; /* the device it lives on */
	CUdeviceptr base;
	size_t bytes; /* as the program asked */
	uint64_t obj; /* vmm object */
	uint64_t seq; /* allocation number, for names */
	enum shim_backing backing;
	struct shim_dev *prefetched_to; /* uvm-prefetch: the device it was last prefetched to */
	uint64_t prefetched_op;         /* and that device's operation it was for */
	void *host;                     /* SHIM_BACK_HOST: the host address (cuMemFreeHost) */
	struct shim_chunk *chunk;       /* SHIM_BACK_CHUNK: the program's chunk */
	int held;                       /* acquired on the device (the shim releases in batches) */
	int pinned;                     /* never released (captured, exported, ...) */
	struct dev_event *ready;        /* the acquire's event, until it is known complete */
	CUstream ready_waited;          /* the stream that already waits for it (if waited) */
	int waited;
	uint32_t first_k;                  /* kstat of the first operation that used it, or -1 */
	uint64_t h2d, d2h, h2disk, disk2h; /* bytes moved, filled in at free */
	uint64_t last_use;                 /* shim.ops at its latest operation */
	size_t cap;                        /* the object's bytes (bytes <= cap after a reuse) */
	/* stream-ordered allocation (pool.c) */
	CUmemoryPool pool;             /* the pool it came from (NULL: cuMemAlloc) */
	int orphan;                    /* its pool was destroyed: never reused */
	struct dev_event *free_ev;     /* freed: recorded on the freeing stream */
	struct shim_alloc *next_freed; /* the freed cache, oldest first */
};

/* One device the program uses: its own vmm, budget, table and lock. Made at
 * that device's first allocation (the device current in the calling thread's
 * context); lives as long as the process. Its lock serializes the operations
 * that touch its allocations; its table changes only under both its lock and
 * shim.lock, so either one makes it safe to read. */
#define SHIM_MAX_DEV 16
struct shim_dev {
	pthread_mutex_t lock;
	int ready;  /* vmm open (atomic) */
	int failed; /* its init failed: its allocations pass through */
	int idx;    /* the device ordinal */
	struct dev_driver_api api;
	struct dev_ctx *dev;
	struct vmm *vmm;
	uint64_t budget;
	CUcontext ctx;
	CUdevice device;
	/* allocations sorted by base */
	struct shim_alloc **allocs;
	size_t nallocs, cap_allocs;
	/* program streams used since the last batch release */
	CUstream used[16];
	int nused, used_overflow;
	int peer_used; /* an operation on another device used its memory: synchronize all */
	struct dev_stream *join;
	struct dev_event *join_ev, *used_ev[16];
	struct shim_rec *rec;
	uint64_t ops, peer_ops, batch_releases;
	/* stream-ordered allocation (pool.c) */
	struct shim_alloc *freed, *freed_tail; /* freed in stream order, kept for reuse */
	size_t nfreed;
	uint64_t freed_bytes;
	uint64_t ext_bytes; /* held by allocations that pass through (counted in the budget) */
	uint64_t async_allocs, async_reuses, async_waits;
	/* chunks the program maps itself (vmmap.c) */
	uint64_t nchunks_made, chunk_evictions, chunk_restores, chunk_h2d, chunk_d2h;
};

/* Process-wide: the parameters, the devices, and the small shared tables
 * (freed ranges, kernels, report), under lock, which is taken after any
 * device lock and held briefly. */
struct shim_state {
	pthread_mutex_t lock;
	int ready;           /* params loaded and one device open (atomic) */
	int failed;          /* init failed: pass everything through */
	int capturing;       /* a stream began capturing: new allocations are pinned (atomic) */
	int loaded;          /* params and mode read */
	enum shim_mode mode; /* set before ready */
	struct sp_params params;
	struct shim_dev dev[SHIM_MAX_DEV];
	struct shim_dev *base; /* the first device opened (its trace lanes carry no device name) */
	int ndev;              /* devices opened (atomic) */
	uint64_t nseq;
	/* freed ranges, to refuse operations on them */
	struct {
		CUdeviceptr base;
		size_t bytes;
	} grave[256];
	unsigned ngrave;
	/* kernels */
	struct shim_kstat *kstats;
	uint32_t nk, cap_k;
	struct shim_fn_info *fns; /* open-addressing table by CUfunction */
	size_t cap_fns, nfns;
	/* report */
	struct shim_alloc **dead; /* freed allocations, for the report */
	size_t ndead, cap_dead;
	struct shim_launch_rec *launches; /* trace ring */
	uint64_t nlaunch;
	size_t cap_launch;
	uint64_t ops, refused;
	uint64_t stale_launches; /* launched with a freed address inside a struct parameter */
	double t0;
};
extern struct shim_state shim;

/* Takes shim.lock. */
uint32_t shim_kstat_get(const char *name);

/* report.c */
void shim_report_print(FILE *f);
int shim_report_json(FILE *f);
int shim_trace_write(FILE *f);
void shim_report_at_exit(void);
void shim_report_start_signal(void);

#endif
