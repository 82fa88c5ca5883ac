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
 * (d->ext_bytes). One log line names each such pool.
 * Everything here runs under the lock of the device the allocation is on;
 * the table of pools (shared by the devices) under shim.lock.
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

/* Per device, under its lock: allocations of pass-through pools (what the
 * budget counts) and free events of its context kept for the next frees. */
static struct pool_dev {
	struct {
		CUdeviceptr p;
		size_t bytes;
	} * ext;
	size_t next, cap_ext;
	struct dev_event *spare[SPARE_MAX];
	int nspare;
} pdev[SHIM_MAX_DEV];

/* Under shim.lock. */
static int pool_slot(CUmemoryPool h)
{
	for (int i = 0; i < npools; i++)
		if (pools[i].h == h)
			return i;
	return -1;
}

static int pool_passthrough(CUmemoryPool h)
{
	pthread_mutex_lock(&shim.lock);
	int i = pool_slot(h);
	int pass = i >= 0 && pools[i].passthrough;
	pthread_mutex_unlock(&shim.lock);
	return pass;
}

/* Marks h as passed through, with its one log line. Under shim.lock. */
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

static struct dev_event *event_get(struct shim_dev *d)
{
	struct pool_dev *pd = &pdev[d->idx];
	struct dev_event *e = NULL;
	if (pd->nspare)
		return pd->spare[--pd->nspare];
	if (dev_event_create(d->dev, &e) < 0)
		return NULL;
	return e;
}

static void event_put(struct shim_dev *d, struct dev_event *e)
{
	struct pool_dev *pd = &pdev[d->idx];
	if (pd->nspare < SPARE_MAX)
		pd->spare[pd->nspare++] = e;
	else if (dev_event_destroy(e) < 0)
		SP_WARN(SHIM, "%s", sp_last_error());
}

static CUstream stream_of(CUstream s, int ptds)
{
	return !s && ptds ? CU_STREAM_PER_THREAD : s;
}

static void ext_add(struct shim_dev *d, CUdeviceptr p, size_t bytes)
{
	struct pool_dev *pd = &pdev[d->idx];
	if (pd->next == pd->cap_ext) {
		size_t cap = pd->cap_ext ? 2 * pd->cap_ext : 64;
		__typeof__(pd->ext) t = realloc(pd->ext, cap * sizeof(*pd->ext));
		if (!t)
			return; /* not counted: the budget is then exceeded, nothing breaks */
		pd->ext = t;
		pd->cap_ext = cap;
	}
	pd->ext[pd->next].p = p;
	pd->ext[pd->next++].bytes = bytes;
	d->ext_bytes += bytes;
}

/* 1 if p was a pass-through allocation of d (now forgotten). */
static int ext_del(struct shim_dev *d, CUdeviceptr p)
{
	struct pool_dev *pd = &pdev[d->idx];
	for (size_t i = 0; i < pd->next; i++) {
		if (pd->ext[i].p == p) {
			d->ext_bytes -= pd->ext[i].bytes;
			pd->ext[i] = pd->ext[--pd->next];
			return 1;
		}
	}
	return 0;
}

void shim_pool_forget_external(CUdeviceptr p)
{
	for (int i = 0; i < SHIM_MAX_DEV; i++) {
		struct shim_dev *d = &shim.dev[i];
		if (!__atomic_load_n(&d->ready, __ATOMIC_ACQUIRE))
			continue;
		shim_dev_lock(d);
		int found = ext_del(d, p);
		shim_dev_unlock(d);
		if (found)
			return;
	}
}

/* Unlinks *pa from d's freed cache and returns it. */
static struct shim_alloc *freed_unlink(struct shim_dev *d, struct shim_alloc **pa,
                                       struct shim_alloc *prev)
{
	struct shim_alloc *a = *pa;
	*pa = a->next_freed;
	if (d->freed_tail == a)
		d->freed_tail = prev;
	a->next_freed = NULL;
	d->nfreed--;
	d->freed_bytes -= a->cap;
	return a;
}

