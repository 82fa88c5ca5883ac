/* shim/vmmap.c — device memory the program maps itself: cuMemCreate, cuMemMap,
 * cuMemSetAccess, cuMemUnmap, cuMemRelease (PyTorch's expandable segments).
 *
 * The program's reserved range stays its own; what the shim takes over is
 * the physical chunk. cuMemCreate returns a handle of the shim's (a struct
 * shim_chunk) over the driver's. A chunk mapped once, whole, is an entry of
 * the allocation table (SHIM_BACK_CHUNK) made resident before the operations
 * that reach it, like any allocation. Evicting it copies its bytes into a vmm
 * object on the host (from there the vmm may move them to disk), unmaps it
 * from the program's range and releases the driver's chunk; restoring it
 * creates a new chunk, maps it at the same address with the program's access
 * and copies the bytes back. While a chunk holds device memory (created,
 * mapped or not) its bytes count in its device's ext_bytes, so that device's
 * budget covers it. A chunk the shim cannot take over is pinned (resident for
 * good, counted), with one log line naming it: created with shareable handle
 * types, exported, mapped twice or in part. In the baseline modes every chunk
 * is pinned (the driver's memory, never moved) and counted, without a line.
 * Handles the shim did not make (imported ones, host-located chunks, chunks
 * made while the calling thread had no context) pass through, uncounted.
 * A chunk belongs to the device of its location (prop->location.id), whatever
 * context is current when it is made, mapped, unmapped or released: that
 * device's vmm holds its bytes while it is evicted, its lock guards it, its
 * table holds its mapping, and its moves run in that device's context.
 * Chunk moves are synchronous (the device is synchronized first): correct
 * before fast. The table of handles is shared by the devices, under
 * shim.lock; a chunk's fields are under its device's lock. Unmap and set
 * access, which may span chunks of several devices, lock every device.
 */
#include "shim/internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define CHUNK_ACCESS_MAX 4

struct shim_chunk {
	struct shim_dev *dev;              /* its location's device (set before it is listed) */
	CUmemGenericAllocationHandle real; /* the driver's chunk; 0 while evicted */
	size_t bytes;
	CUmemAllocationProp prop;
	int refs;                 /* the program's handle references (create, retain) */
	int maps;                 /* its mappings by the program */
	int pinned;               /* never evicted */
	struct shim_alloc *alloc; /* the table entry of its one mapping */
	CUmemAccessDesc access[CHUNK_ACCESS_MAX];
	int naccess;
	uint64_t obj; /* evicted: the vmm object that holds its bytes */
};

/* The shim's handles, sorted, so a handle of the driver's is told apart.
 * Under shim.lock. */
static struct shim_chunk **chunks;
static size_t nchunks, cap_chunks;

