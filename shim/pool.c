/* shim/pool.c — stream-ordered allocation: cuMemAllocAsync, cuMemFreeAsync,
 * cuMemAllocFromPoolAsync and the pools they draw from.
 *
 * An asynchronous allocation is a stable vmm object like any other (evictable,
 * same address for life). A free is stream-ordered: the allocation leaves the
 * table at once (an operation on it is refused, as a use after free), an event
 * is recorded on the freeing stream, and the object is kept in a cache of
 * freed allocations. A later asynchronous allocation from the same pool that
 * fits reuses it (same address), with the allocating stream made to wait for
 * that event first, as the driver's pools insert the dependency: work queued
 * before the free never sees the new owner's bytes. A cached object is
 * destroyed only once its free has completed (over the cache's limits, under
 * memory pressure, at cuMemPoolTrimTo/Destroy).
 * Pools the shim cannot make evictable (created with export handle types, or
 * exported later) pass through to the driver: their allocations are the
 * driver's, resident and never moved, and their bytes count against the budget
 * (shim.ext_bytes). One log line names each such pool.
 * Everything here runs under shim.lock.
 */
#include "shim/internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>

#define FREED_MAX 64 /* allocations kept for reuse at most */
#define POOLS_MAX 64 /* pools the shim knows the kind of */
#define SPARE_MAX 64 /* free events kept for the next frees */

/* Pools created through the shim; unknown pools (the default one) are managed. */
static struct {
	CUmemoryPool h;
	int passthrough;
} pools[POOLS_MAX];
static int npools;

/* Allocations of pass-through pools: what the budget counts. */
static struct {
	CUdeviceptr p;
	size_t bytes;
} * ext;
static size_t next, cap_ext;

static struct dev_event *spare[SPARE_MAX];
static int nspare;

static int pool_slot(CUmemoryPool h)
{
	for (int i = 0; i < npools; i++)
		if (pools[i].h == h)
			return i;
	return -1;
}

static int pool_passthrough(CUmemoryPool h)
{
	int i = pool_slot(h);
	return i >= 0 && pools[i].passthrough;
}

/* Marks h as passed through, with its one log line. */
static void pool_mark(CUmemoryPool h, const char *why)
{
	int i = pool_slot(h);
	if (i < 0 && npools < POOLS_MAX) {
		i = npools++;
		pools[i].h = h;
		pools[i].passthrough = 0;
	}
	if (i >= 0 && pools[i].passthrough)
		return;
	if (i >= 0)
		pools[i].passthrough = 1;
	SP_WARN(SHIM,
	        "memory pool %p %s: its allocations pass through to the driver, pinned on the "
	        "device and counted in the budget",
	        (void *)h, why);
}

static struct dev_event *event_get(void)
{
	struct dev_event *e = NULL;
	if (nspare)
		return spare[--nspare];
	if (dev_event_create(shim.dev, &e) < 0)
		return NULL;
	return e;
}

static void event_put(struct dev_event *e)
{
	if (nspare < SPARE_MAX)
		spare[nspare++] = e;
	else if (dev_event_destroy(e) < 0)
		SP_WARN(SHIM, "%s", sp_last_error());
}

static CUstream stream_of(CUstream s, int ptds)
{
	return !s && ptds ? CU_STREAM_PER_THREAD : s;
}

static void ext_add(CUdeviceptr p, size_t bytes)
{
	if (next == cap_ext) {
		size_t cap = cap_ext ? 2 * cap_ext : 64;
		__typeof__(ext) t = realloc(ext, cap * sizeof(*ext));
		if (!t)
			return; /* not counted: the budget is then exceeded, nothing breaks */
		ext = t;
		cap_ext = cap;
	}
	ext[next].p = p;
	ext[next++].bytes = bytes;
	shim.ext_bytes += bytes;
}

/* 1 if p was a pass-through allocation (now forgotten). */
static int ext_del(CUdeviceptr p)
{
	for (size_t i = 0; i < next; i++) {
		if (ext[i].p == p) {
			shim.ext_bytes -= ext[i].bytes;
			ext[i] = ext[--next];
			return 1;
		}
	}
	return 0;
}

void shim_pool_forget_external(CUdeviceptr p)
{
	ext_del(p);
}

/* Unlinks *pa from the freed cache and returns it. */
static struct shim_alloc *freed_unlink(struct shim_alloc **pa, struct shim_alloc *prev)
{
	struct shim_alloc *a = *pa;
	*pa = a->next_freed;
	if (shim.freed_tail == a)
		shim.freed_tail = prev;
	a->next_freed = NULL;
	shim.nfreed--;
	shim.freed_bytes -= a->cap;
	return a;
}

