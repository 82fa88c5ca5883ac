/* shim/mode.c — the baselines one program is measured against, with one
 * switch (SPILL_SHIM_MODE; the default, spill, is the rest of the shim):
 *   uvm           every allocation is managed memory (cuMemAllocManaged): the
 *                 driver migrates pages on faults and oversubscribes the device;
 *   uvm-prefetch  the same, and before each launch cuMemPrefetchAsync moves the
 *                 allocations it reaches to the device on its stream; once the
 *                 recorder (record.c) knows the iteration, the next launches'
 *                 allocations go right after the launch before them;
 *   hostmap       cuMemAlloc while the device bytes fit the budget, beyond it
 *                 pinned host memory mapped for the device (cuMemHostAlloc +
 *                 cuMemHostGetDevicePointer): zero-copy over the link, as
 *                 GreenBoost does.
 * The shim moves nothing in these modes. A budget given with SPILL_DEVICE_MEM
 * binds the uvm modes through one allocation of the shim's own (a balloon)
 * holding the device's free memory beyond it, so the driver oversubscribes at
 * the budget as the shim does. Allocations live in mem.c's table, so launches
 * are scanned and a use after free refused as in spill mode; their memory is
 * the driver's. A free is the driver's free; cuMemFreeAsync frees once the
 * work queued before it is done (an event, polled at the next allocation).
 * The baselines manage the first device the program allocates on (shim.base);
 * other devices pass through. Everything here runs under its lock.
 */
#include "shim/internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define BALLOON_GRAIN (2ull << 20)

static const char *const mode_names[] = {
    [SHIM_MODE_SPILL] = "spill",
    [SHIM_MODE_UVM] = "uvm",
    [SHIM_MODE_UVM_PREFETCH] = "uvm-prefetch",
    [SHIM_MODE_HOSTMAP] = "hostmap",
};
#define NMODES (sizeof(mode_names) / sizeof(mode_names[0]))

/* Frees waiting for their stream (cuMemFreeAsync). */
struct pending {
	struct shim_alloc *a;
	CUevent ev;
};

static struct {
	CUdeviceptr balloon;
	size_t balloon_bytes;
	/* bytes now and at peak, per backing */
	uint64_t cur[SHIM_BACK_HOST + 1], peak[SHIM_BACK_HOST + 1], count[SHIM_BACK_HOST + 1];
	uint64_t prefetches, prefetch_bytes, prefetch_errors;
	struct pending *pend;
	size_t npend, cap_pend;
} base;

int shim_mode_parse(const char *s, enum shim_mode *out)
{
	if (!s || !*s) {
		*out = SHIM_MODE_SPILL;
		return 0;
	}
	for (size_t i = 0; i < NMODES; i++) {
		if (!strcasecmp(s, mode_names[i])) {
			*out = (enum shim_mode)i;
			return 0;
		}
	}
	return sp_error(-EINVAL,
	                "SPILL_SHIM_MODE='%s' is not one of spill|uvm|uvm-prefetch|hostmap", s);
}

const char *shim_mode_name(enum shim_mode m)
{
	return (size_t)m < NMODES ? mode_names[m] : "?";
}

static int uvm(void)
{
	return shim.mode == SHIM_MODE_UVM || shim.mode == SHIM_MODE_UVM_PREFETCH;
}

