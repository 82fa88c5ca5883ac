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
 * mapped or not) its bytes count in shim.base->ext_bytes, so the budget covers it.
 * A chunk the shim cannot take over is pinned (resident for good, counted),
 * with one log line naming it: created with shareable handle types, exported,
 * mapped twice or in part. Handles the shim did not make (imported ones) pass
 * through, uncounted.
 * Chunk moves are synchronous (the device is synchronized first): correct
 * before fast. The shim manages the chunks of the first device it opened
 * (shim.base); those of other devices pass through. Everything here runs
 * under that device's lock unless it says otherwise.
 */
#include "shim/internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define CHUNK_ACCESS_MAX 4

struct shim_chunk {
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

/* The shim's handles, sorted, so a handle of the driver's is told apart. */
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

static struct shim_chunk *chunk_of(CUmemGenericAllocationHandle h)
{
	struct shim_chunk *c = (struct shim_chunk *)(uintptr_t)h;
	size_t i = chunk_lower(c);
	return i < nchunks && chunks[i] == c ? c : NULL;
}

static int chunk_add(struct shim_chunk *c)
{
	if (nchunks == cap_chunks) {
		size_t cap = cap_chunks ? 2 * cap_chunks : 64;
		struct shim_chunk **t = realloc(chunks, cap * sizeof(*t));
		if (!t)
			return -ENOMEM;
		chunks = t;
		cap_chunks = cap;
	}
	size_t i = chunk_lower(c);
	memmove(&chunks[i + 1], &chunks[i], (nchunks - i) * sizeof(*chunks));
	chunks[i] = c;
	nchunks++;
	return 0;
}

static void chunk_del(struct shim_chunk *c)
{
	size_t i = chunk_lower(c);
	if (i < nchunks && chunks[i] == c) {
		memmove(&chunks[i], &chunks[i + 1], (nchunks - i - 1) * sizeof(*chunks));
		nchunks--;
	}
}

/* Frees c once the program holds no handle to it and no mapping. */
static void chunk_maybe_free(struct shim_chunk *c)
{
	if (c->refs || c->maps)
		return;
	if (c->real) {
		if (shim_real.cuMemRelease(c->real) != CUDA_SUCCESS)
			SP_WARN(SHIM, "cuMemRelease of a chunk of %zu bytes failed", c->bytes);
		shim.base->ext_bytes -= c->bytes;
	}
	if (c->obj && vmm_obj_destroy(shim.base->vmm, c->obj) < 0)
		SP_WARN(SHIM, "%s", sp_last_error());
	chunk_del(c);
	free(c);
}

/* The program's access to a new mapping of c (or read-write on the device). */
static CUresult chunk_access(struct shim_chunk *c, CUdeviceptr at)
{
	CUmemAccessDesc rw = {
	    .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = shim.base->device},
	    .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
	return c->naccess ? shim_real.cuMemSetAccess(at, c->bytes, c->access, (size_t)c->naccess)
	                  : shim_real.cuMemSetAccess(at, c->bytes, &rw, 1);
}

/* Brings an evicted chunk back at its address (overwrite: without its bytes). */
static int chunk_restore(struct shim_chunk *c, int overwrite)
{
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
		int rc = vmm_acquire(shim.base->vmm, c->obj, VMM_HOST, VMM_READ, &p, &ready);
		if (rc == 0 && ready)
			rc = dev_event_sync(ready);
		if (rc == 0 && shim_real.cuMemcpyHtoD_v2(a->base, p, c->bytes) != CUDA_SUCCESS)
			rc = sp_error(-EIO, "shim: copying a chunk back to %#llx failed",
			              (unsigned long long)a->base);
		if (p && vmm_release(shim.base->vmm, c->obj, VMM_HOST, NULL) < 0)
			SP_WARN(SHIM, "%s", sp_last_error());
		if (rc < 0) {
			if (shim_real.cuMemUnmap(a->base, c->bytes) != CUDA_SUCCESS ||
			    shim_real.cuMemRelease(h) != CUDA_SUCCESS)
				SP_TRACE(SHIM, "undoing a failed restore");
			return rc;
		}
		a->h2d += c->bytes;
		shim.base->chunk_h2d += c->bytes;
	}
	if (vmm_obj_destroy(shim.base->vmm, c->obj) < 0)
		SP_WARN(SHIM, "%s", sp_last_error());
	c->obj = 0;
	c->real = h;
	shim.base->ext_bytes += c->bytes;
	shim.base->chunk_restores++;
	return 0;
}