static size_t chunk_lower(const struct shim_chunk *c)
{
	size_t lo = 0, hi = nchunks;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if ((uintptr_t)chunks[mid] < (uintptr_t)c)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* Under shim.lock. */
static struct shim_chunk *lookup(CUmemGenericAllocationHandle h)
{
	struct shim_chunk *c = (struct shim_chunk *)(uintptr_t)h;
	size_t i = chunk_lower(c);
	return i < nchunks && chunks[i] == c ? c : NULL;
}

/* The shim's chunk behind h with its device locked, or NULL (a handle of the
 * driver's; nothing locked). */
static struct shim_chunk *chunk_lock(CUmemGenericAllocationHandle h)
{
	if (!__atomic_load_n(&shim.ready, __ATOMIC_ACQUIRE))
		return NULL;
	for (;;) {
		pthread_mutex_lock(&shim.lock);
		struct shim_chunk *c = lookup(h);
		struct shim_dev *d = c ? c->dev : NULL;
		pthread_mutex_unlock(&shim.lock);
		if (!d)
			return NULL;
		shim_dev_lock(d);
		/* freed (and its address reused) in between: look again */
		pthread_mutex_lock(&shim.lock);
		int same = lookup(h) == c && c->dev == d;
		pthread_mutex_unlock(&shim.lock);
		if (same)
			return c;
		shim_dev_unlock(d);
	}
}

/* Takes shim.lock. */
static int chunk_add(struct shim_chunk *c)
{
	int rc = 0;
	pthread_mutex_lock(&shim.lock);
	if (nchunks == cap_chunks) {
		size_t cap = cap_chunks ? 2 * cap_chunks : 64;
		struct shim_chunk **t = realloc(chunks, cap * sizeof(*t));
		if (t) {
			chunks = t;
			cap_chunks = cap;
		} else {
			rc = -ENOMEM;
		}
	}
	if (rc == 0) {
		size_t i = chunk_lower(c);
		memmove(&chunks[i + 1], &chunks[i], (nchunks - i) * sizeof(*chunks));
		chunks[i] = c;
		nchunks++;
	}
	pthread_mutex_unlock(&shim.lock);
	return rc;
}

/* Takes shim.lock. */
static void chunk_del(struct shim_chunk *c)
{
	pthread_mutex_lock(&shim.lock);
	size_t i = chunk_lower(c);
	if (i < nchunks && chunks[i] == c) {
		memmove(&chunks[i], &chunks[i + 1], (nchunks - i - 1) * sizeof(*chunks));
		nchunks--;
	}
	pthread_mutex_unlock(&shim.lock);
}

/* Frees c once the program holds no handle to it and no mapping. */
static void chunk_maybe_free(struct shim_chunk *c)
{
	if (c->refs || c->maps)
		return;
	struct shim_dev *d = c->dev;
	if (c->real) {
		if (shim_real.cuMemRelease(c->real) != CUDA_SUCCESS)
			SP_WARN(SHIM, "cuMemRelease of a chunk of %zu bytes failed", c->bytes);
		d->ext_bytes -= c->bytes;
	}
	if (c->obj && vmm_obj_destroy(d->vmm, c->obj) < 0)
		SP_WARN(SHIM, "%s", sp_last_error());
	chunk_del(c);
	free(c);
}

/* The program's access to a new mapping of c (or read-write on its device). */
static CUresult chunk_access(struct shim_chunk *c, CUdeviceptr at)
{
	CUmemAccessDesc rw = {
	    .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = c->dev->device},
	    .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
	return c->naccess ? shim_real.cuMemSetAccess(at, c->bytes, c->access, (size_t)c->naccess)
	                  : shim_real.cuMemSetAccess(at, c->bytes, &rw, 1);
}

/* chunk_restore's work, in its device's context. */
static int restore_in(struct shim_chunk *c, int overwrite)
{
	struct shim_dev *d = c->dev;
	struct shim_alloc *a = c->alloc;
	CUmemGenericAllocationHandle h = 0;
	CUresult r = shim_real.cuMemCreate(&h, c->bytes, &c->prop, 0);
	if (r != CUDA_SUCCESS)
		return sp_error(-ENOMEM, "shim: restoring a chunk of %zu bytes: cuMemCreate: %d",
		                c->bytes, (int)r);
	if ((r = shim_real.cuMemMap(a->base, c->bytes, 0, h, 0)) != CUDA_SUCCESS ||
	    (r = chunk_access(c, a->base)) != CUDA_SUCCESS) {
		if (shim_real.cuMemUnmap(a->base, c->bytes) != CUDA_SUCCESS)
			SP_TRACE(SHIM, "unmapping a failed restore");
		if (shim_real.cuMemRelease(h) != CUDA_SUCCESS)
			SP_TRACE(SHIM, "releasing a failed restore");
		return sp_error(-EIO, "shim: restoring a chunk at %#llx: %d",
		                (unsigned long long)a->base, (int)r);
	}
	if (!overwrite) {
		void *p = NULL;
		struct dev_event *ready = NULL;
		int rc = vmm_acquire(d->vmm, c->obj, VMM_HOST, VMM_READ, &p, &ready);
		if (rc == 0 && ready)
			rc = dev_event_sync(ready);
		if (rc == 0 && shim_real.cuMemcpyHtoD_v2(a->base, p, c->bytes) != CUDA_SUCCESS)
			rc = sp_error(-EIO, "shim: copying a chunk back to %#llx failed",
			              (unsigned long long)a->base);
		if (p && vmm_release(d->vmm, c->obj, VMM_HOST, NULL) < 0)
			SP_WARN(SHIM, "%s", sp_last_error());
		if (rc < 0) {
			if (shim_real.cuMemUnmap(a->base, c->bytes) != CUDA_SUCCESS ||
			    shim_real.cuMemRelease(h) != CUDA_SUCCESS)
				SP_TRACE(SHIM, "undoing a failed restore");
			return rc;
		}
		a->h2d += c->bytes;
		d->chunk_h2d += c->bytes;
	}
	if (vmm_obj_destroy(d->vmm, c->obj) < 0)
		SP_WARN(SHIM, "%s", sp_last_error());
	c->obj = 0;
	c->real = h;
	d->ext_bytes += c->bytes;
	d->chunk_restores++;
	return 0;
}

/* Brings an evicted chunk back at its address (overwrite: without its bytes),
 * whichever context the calling thread has. */
static int chunk_restore(struct shim_chunk *c, int overwrite)
{
	int pushed = shim_ctx_push(c->dev->ctx);
	int rc = restore_in(c, overwrite);
	shim_ctx_pop(pushed);
	return rc;
}

int shim_chunk_resident(const struct shim_alloc *a)
{
	return a->chunk->real != 0;
}

int shim_chunk_hold(struct shim_alloc *a, struct shim_alloc *const *keep, int nkeep, int overwrite)
{
	if (!a->chunk->real) {
		shim_mem_fit_external(a->dev, a->bytes, keep, nkeep);
		SP_CHECK(chunk_restore(a->chunk, overwrite));
	}
	a->held = 1;
	a->ready = NULL;
	return 0;
}

/* shim_chunk_evict's work, in its device's context. */
static int evict_in(struct shim_alloc *a)
{
	struct shim_chunk *c = a->chunk;
	struct shim_dev *d = c->dev;
	char name[32];
	snprintf(name, sizeof(name), "chunk%" PRIu64, a->seq);
	struct vmm_obj_desc od = {.bytes = c->bytes,
	                          .kind = VMM_KIND_WORKSPACE,
	                          .name = name,
	                          .flags = VMM_OBJ_STABLE,
	                          .home = 0};
	uint64_t obj = 0;
	SP_CHECK(vmm_obj_create(d->vmm, &od, &obj));
	/* the program's queued work may still use it, on its device or a peer */
	shim_dev_sync(d);
	void *p = NULL;
	struct dev_event *ready = NULL;
	int rc = vmm_acquire(d->vmm, obj, VMM_HOST, VMM_OVERWRITE, &p, &ready);
	if (rc == 0 && ready)
		rc = dev_event_sync(ready);
	if (rc == 0 && shim_real.cuMemcpyDtoH_v2(p, a->base, c->bytes) != CUDA_SUCCESS)
		rc = sp_error(-EIO, "shim: copying out the chunk at %#llx failed",
		              (unsigned long long)a->base);
	if (p && vmm_release(d->vmm, obj, VMM_HOST, NULL) < 0)
		SP_WARN(SHIM, "%s", sp_last_error());
	if (rc == 0 && shim_real.cuMemUnmap(a->base, c->bytes) != CUDA_SUCCESS)
		rc = sp_error(-EIO, "shim: unmapping the chunk at %#llx failed",
		              (unsigned long long)a->base);
	if (rc < 0) {
		if (vmm_obj_destroy(d->vmm, obj) < 0)
			SP_WARN(SHIM, "%s", sp_last_error());
		return rc;
	}
	if (shim_real.cuMemRelease(c->real) != CUDA_SUCCESS)
		SP_WARN(SHIM, "cuMemRelease of an evicted chunk failed");
	c->real = 0;
	c->obj = obj;
	d->ext_bytes -= c->bytes;
	a->d2h += c->bytes;
	d->chunk_d2h += c->bytes;
	d->chunk_evictions++;
	return 0;
}

int shim_chunk_evict(struct shim_alloc *a)
{
	struct shim_chunk *c = a->chunk;
	if (!c->real || c->pinned || a->held)
		return -EBUSY;
	int pushed = shim_ctx_push(c->dev->ctx);
	int rc = evict_in(a);
	shim_ctx_pop(pushed);
	return rc;
}

/* Resident for good, with its one log line. */
static CUresult chunk_pin(struct shim_chunk *c, const char *why)
{
	if (c->pinned)
		return CUDA_SUCCESS;
	if (c->alloc && !c->real) {
		shim_mem_fit_external(c->dev, c->bytes, NULL, 0);
		if (chunk_restore(c, 0) < 0) {
			SP_WARN(SHIM, "%s", sp_last_error());
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
	}
	c->pinned = 1;
	if (c->alloc) {
		c->alloc->pinned = 1;
		c->alloc->held = 1;
	}
	SP_WARN(SHIM,
	        "memory chunk %p (%zu bytes) %s: pinned on the device and counted in the budget",
	        (void *)c, c->bytes, why);
	return CUDA_SUCCESS;
}

/* ---- the wrappers' work (each takes the locks it needs) ------------------------ */

/* The chunk entry holding p with its device locked, or NULL (nothing locked). */
static struct shim_alloc *entry_lock(CUdeviceptr p)
{
	struct shim_dev *d = __atomic_load_n(&shim.ready, __ATOMIC_ACQUIRE) ? shim_dev_of(p) : NULL;
	if (!d)
		return NULL;
	shim_dev_lock(d);
	struct shim_alloc *a = shim_alloc_find(p);
	if (a && a->dev == d && a->backing == SHIM_BACK_CHUNK)
		return a;
	shim_dev_unlock(d); /* unmapped in between, or not a chunk: the driver's */
	return NULL;
}

CUresult shim_chunk_create(CUmemGenericAllocationHandle *h, size_t size,
                           const CUmemAllocationProp *prop, unsigned long long flags)
{
	struct shim_dev *d = NULL;
	/* the chunk's device is its location's, whichever context is current */
	if (!h || !prop || !size || flags || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
	    shim_dev_enter_at(prop->location.id, &d) < 0)
		return shim_real.cuMemCreate(h, size, prop, flags);
	int spill = shim.mode == SHIM_MODE_SPILL;
	CUresult r = CUDA_ERROR_OUT_OF_MEMORY;
	struct shim_chunk *c = calloc(1, sizeof(*c));
	if (c) {
		c->dev = d;
		if (chunk_add(c) == 0) {
			if (spill)
				shim_mem_fit_external(d, size, NULL, 0); /* room first */
			r = shim_real.cuMemCreate(&c->real, size, prop, flags);
			if (r != CUDA_SUCCESS)
				chunk_del(c);
		}
	}
	if (r != CUDA_SUCCESS) {
		free(c);
		shim_dev_unlock(d);
		return r;
	}
	c->bytes = size;
	c->prop = *prop;
	c->refs = 1;
	d->ext_bytes += size;
	d->nchunks_made++;
	if (!spill)
		c->pinned = 1; /* a baseline's: the driver's memory, never moved, counted */
	else if (prop->requestedHandleTypes != CU_MEM_HANDLE_TYPE_NONE)
		chunk_pin(c, "is exportable (created with shareable handle types)");
	*h = (CUmemGenericAllocationHandle)(uintptr_t)c;
	shim_dev_unlock(d);
	return CUDA_SUCCESS;
}

CUresult shim_chunk_release(CUmemGenericAllocationHandle h)
{
	struct shim_chunk *c = chunk_lock(h);
	if (!c)
		return shim_real.cuMemRelease(h);
	struct shim_dev *d = c->dev;
	CUresult r = CUDA_ERROR_INVALID_VALUE;
	if (c->refs > 0) {
		c->refs--;
		chunk_maybe_free(c);
		r = CUDA_SUCCESS;
	}
	shim_dev_unlock(d);
	return r;
}

CUresult shim_chunk_map(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle h,
                        unsigned long long flags)
{
	struct shim_chunk *c = chunk_lock(h);
	if (!c) {
		CUresult r = shim_real.cuMemMap(ptr, size, offset, h, flags);
		if (r == CUDA_SUCCESS)
			shim_alloc_reused(ptr, size); /* the driver's chunk, where the shim's was */
		return r;
	}
	struct shim_dev *d = c->dev;
	CUresult r = CUDA_SUCCESS;
	if (c->maps || offset || size != c->bytes)
		r = chunk_pin(c, c->maps ? "is mapped twice" : "is mapped in part");
	if (r == CUDA_SUCCESS)
		r = shim_real.cuMemMap(ptr, size, offset, c->real, flags);
	if (r == CUDA_SUCCESS && !c->maps++) {
		/* in its device's table, whichever context mapped it */
		struct shim_alloc *a = NULL;
		if (shim_alloc_insert(d, ptr, size, SHIM_BACK_CHUNK, &a) == CUDA_SUCCESS) {
			a->chunk = c;
			a->held = 1; /* resident until a batch release */
			a->pinned = c->pinned;
			c->alloc = a;
		} else {
			chunk_pin(c, "could not be tracked");
		}
	}
	shim_dev_unlock(d);
	return r;
}

/* Among the devices in set: the chunk entry that holds at or, else, starts
 * first above it, if it starts below end. */
static struct shim_alloc *next_chunk(unsigned set, CUdeviceptr at, CUdeviceptr end)
{
	struct shim_alloc *best = NULL;
	for (; set; set &= set - 1) {
		struct shim_dev *d = &shim.dev[__builtin_ctz(set)];
		for (CUdeviceptr p = at; p < end;) {
			struct shim_alloc *x = shim_alloc_next(d, p);
			if (!x || x->base >= end)
				break;
			if (x->backing == SHIM_BACK_CHUNK) {
				if (!best || x->base < best->base)
					best = x;
				break;
			}
			p = x->base + x->bytes;
		}
	}
	return best;
}

/* The chunk entries in [ptr, ptr+size) of the devices in set (locked), in
 * address order, through fn; the parts between them go to the driver's
 * through gap. */
static CUresult chunk_walk(unsigned set, CUdeviceptr ptr, size_t size,
                           CUresult (*fn)(struct shim_alloc *, void *),
                           CUresult (*gap)(CUdeviceptr, size_t, void *), void *arg)
{
	CUdeviceptr at = ptr, end = ptr + size;
	CUresult r = CUDA_SUCCESS, e;
	while (at < end) {
		struct shim_alloc *a = next_chunk(set, at, end);
		CUdeviceptr stop = a ? a->base : end;
		if (a && (a->base < at || a->base + a->bytes > end))
			return CUDA_ERROR_INVALID_VALUE; /* a mapping cut in two: the driver's error */
		if (stop > at && (e = gap(at, stop - at, arg)) != CUDA_SUCCESS && r == CUDA_SUCCESS)
			r = e;
		if (!a)
			break;
		at = a->base + a->bytes;
		if ((e = fn(a, arg)) != CUDA_SUCCESS && r == CUDA_SUCCESS)
			r = e;
	}
	return r;
}

static CUresult unmap_gap(CUdeviceptr p, size_t n, void *arg)
{
	return shim_real.cuMemUnmap(p, n);
}

static CUresult unmap_one(struct shim_alloc *a, void *arg)
{
	struct shim_chunk *c = a->chunk;
	CUresult r = CUDA_SUCCESS;
	if (c->real)
		r = shim_real.cuMemUnmap(a->base, a->bytes);
	if (r != CUDA_SUCCESS)
		return r;
	if (c->obj) { /* evicted: its bytes go */
		if (vmm_obj_destroy(c->dev->vmm, c->obj) < 0)
			SP_WARN(SHIM, "%s", sp_last_error());
		c->obj = 0;
	}
	a->held = 0;
	if (shim.mode == SHIM_MODE_SPILL)
		shim_alloc_retire(a, NULL); /* a use after unmap is refused */
	else
		shim_alloc_untrack(a); /* a baseline refuses nothing */
	shim_alloc_bury(a);
	c->alloc = NULL;
	c->maps--;
	chunk_maybe_free(c);
	return CUDA_SUCCESS;
}

/* A range may hold chunks of several devices: every device is locked (rare
 * calls), whichever thread or context mapped them. */
CUresult shim_chunk_unmap(CUdeviceptr ptr, size_t size)
{
	unsigned set = __atomic_load_n(&shim.ready, __ATOMIC_ACQUIRE) ? shim_dev_lock_all() : 0;
	CUresult r = set ? chunk_walk(set, ptr, size, unmap_one, unmap_gap, NULL)
	                 : shim_real.cuMemUnmap(ptr, size);
	shim_dev_unlock_set(set);
	return r;
}

struct access_arg {
	const CUmemAccessDesc *desc;
	size_t count;
};

static CUresult access_gap(CUdeviceptr p, size_t n, void *arg)
{
	struct access_arg *x = arg;
	return shim_real.cuMemSetAccess(p, n, x->desc, x->count);
}

static CUresult access_one(struct shim_alloc *a, void *arg)
{
	struct access_arg *x = arg;
	struct shim_chunk *c = a->chunk;
	if (x->count > CHUNK_ACCESS_MAX)
		chunk_pin(c, "has more access descriptors than the shim keeps");
	else {
		memcpy(c->access, x->desc, x->count * sizeof(*x->desc));
		c->naccess = (int)x->count;
	}
	return c->real ? shim_real.cuMemSetAccess(a->base, a->bytes, x->desc, x->count)
	               : CUDA_SUCCESS;
}

CUresult shim_chunk_set_access(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc,
                               size_t count)
{
	if (!desc || !count)
		return shim_real.cuMemSetAccess(ptr, size, desc, count);
	unsigned set = __atomic_load_n(&shim.ready, __ATOMIC_ACQUIRE) ? shim_dev_lock_all() : 0;
	struct access_arg x = {desc, count};
	CUresult r = set ? chunk_walk(set, ptr, size, access_one, access_gap, &x)
	                 : shim_real.cuMemSetAccess(ptr, size, desc, count);
	shim_dev_unlock_set(set);
	return r;
}

CUresult shim_chunk_retain(CUmemGenericAllocationHandle *h, void *addr)
{
	struct shim_alloc *a = h ? entry_lock((CUdeviceptr)(uintptr_t)addr) : NULL;
	if (!a)
		return shim_real.cuMemRetainAllocationHandle(h, addr);
	a->chunk->refs++;
	*h = (CUmemGenericAllocationHandle)(uintptr_t)a->chunk;
	shim_dev_unlock(a->dev);
	return CUDA_SUCCESS;
}

CUresult shim_chunk_props(CUmemAllocationProp *prop, CUmemGenericAllocationHandle h)
{
	struct shim_chunk *c = chunk_lock(h);
	if (!c)
		return shim_real.cuMemGetAllocationPropertiesFromHandle(prop, h);
	if (prop)
		*prop = c->prop;
	shim_dev_unlock(c->dev);
	return prop ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult shim_chunk_export(void *out, CUmemGenericAllocationHandle h,
                           CUmemAllocationHandleType type, unsigned long long flags)
{
	struct shim_chunk *c = chunk_lock(h);
	CUresult r = CUDA_SUCCESS;
	CUmemGenericAllocationHandle real = h;
	if (c) {
		r = chunk_pin(c, "was exported (cuMemExportToShareableHandle)");
		real = c->real;
		shim_dev_unlock(c->dev);
	}
	return r != CUDA_SUCCESS ? r
	                         : shim_real.cuMemExportToShareableHandle(out, real, type, flags);
}

CUresult shim_chunk_multicast(CUmemGenericAllocationHandle mc, size_t mc_off,
                              CUmemGenericAllocationHandle h, size_t off, size_t size,
                              unsigned long long flags)
{
	struct shim_chunk *c = chunk_lock(h);
	CUresult r = CUDA_SUCCESS;
	CUmemGenericAllocationHandle real = h;
	if (c) {
		r = chunk_pin(c, "is bound to a multicast object");
		real = c->real;
		shim_dev_unlock(c->dev);
	}
	return r != CUDA_SUCCESS ? r
	                         : shim_real.cuMulticastBindMem(mc, mc_off, real, off, size, flags);
}

CUresult shim_chunk_multicast_addr(CUmemGenericAllocationHandle mc, size_t mc_off, CUdeviceptr ptr,
                                   size_t size, unsigned long long flags)
{
	struct shim_alloc *a = entry_lock(ptr);
	CUresult r = CUDA_SUCCESS;
	if (a) {
		r = chunk_pin(a->chunk, "is bound to a multicast object");
		shim_dev_unlock(a->dev);
	}
	return r != CUDA_SUCCESS ? r : shim_real.cuMulticastBindAddr(mc, mc_off, ptr, size, flags);
}