int shim_base_init(void)
{
	if (uvm() && !shim_real.cuMemAllocManaged)
		return sp_error(-ENOTSUP, "SPILL_SHIM_MODE=%s: the driver has no cuMemAllocManaged",
		                shim_mode_name(shim.mode));
	if (shim.mode == SHIM_MODE_HOSTMAP &&
	    (!shim_real.cuMemHostAlloc || !shim_real.cuMemHostGetDevicePointer_v2))
		return sp_error(-ENOTSUP,
		                "SPILL_SHIM_MODE=hostmap: the driver cannot map host memory");
	if (shim.mode == SHIM_MODE_UVM_PREFETCH && !shim_real.cuMemPrefetchAsync_v2)
		SP_WARN(SHIM,
		        "SPILL_SHIM_MODE=uvm-prefetch: the driver has no cuMemPrefetchAsync_v2 "
		        "(CUDA < 12.2): nothing is prefetched");
	if (!uvm() || !shim.params.device_mem)
		return 0;
	/* the driver's oversubscription at the budget: hold the rest */
	size_t free_b = 0, total_b = 0;
	if (shim_real.cuMemGetInfo_v2(&free_b, &total_b) != CUDA_SUCCESS)
		return sp_error(-ENODEV, "shim: cuMemGetInfo failed");
	if (free_b <= shim.base->budget + BALLOON_GRAIN)
		return 0;
	size_t want = (free_b - shim.base->budget) / BALLOON_GRAIN * BALLOON_GRAIN;
	CUresult r = shim_real.cuMemAlloc_v2(&base.balloon, want);
	if (r != CUDA_SUCCESS) {
		SP_WARN(SHIM,
		        "SPILL_SHIM_MODE=%s: cannot hold the device beyond the budget (%d): the "
		        "driver oversubscribes at the device's size",
		        shim_mode_name(shim.mode), (int)r);
		base.balloon = 0;
		return 0;
	}
	base.balloon_bytes = want;
	return 0;
}

static void account(enum shim_backing b, size_t bytes, int add)
{
	if (add) {
		base.cur[b] += bytes;
		base.count[b]++;
		if (base.cur[b] > base.peak[b])
			base.peak[b] = base.cur[b];
	} else {
		base.cur[b] -= bytes;
	}
}

/* Gives a retired allocation's memory back to the driver now. */
static void free_now(struct shim_alloc *a)
{
	CUresult r;
	switch (a->backing) {
	case SHIM_BACK_HOST: r = shim_real.cuMemFreeHost(a->host); break;
	default: r = shim_real.cuMemFree_v2(a->base); break;
	}
	if (r != CUDA_SUCCESS)
		SP_WARN(SHIM, "freeing allocation %" PRIu64 " (%#llx): driver error %d", a->seq,
		        (unsigned long long)a->base, (int)r);
	account(a->backing, a->bytes, 0);
	shim_alloc_bury(a);
}

/* Frees the pending allocations whose stream passed the free (all: wait). */
static void reap(int all)
{
	size_t k = 0;
	for (size_t i = 0; i < base.npend; i++) {
		struct pending *p = &base.pend[i];
		CUresult q =
		    all ? shim_real.cuEventSynchronize(p->ev) : shim_real.cuEventQuery(p->ev);
		if (q == CUDA_ERROR_NOT_READY) {
			base.pend[k++] = *p;
			continue;
		}
		if (shim_real.cuEventDestroy_v2(p->ev) != CUDA_SUCCESS)
			SP_TRACE(SHIM, "destroying a free's event failed");
		free_now(p->a);
	}
	base.npend = k;
}