void shim_pool_reclaim(enum shim_reclaim how)
{
	if (!shim.ready)
		return;
	struct shim_alloc *prev = NULL;
	for (struct shim_alloc **pa = &shim.freed; *pa;) {
		struct shim_alloc *a = *pa;
		int over = shim.nfreed > FREED_MAX || shim.freed_bytes > shim.budget / 2;
		int go = how != SHIM_RECLAIM_LIMITS || over || a->orphan;
		if (go && how == SHIM_RECLAIM_WAIT && dev_event_sync(a->free_ev) < 0)
			SP_WARN(SHIM, "waiting for a free: %s", sp_last_error());
		if (!go || dev_event_query(a->free_ev) != 0) {
			prev = a;
			pa = &a->next_freed;
			continue;
		}
		freed_unlink(pa, prev);
		event_put(a->free_ev);
		a->free_ev = NULL;
		shim_alloc_destroy(a);
	}
}

CUresult shim_alloc_async(CUdeviceptr *dptr, size_t bytes, CUmemoryPool pool, int current,
                          CUstream s, int ptds)
{
	if (!dptr || !bytes)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&shim.lock);
	int rc = shim_mm_init();
	if (rc == 0 && current &&
	    (!shim_real.cuDeviceGetMemPool ||
	     shim_real.cuDeviceGetMemPool(&pool, shim.device) != CUDA_SUCCESS))
		pool = NULL;
	/* a graph being captured records an allocation node: the driver's */
	int pass = rc < 0 || shim.capturing || (pool && pool_passthrough(pool));
	if (pass) {
		if (rc == 0 &&
		    shim.mode == SHIM_MODE_SPILL) /* room first: it lands on the device */
			shim_mem_fit_external(bytes, NULL, 0);
		pthread_mutex_unlock(&shim.lock);
		CUresult r;
		if (current)
			r = ptds ? shim_real.cuMemAllocAsync_ptsz(dptr, bytes, s)
			         : shim_real.cuMemAllocAsync(dptr, bytes, s);
		else
			r = ptds ? shim_real.cuMemAllocFromPoolAsync_ptsz(dptr, bytes, pool, s)
			         : shim_real.cuMemAllocFromPoolAsync(dptr, bytes, pool, s);
		if (r == CUDA_SUCCESS && rc == 0) {
			pthread_mutex_lock(&shim.lock);
			ext_add(*dptr, bytes);
			pthread_mutex_unlock(&shim.lock);
		}
		return r;
	}
	if (shim.mode != SHIM_MODE_SPILL) { /* a baseline's (mode.c) */
		CUresult r = shim_base_alloc(
		    dptr, bytes, current ? "cuMemAllocAsync" : "cuMemAllocFromPoolAsync", 1,
		    current ? NULL : pool, s, ptds);
		pthread_mutex_unlock(&shim.lock);
		return r;
	}
	shim_pool_reclaim(SHIM_RECLAIM_LIMITS);
	struct shim_alloc *a = NULL, *prev = NULL, **pa = &shim.freed;
	for (; *pa; prev = *pa, pa = &(*pa)->next_freed) {
		struct shim_alloc *c = *pa;
		if (!c->orphan && c->pool == pool && c->cap >= bytes && c->cap / 2 <= bytes)
			break;
	}
	CUresult r = CUDA_SUCCESS;
	if (*pa) {
		/* the new owner's stream waits for the work queued before the free */
		struct shim_alloc *c = *pa;
		CUstream st = stream_of(s, ptds);
		if (dev_event_query(c->free_ev) != 0) {
			if (dev_driver_stream_wait(c->free_ev, st) < 0) {
				SP_WARN(SHIM, "ordering a reuse after its free: %s; waiting",
				        sp_last_error());
				if (dev_event_sync(c->free_ev) < 0)
					r = CUDA_ERROR_UNKNOWN;
			}
			shim.async_waits++;
		}
		if (r == CUDA_SUCCESS && shim_alloc_revive(c) < 0)
			r = CUDA_ERROR_OUT_OF_MEMORY;
		if (r == CUDA_SUCCESS) {
			a = freed_unlink(pa, prev);
			event_put(a->free_ev);
			a->free_ev = NULL;
			a->bytes = bytes;
			shim.async_reuses++;
		}
	} else {
		r = shim_alloc_create(bytes,
		                      current ? "cuMemAllocAsync" : "cuMemAllocFromPoolAsync", &a);
		if (r == CUDA_SUCCESS)
			a->pool = pool;
	}
	if (r == CUDA_SUCCESS) {
		shim.async_allocs++;
		*dptr = a->base;
	}
	pthread_mutex_unlock(&shim.lock);
	return r;
}