int shim_chunk_resident(const struct shim_alloc *a)
{
	return a->chunk->real != 0;
}

int shim_chunk_hold(struct shim_alloc *a, struct shim_alloc *const *keep, int nkeep, int overwrite)
{
	if (!a->chunk->real) {
		shim_mem_fit_external(shim.base, a->bytes, keep, nkeep);
		SP_CHECK(chunk_restore(a->chunk, overwrite));
	}
	a->held = 1;
	a->ready = NULL;
	return 0;
}

int shim_chunk_evict(struct shim_alloc *a)
{
	struct shim_chunk *c = a->chunk;
	if (!c->real || c->pinned || a->held)
		return -EBUSY;
	char name[32];
	snprintf(name, sizeof(name), "chunk%" PRIu64, a->seq);
	struct vmm_obj_desc d = {.bytes = c->bytes,
	                         .kind = VMM_KIND_WORKSPACE,
	                         .name = name,
	                         .flags = VMM_OBJ_STABLE,
	                         .home = 0};
	uint64_t obj = 0;
	SP_CHECK(vmm_obj_create(shim.base->vmm, &d, &obj));
	/* the program's queued work may still use it */
	shim_real.cuCtxSynchronize();
	void *p = NULL;
	struct dev_event *ready = NULL;
	int rc = vmm_acquire(shim.base->vmm, obj, VMM_HOST, VMM_OVERWRITE, &p, &ready);
	if (rc == 0 && ready)
		rc = dev_event_sync(ready);
	if (rc == 0 && shim_real.cuMemcpyDtoH_v2(p, a->base, c->bytes) != CUDA_SUCCESS)
		rc = sp_error(-EIO, "shim: copying out the chunk at %#llx failed",
		              (unsigned long long)a->base);
	if (p && vmm_release(shim.base->vmm, obj, VMM_HOST, NULL) < 0)
		SP_WARN(SHIM, "%s", sp_last_error());
	if (rc == 0 && shim_real.cuMemUnmap(a->base, c->bytes) != CUDA_SUCCESS)
		rc = sp_error(-EIO, "shim: unmapping the chunk at %#llx failed",
		              (unsigned long long)a->base);
	if (rc < 0) {
		if (vmm_obj_destroy(shim.base->vmm, obj) < 0)
			SP_WARN(SHIM, "%s", sp_last_error());
		return rc;
	}
	if (shim_real.cuMemRelease(c->real) != CUDA_SUCCESS)
		SP_WARN(SHIM, "cuMemRelease of an evicted chunk failed");
	c->real = 0;
	c->obj = obj;
	shim.base->ext_bytes -= c->bytes;
	a->d2h += c->bytes;
	shim.base->chunk_d2h += c->bytes;
	shim.base->chunk_evictions++;
	return 0;
}