CUresult shim_base_alloc(CUdeviceptr *dptr, size_t bytes, const char *api, int async,
                         CUmemoryPool pool, CUstream s, int ptds)
{
	reap(0);
	CUdeviceptr p = 0;
	void *host = NULL;
	enum shim_backing b = SHIM_BACK_MANAGED;
	CUresult r = CUDA_ERROR_OUT_OF_MEMORY;
	if (uvm()) {
		r = shim_real.cuMemAllocManaged(&p, bytes, CU_MEM_ATTACH_GLOBAL);
	} else {
		/* pass-through pools (exportable) count: they are on the device too */
		if (base.cur[SHIM_BACK_DEVICE] + base.cur[SHIM_BACK_DEVICE_ASYNC] +
		        shim.base->ext_bytes + bytes <=
		    shim.base->budget) {
			b = async ? SHIM_BACK_DEVICE_ASYNC : SHIM_BACK_DEVICE;
			if (!async)
				r = shim_real.cuMemAlloc_v2(&p, bytes);
			else if (!pool)
				r = ptds ? shim_real.cuMemAllocAsync_ptsz(&p, bytes, s)
				         : shim_real.cuMemAllocAsync(&p, bytes, s);
			else
				r = ptds
				        ? shim_real.cuMemAllocFromPoolAsync_ptsz(&p, bytes, pool, s)
				        : shim_real.cuMemAllocFromPoolAsync(&p, bytes, pool, s);
		}
		if (r == CUDA_ERROR_OUT_OF_MEMORY) { /* beyond the budget (or the device) */
			b = SHIM_BACK_HOST;
			r = shim_real.cuMemHostAlloc(
			    &host, bytes, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE);
			if (r == CUDA_SUCCESS &&
			    (r = shim_real.cuMemHostGetDevicePointer_v2(&p, host, 0)) !=
			        CUDA_SUCCESS &&
			    shim_real.cuMemFreeHost(host) != CUDA_SUCCESS)
				SP_TRACE(SHIM, "freeing unmappable host memory failed");
		}
	}
	if (r != CUDA_SUCCESS) {
		char b1[32];
		SP_WARN(SHIM, "%s of %s (mode %s): driver error %d", api,
		        sp_format_size(bytes, b1, sizeof(b1)), shim_mode_name(shim.mode), (int)r);
		return r;
	}
	struct shim_alloc *a = NULL;
	r = shim_alloc_insert(shim.base, p, bytes, b, &a);
	if (r != CUDA_SUCCESS) {
		CUresult f =
		    b == SHIM_BACK_HOST ? shim_real.cuMemFreeHost(host) : shim_real.cuMemFree_v2(p);
		if (f != CUDA_SUCCESS)
			SP_TRACE(SHIM, "freeing an untracked allocation failed");
		return r;
	}
	a->host = host;
	account(b, bytes, 1);
	*dptr = p;
	return CUDA_SUCCESS;
}

CUresult shim_base_free(struct shim_alloc *a, int async, CUstream s, int ptds)
{
	shim_alloc_untrack(a);
	if (a->backing == SHIM_BACK_DEVICE_ASYNC && async) {
		/* the driver's own pool orders it */
		CUresult r = ptds ? shim_real.cuMemFreeAsync_ptsz(a->base, s)
		                  : shim_real.cuMemFreeAsync(a->base, s);
		if (r != CUDA_SUCCESS)
			SP_WARN(SHIM, "cuMemFreeAsync of %#llx: driver error %d",
			        (unsigned long long)a->base, (int)r);
		account(a->backing, a->bytes, 0);
		shim_alloc_bury(a);
		return r;
	}
	if (!async) {
		free_now(a);
		reap(0);
		return CUDA_SUCCESS;
	}
	CUevent ev = NULL;
	if (base.npend == base.cap_pend) {
		size_t cap = base.cap_pend ? 2 * base.cap_pend : 64;
		struct pending *t = realloc(base.pend, cap * sizeof(*t));
		if (t) {
			base.pend = t;
			base.cap_pend = cap;
		}
	}
	CUstream st = !s && ptds ? CU_STREAM_PER_THREAD : s;
	if (base.npend == base.cap_pend ||
	    shim_real.cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS ||
	    shim_real.cuEventRecord(ev, st) != CUDA_SUCCESS) {
		/* no event: wait for the stream, then free */
		if (ev && shim_real.cuEventDestroy_v2(ev) != CUDA_SUCCESS)
			SP_TRACE(SHIM, "destroying an event failed");
		if (shim_real.cuStreamSynchronize(st) != CUDA_SUCCESS)
			SP_WARN(SHIM, "cuMemFreeAsync of %#llx: the stream failed",
			        (unsigned long long)a->base);
		free_now(a);
		return CUDA_SUCCESS;
	}
	base.pend[base.npend++] = (struct pending){a, ev};
	reap(0);
	return CUDA_SUCCESS;
}