CUresult shim_free_async(CUdeviceptr dptr, CUstream s, int ptds)
{
	pthread_mutex_lock(&shim.lock);
	struct shim_alloc *a = shim.ready ? shim_alloc_find(dptr) : NULL;
	if (!a || a->base != dptr) {
		int freed = shim.ready && dptr && shim_alloc_freed(dptr);
		if (shim.ready && !freed)
			ext_del(dptr);
		pthread_mutex_unlock(&shim.lock);
		if (freed) {
			SP_WARN(SHIM, "cuMemFreeAsync of %#llx: already freed (double free)",
			        (unsigned long long)dptr);
			return CUDA_ERROR_INVALID_VALUE;
		}
		return ptds ? shim_real.cuMemFreeAsync_ptsz(dptr, s)
		            : shim_real.cuMemFreeAsync(dptr, s);
	}
	if (a->backing == SHIM_BACK_CHUNK) { /* mapped memory is not a pool's */
		pthread_mutex_unlock(&shim.lock);
		return CUDA_ERROR_INVALID_VALUE;
	}
	if (a->backing != SHIM_BACK_VMM) {
		CUresult r = shim_base_free(a, 1, s, ptds);
		pthread_mutex_unlock(&shim.lock);
		return r;
	}
	struct dev_event *ev = event_get();
	if (!ev || dev_driver_event_record(ev, stream_of(s, ptds)) < 0) {
		/* no event: free as cuMemFree does, after the device is idle */
		if (ev)
			event_put(ev);
		pthread_mutex_unlock(&shim.lock);
		return shim_mem_free(dptr);
	}
	shim_alloc_retire(a, ev);
	a->free_ev = ev;
	a->next_freed = NULL;
	if (shim.freed_tail)
		shim.freed_tail->next_freed = a;
	else
		shim.freed = a;
	shim.freed_tail = a;
	shim.nfreed++;
	shim.freed_bytes += a->cap;
	shim_pool_reclaim(SHIM_RECLAIM_LIMITS);
	pthread_mutex_unlock(&shim.lock);
	return CUDA_SUCCESS;
}

CUresult shim_pool_create(CUmemoryPool *pool, const CUmemPoolProps *props)
{
	CUresult r = shim_real.cuMemPoolCreate(pool, props);
	if (r != CUDA_SUCCESS)
		return r;
	pthread_mutex_lock(&shim.lock);
	if (props->handleTypes != CU_MEM_HANDLE_TYPE_NONE)
		pool_mark(*pool, "is exportable (created with handle types)");
	else if (props->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
		pool_mark(*pool, "is not device memory");
	else if (npools < POOLS_MAX) {
		pools[npools].h = *pool;
		pools[npools++].passthrough = 0;
	}
	pthread_mutex_unlock(&shim.lock);
	return r;
}

/* Cached allocations of the pool are never reused again and go once their
 * free completes; live ones stay valid until freed, as with the driver. */
CUresult shim_pool_destroy(CUmemoryPool pool)
{
	pthread_mutex_lock(&shim.lock);
	for (struct shim_alloc *a = shim.freed; a; a = a->next_freed)
		if (a->pool == pool)
			a->orphan = 1;
	shim_pool_reclaim(SHIM_RECLAIM_LIMITS);
	int i = pool_slot(pool);
	if (i >= 0)
		pools[i] = pools[--npools];
	pthread_mutex_unlock(&shim.lock);
	return shim_real.cuMemPoolDestroy(pool);
}

CUresult shim_pool_trim(CUmemoryPool pool, size_t keep)
{
	pthread_mutex_lock(&shim.lock);
	uint64_t kept = 0;
	for (struct shim_alloc *a = shim.freed; a; a = a->next_freed)
		kept += a->pool == pool ? a->cap : 0;
	struct shim_alloc *prev = NULL;
	for (struct shim_alloc **pa = &shim.freed; *pa && kept > keep;) {
		struct shim_alloc *a = *pa;
		if (a->pool != pool || dev_event_query(a->free_ev) != 0) {
			prev = a;
			pa = &a->next_freed;
			continue;
		}
		freed_unlink(pa, prev);
		kept -= a->cap;
		event_put(a->free_ev);
		a->free_ev = NULL;
		shim_alloc_destroy(a);
	}
	pthread_mutex_unlock(&shim.lock);
	return shim_real.cuMemPoolTrimTo(pool, keep);
}

/* A pool exported after allocations were made from it: those stay the shim's
 * (an export of their pointers fails), later ones pass through. */
CUresult shim_pool_export(void *handle, CUmemoryPool pool, CUmemAllocationHandleType type,
                          unsigned long long flags)
{
	CUresult r = shim_real.cuMemPoolExportToShareableHandle(handle, pool, type, flags);
	if (r == CUDA_SUCCESS) {
		pthread_mutex_lock(&shim.lock);
		pool_mark(pool, "was exported (cuMemPoolExportToShareableHandle)");
		pthread_mutex_unlock(&shim.lock);
	}
	return r;
}