/* Resident for good, with its one log line. */
static CUresult chunk_pin(struct shim_chunk *c, const char *why)
{
	if (c->pinned)
		return CUDA_SUCCESS;
	if (c->alloc && !c->real) {
		shim_mem_fit_external(shim.base, c->bytes, NULL, 0);
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

/* ---- the wrappers' work (each takes the lock) ------------------------------------ */

/* The chunks' device locked, or NULL (none open yet: the driver's call). */
static struct shim_dev *vm_lock(void)
{
	struct shim_dev *d = __atomic_load_n(&shim.ready, __ATOMIC_ACQUIRE) ? shim.base : NULL;
	if (d)
		shim_dev_lock(d);
	return d;
}

static void vm_unlock(struct shim_dev *d)
{
	if (d)
		shim_dev_unlock(d);
}

/* The chunks' device, locked, when the shim takes the call; NULL: the driver's. */
static struct shim_dev *take(void)
{
	struct shim_dev *d = NULL;
	if (shim_dev_enter(&d) < 0)
		return NULL;
	if (shim.mode == SHIM_MODE_SPILL && d == shim.base)
		return d;
	shim_dev_unlock(d);
	return NULL;
}

CUresult shim_chunk_create(CUmemGenericAllocationHandle *h, size_t size,
                           const CUmemAllocationProp *prop, unsigned long long flags)
{
	struct shim_dev *bd = NULL;
	if (!h || !prop || !size || flags || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
	    !(bd = take()))
		return shim_real.cuMemCreate(h, size, prop, flags);
	if (prop->location.id != bd->device) {
		vm_unlock(bd);
		return shim_real.cuMemCreate(h, size, prop, flags);
	}
	CUresult r = CUDA_ERROR_OUT_OF_MEMORY;
	struct shim_chunk *c = calloc(1, sizeof(*c));
	if (c && chunk_add(c) == 0) {
		shim_mem_fit_external(shim.base, size, NULL, 0); /* room first */
		r = shim_real.cuMemCreate(&c->real, size, prop, flags);
		if (r != CUDA_SUCCESS)
			chunk_del(c);
	}
	if (r != CUDA_SUCCESS) {
		free(c);
		vm_unlock(bd);
		return r;
	}
	c->bytes = size;
	c->prop = *prop;
	c->refs = 1;
	shim.base->ext_bytes += size;
	shim.base->nchunks_made++;
	if (prop->requestedHandleTypes != CU_MEM_HANDLE_TYPE_NONE)
		chunk_pin(c, "is exportable (created with shareable handle types)");
	*h = (CUmemGenericAllocationHandle)(uintptr_t)c;
	vm_unlock(bd);
	return CUDA_SUCCESS;
}

CUresult shim_chunk_release(CUmemGenericAllocationHandle h)
{
	struct shim_dev *bd = vm_lock();
	struct shim_chunk *c = chunk_of(h);
	if (!c || c->refs <= 0) {
		vm_unlock(bd);
		return c ? CUDA_ERROR_INVALID_VALUE : shim_real.cuMemRelease(h);
	}
	c->refs--;
	chunk_maybe_free(c);
	vm_unlock(bd);
	return CUDA_SUCCESS;
}

CUresult shim_chunk_map(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle h,
                        unsigned long long flags)
{
	struct shim_dev *bd = vm_lock();
	struct shim_chunk *c = chunk_of(h);
	if (!c) {
		vm_unlock(bd);
		return shim_real.cuMemMap(ptr, size, offset, h, flags);
	}
	CUresult r = CUDA_SUCCESS;
	if (c->maps || offset || size != c->bytes)
		r = chunk_pin(c, c->maps ? "is mapped twice" : "is mapped in part");
	if (r == CUDA_SUCCESS)
		r = shim_real.cuMemMap(ptr, size, offset, c->real, flags);
	if (r == CUDA_SUCCESS && !c->maps++) {
		struct shim_alloc *a = NULL;
		if (shim_alloc_insert(shim.base, ptr, size, SHIM_BACK_CHUNK, &a) == CUDA_SUCCESS) {
			a->chunk = c;
			a->held = 1; /* resident until a batch release */
			a->pinned = c->pinned;
			c->alloc = a;
		} else {
			chunk_pin(c, "could not be tracked");
		}
	}
	vm_unlock(bd);
	return r;
}

/* The table's chunk entries in [ptr, ptr+size), in address order, through fn;
 * the parts between them go to the driver's through gap. */
static CUresult chunk_walk(CUdeviceptr ptr, size_t size,
                           CUresult (*fn)(struct shim_alloc *, void *),
                           CUresult (*gap)(CUdeviceptr, size_t, void *), void *arg)
{
	CUdeviceptr at = ptr, end = ptr + size;
	CUresult r = CUDA_SUCCESS, e;
	while (at < end) {
		struct shim_alloc *a = NULL;
		for (CUdeviceptr p = at; p < end && !a;) {
			struct shim_alloc *x = shim_alloc_next(shim.base, p);
			if (!x || x->base >= end)
				break;
			if (x->backing == SHIM_BACK_CHUNK)
				a = x;
			else
				p = x->base + x->bytes;
		}
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
		if (vmm_obj_destroy(shim.base->vmm, c->obj) < 0)
			SP_WARN(SHIM, "%s", sp_last_error());
		c->obj = 0;
	}
	a->held = 0;
	shim_alloc_retire(a, NULL);
	shim_alloc_bury(a);
	c->alloc = NULL;
	c->maps--;
	chunk_maybe_free(c);
	return CUDA_SUCCESS;
}

CUresult shim_chunk_unmap(CUdeviceptr ptr, size_t size)
{
	struct shim_dev *bd = vm_lock();
	CUresult r = bd ? chunk_walk(ptr, size, unmap_one, unmap_gap, NULL)
	                : shim_real.cuMemUnmap(ptr, size);
	vm_unlock(bd);
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
	struct shim_dev *bd = vm_lock();
	struct access_arg x = {desc, count};
	CUresult r = bd ? chunk_walk(ptr, size, access_one, access_gap, &x)
	                : shim_real.cuMemSetAccess(ptr, size, desc, count);
	vm_unlock(bd);
	return r;
}

CUresult shim_chunk_retain(CUmemGenericAllocationHandle *h, void *addr)
{
	struct shim_dev *bd = vm_lock();
	struct shim_alloc *a = bd ? shim_alloc_find((CUdeviceptr)(uintptr_t)addr) : NULL;
	if (!h || !a || a->backing != SHIM_BACK_CHUNK) {
		vm_unlock(bd);
		return shim_real.cuMemRetainAllocationHandle(h, addr);
	}
	a->chunk->refs++;
	*h = (CUmemGenericAllocationHandle)(uintptr_t)a->chunk;
	vm_unlock(bd);
	return CUDA_SUCCESS;
}

CUresult shim_chunk_props(CUmemAllocationProp *prop, CUmemGenericAllocationHandle h)
{
	struct shim_dev *bd = vm_lock();
	struct shim_chunk *c = chunk_of(h);
	if (c && prop)
		*prop = c->prop;
	vm_unlock(bd);
	return c ? (prop ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE)
	         : shim_real.cuMemGetAllocationPropertiesFromHandle(prop, h);
}

CUresult shim_chunk_export(void *out, CUmemGenericAllocationHandle h,
                           CUmemAllocationHandleType type, unsigned long long flags)
{
	struct shim_dev *bd = vm_lock();
	struct shim_chunk *c = chunk_of(h);
	CUresult r = CUDA_SUCCESS;
	if (c)
		r = chunk_pin(c, "was exported (cuMemExportToShareableHandle)");
	CUmemGenericAllocationHandle real = c ? c->real : h;
	vm_unlock(bd);
	return r != CUDA_SUCCESS ? r
	                         : shim_real.cuMemExportToShareableHandle(out, real, type, flags);
}

CUresult shim_chunk_multicast(CUmemGenericAllocationHandle mc, size_t mc_off,
                              CUmemGenericAllocationHandle h, size_t off, size_t size,
                              unsigned long long flags)
{
	struct shim_dev *bd = vm_lock();
	struct shim_chunk *c = chunk_of(h);
	CUresult r = CUDA_SUCCESS;
	if (c)
		r = chunk_pin(c, "is bound to a multicast object");
	CUmemGenericAllocationHandle real = c ? c->real : h;
	vm_unlock(bd);
	return r != CUDA_SUCCESS ? r
	                         : shim_real.cuMulticastBindMem(mc, mc_off, real, off, size, flags);
}

CUresult shim_chunk_multicast_addr(CUmemGenericAllocationHandle mc, size_t mc_off, CUdeviceptr ptr,
                                   size_t size, unsigned long long flags)
{
	struct shim_dev *bd = vm_lock();
	struct shim_alloc *a = bd ? shim_alloc_find(ptr) : NULL;
	CUresult r = CUDA_SUCCESS;
	if (a && a->backing == SHIM_BACK_CHUNK)
		r = chunk_pin(a->chunk, "is bound to a multicast object");
	vm_unlock(bd);
	return r != CUDA_SUCCESS ? r : shim_real.cuMulticastBindAddr(mc, mc_off, ptr, size, flags);
}