void shim_pool_reclaim(struct shim_dev *d, enum shim_reclaim how)
{
	if (!d->ready)
		return;
	struct shim_alloc *prev = NULL;
	for (struct shim_alloc **pa = &d->freed; *pa;) {
		struct shim_alloc *a = *pa;
		int over = d->nfreed > FREED_MAX || d->freed_bytes > d->budget / 2;
		int go = how != SHIM_RECLAIM_LIMITS || over || a->orphan;
		if (go && how == SHIM_RECLAIM_WAIT && dev_event_sync(a->free_ev) < 0)
			SP_WARN(SHIM, "waiting for a free: %s", sp_last_error());
		if (!go || dev_event_query(a->free_ev) != 0) {
			prev = a;
			pa = &a->next_freed;
			continue;
		}
		freed_unlink(d, pa, prev);
		event_put(d, a->free_ev);
		a->free_ev = NULL;
		shim_alloc_destroy(a);
	}
}

CUresult shim_alloc_async(CUdeviceptr *dptr, size_t bytes, CUmemoryPool pool, int current,
                          CUstream s, int ptds)
{
	if (!dptr || !bytes)
		return CUDA_ERROR_INVALID_VALUE;
	struct shim_dev *d = NULL;
	int rc = shim_dev_enter(&d);
	if (rc == 0 && current &&
	    (!shim_real.cuDeviceGetMemPool ||
	     shim_real.cuDeviceGetMemPool(&pool, d->device) != CUDA_SUCCESS))
		pool = NULL;
	/* a graph being captured records an allocation node: the driver's */
	int pass = rc < 0 || __atomic_load_n(&shim.capturing, __ATOMIC_ACQUIRE) ||
	           (pool && pool_passthrough(pool));
	if (pass) {
		if (rc == 0 &&
		    shim.mode == SHIM_MODE_SPILL) /* room first: it lands on the device */
			shim_mem_fit_external(d, bytes, NULL, 0);
		if (rc == 0)
			shim_dev_unlock(d);
		CUresult r;
		if (current)
			r = ptds ? shim_real.cuMemAllocAsync_ptsz(dptr, bytes, s)
			         : shim_real.cuMemAllocAsync(dptr, bytes, s);
		else
			r = ptds ? shim_real.cuMemAllocFromPoolAsync_ptsz(dptr, bytes, pool, s)
			         : shim_real.cuMemAllocFromPoolAsync(dptr, bytes, pool, s);
		if (r == CUDA_SUCCESS && rc == 0) {
			shim_dev_lock(d);
			ext_add(d, *dptr, bytes);
			shim_dev_unlock(d);
		}
		if (r == CUDA_SUCCESS)
			shim_alloc_reused(*dptr, bytes);
		return r;
	}
	if (shim.mode != SHIM_MODE_SPILL) { /* a baseline's (mode.c) */
		CUresult r = shim_base_alloc(
		    d, dptr, bytes, current ? "cuMemAllocAsync" : "cuMemAllocFromPoolAsync", 1,
		    current ? NULL : pool, s, ptds);
		shim_dev_unlock(d);
		return r;
	}
	shim_pool_reclaim(d, SHIM_RECLAIM_LIMITS);
	struct shim_alloc *a = NULL, *prev = NULL, **pa = &d->freed;
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
			d->async_waits++;
		}
		if (r == CUDA_SUCCESS && shim_alloc_revive(c) < 0)
			r = CUDA_ERROR_OUT_OF_MEMORY;
		if (r == CUDA_SUCCESS) {
			a = freed_unlink(d, pa, prev);
			event_put(d, a->free_ev);
			a->free_ev = NULL;
			a->bytes = bytes;
			d->async_reuses++;
		}
	} else {
		r = shim_alloc_create(d, bytes,
		                      current ? "cuMemAllocAsync" : "cuMemAllocFromPoolAsync", &a);
		if (r == CUDA_SUCCESS)
			a->pool = pool;
	}
	if (r == CUDA_SUCCESS) {
		d->async_allocs++;
		*dptr = a->base;
	}
	shim_dev_unlock(d);
	return r;
}