void shim_base_prefetch(struct shim_alloc *const *a, int n, CUstream s, uint64_t op)
{
	if (!shim_real.cuMemPrefetchAsync_v2)
		return;
	CUmemLocation loc = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = shim.base->device};
	for (int i = 0; i < n; i++) {
		if (a[i]->backing != SHIM_BACK_MANAGED || a[i]->prefetched_op == op)
			continue;
		a[i]->prefetched_op = op;
		CUresult r = shim_real.cuMemPrefetchAsync_v2(a[i]->base, a[i]->bytes, loc, 0, s);
		if (r != CUDA_SUCCESS) {
			if (!base.prefetch_errors++)
				SP_WARN(SHIM,
				        "cuMemPrefetchAsync of allocation %" PRIu64
				        ": driver error %d",
				        a[i]->seq, (int)r);
			continue;
		}
		base.prefetches++;
		base.prefetch_bytes += a[i]->bytes;
	}
}

void shim_base_get_info(size_t *free_b, size_t *total_b)
{
	/* the budget is the device the program sees */
	uint64_t used = shim.mode == SHIM_MODE_HOSTMAP
	                    ? base.cur[SHIM_BACK_DEVICE] + base.cur[SHIM_BACK_DEVICE_ASYNC]
	                    : 0;
	used += shim.base->ext_bytes;
	uint64_t f = shim.base->budget > used ? shim.base->budget - used : 0;
	*total_b = shim.base->budget;
	if (f < *free_b)
		*free_b = f;
}

void shim_base_report(FILE *f)
{
	char b[4][32];
	uint64_t period = 0, cycles = 0;
	shim_rec_mode(shim.base->rec, &period, &cycles);
	fprintf(f, "spill shim: mode %s, budget %s, %" PRIu64 " allocations (%zu live)\n",
	        shim_mode_name(shim.mode), sp_format_size(shim.base->budget, b[0], 32), shim.nseq,
	        shim.base->nallocs);
	if (uvm()) {
		fprintf(f, "spill shim: managed memory %s at peak; %s\n",
		        sp_format_size(base.peak[SHIM_BACK_MANAGED], b[0], 32),
		        base.balloon_bytes ? "the driver oversubscribes at the budget (the device "
		                             "beyond it held by the shim)"
		                           : "the driver oversubscribes at the device's size");
		if (base.balloon_bytes)
			fprintf(f, "spill shim: held beyond the budget: %s\n",
			        sp_format_size(base.balloon_bytes, b[1], 32));
	} else {
		fprintf(
		    f,
		    "spill shim: on the device %" PRIu64 " allocations (%s at peak), mapped from "
		    "pinned host memory %" PRIu64 " (%s at peak)\n",
		    base.count[SHIM_BACK_DEVICE] + base.count[SHIM_BACK_DEVICE_ASYNC],
		    sp_format_size(base.peak[SHIM_BACK_DEVICE] + base.peak[SHIM_BACK_DEVICE_ASYNC],
		                   b[0], 32),
		    base.count[SHIM_BACK_HOST],
		    sp_format_size(base.peak[SHIM_BACK_HOST], b[1], 32));
	}
	if (shim.mode == SHIM_MODE_UVM_PREFETCH)
		fprintf(f,
		        "spill shim: %" PRIu64 " prefetches of %s to the device (%" PRIu64
		        " launches; %s)\n",
		        base.prefetches, sp_format_size(base.prefetch_bytes, b[2], 32),
		        shim.base->ops,
		        period ? "ahead by the recorded iteration" : "no repeating iteration seen");
}

void shim_base_json(FILE *f)
{
	fprintf(f,
	        "\"managed_peak\":%" PRIu64 ",\"device_peak\":%" PRIu64 ",\"hostmap_peak\":%" PRIu64
	        ",\"hostmap_allocations\":%" PRIu64 ",\"balloon\":%zu,\"prefetches\":%" PRIu64
	        ",\"prefetch_bytes\":%" PRIu64 ",",
	        base.peak[SHIM_BACK_MANAGED],
	        base.peak[SHIM_BACK_DEVICE] + base.peak[SHIM_BACK_DEVICE_ASYNC],
	        base.peak[SHIM_BACK_HOST], base.count[SHIM_BACK_HOST], base.balloon_bytes,
	        base.prefetches, base.prefetch_bytes);
}