CUresult shim_free_async(CUdeviceptr dptr, CUstream s, int ptds)
{
	int ready = __atomic_load_n(&shim.ready, __ATOMIC_ACQUIRE);
	struct shim_dev *d = ready ? shim_dev_of(dptr) : NULL;
	struct shim_alloc *a = NULL;
	if (d) {
		shim_dev_lock(d);
		a = shim_alloc_find(dptr);
		if (!a || a->base != dptr) {
			shim_dev_unlock(d);
			a = NULL;
		}
	}
	if (!a) {
		int freed = ready && dptr && shim_alloc_freed(dptr);
		if (ready && !freed)
			shim_pool_forget_external(dptr);
		if (freed) {
			SP_WARN(SHIM, "cuMemFreeAsync of %#llx: already freed (double free)",
			        (unsigned long long)dptr);
			return CUDA_ERROR_INVALID_VALUE;
		}
		return ptds ? shim_real.cuMemFreeAsync_ptsz(dptr, s)
		            : shim_real.cuMemFreeAsync(dptr, s);
	}
	if (a->backing == SHIM_BACK_CHUNK) { /* mapped memory is not a pool's */
		shim_dev_unlock(d);
		return CUDA_ERROR_INVALID_VALUE;
	}
	if (a->backing != SHIM_BACK_VMM) {
		CUresult r = shim_base_free(a, 1, s, ptds);
		shim_dev_unlock(d);
		return r;
	}
	struct dev_event *ev = event_get(d);
	if (!ev || dev_driver_event_record(ev, stream_of(s, ptds)) < 0) {
		/* no event (a stream of another context, say): free as cuMemFree does,
		 * after the devices are idle */
		if (ev)
			event_put(d, ev);
		shim_dev_unlock(d);
		return shim_mem_free(dptr);
	}
	shim_alloc_retire(a, ev);
	a->free_ev = ev;
	a->next_freed = NULL;
	if (d->freed_tail)
		d->freed_tail->next_freed = a;
	else
		d->freed = a;
	d->freed_tail = a;
	d->nfreed++;
	d->freed_bytes += a->cap;
	shim_pool_reclaim(d, SHIM_RECLAIM_LIMITS);
	shim_dev_unlock(d);
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
	unsigned set = shim_dev_lock_all();
	for (unsigned x = set; x; x &= x - 1) {
		struct shim_dev *d = &shim.dev[__builtin_ctz(x)];
		for (struct shim_alloc *a = d->freed; a; a = a->next_freed)
			if (a->pool == pool)
				a->orphan = 1;
		shim_pool_reclaim(d, SHIM_RECLAIM_LIMITS);
	}
	pthread_mutex_lock(&shim.lock);
	int i = pool_slot(pool);
	if (i >= 0)
		pools[i] = pools[--npools];
	pthread_mutex_unlock(&shim.lock);
	shim_dev_unlock_set(set);
	return shim_real.cuMemPoolDestroy(pool);
}

CUresult shim_pool_trim(CUmemoryPool pool, size_t keep)
{
	unsigned set = shim_dev_lock_all();
	uint64_t kept = 0;
	for (unsigned x = set; x; x &= x - 1)
		for (struct shim_alloc *a = shim.dev[__builtin_ctz(x)].freed; a; a = a->next_freed)
			kept += a->pool == pool ? a->cap : 0;
	for (unsigned x = set; x; x &= x - 1) {
		struct shim_dev *d = &shim.dev[__builtin_ctz(x)];
		struct shim_alloc *prev = NULL;
		for (struct shim_alloc **pa = &d->freed; *pa && kept > keep;) {
			struct shim_alloc *a = *pa;
			if (a->pool != pool || dev_event_query(a->free_ev) != 0) {
				prev = a;
				pa = &a->next_freed;
				continue;
			}
			freed_unlink(d, pa, prev);
			kept -= a->cap;
			event_put(d, a->free_ev);
			a->free_ev = NULL;
			shim_alloc_destroy(a);
		}
	}
	shim_dev_unlock_set(set);
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
