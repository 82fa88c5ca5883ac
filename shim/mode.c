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
 * work queued before it is done (an event, polled at the device's next
 * allocation).
 * Every device the program uses gets its own state here (struct base_dev: the
 * balloon, the bytes per backing, the pending frees, the prefetches made to
 * it), kept under that device's lock; an allocation belongs to the device
 * current when it was made, and a prefetch goes to the device of the launch.
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

/* One device's baseline state, under its lock (shim.dev[i] is bdev[i]'s). */
struct base_dev {
	CUdeviceptr balloon;
	size_t balloon_bytes;
	/* bytes now and at peak, per backing, of the allocations made on it */
	uint64_t cur[SHIM_BACK_HOST + 1], peak[SHIM_BACK_HOST + 1], count[SHIM_BACK_HOST + 1];
	/* prefetches to it (launches on it) */
	uint64_t prefetches, prefetch_bytes, prefetch_errors;
	struct pending *pend; /* frees of its allocations waiting for their stream */
	size_t npend, cap_pend;
};
static struct base_dev bdev[SHIM_MAX_DEV];

static struct base_dev *bd_of(const struct shim_dev *d)
{
	return &bdev[d->idx];
}

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

int shim_base_init(struct shim_dev *d)
{
	struct base_dev *b = bd_of(d);
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
	/* the driver's oversubscription at the budget: hold the rest (the
	 * caller made d's context current) */
	size_t free_b = 0, total_b = 0;
	if (shim_real.cuMemGetInfo_v2(&free_b, &total_b) != CUDA_SUCCESS)
		return sp_error(-ENODEV, "shim: cuMemGetInfo failed");
	if (free_b <= d->budget + BALLOON_GRAIN)
		return 0;
	size_t want = (free_b - d->budget) / BALLOON_GRAIN * BALLOON_GRAIN;
	CUresult r = shim_real.cuMemAlloc_v2(&b->balloon, want);
	if (r != CUDA_SUCCESS) {
		SP_WARN(SHIM,
		        "SPILL_SHIM_MODE=%s: cannot hold device %d beyond the budget (%d): the "
		        "driver oversubscribes at the device's size",
		        shim_mode_name(shim.mode), d->idx, (int)r);
		b->balloon = 0;
		return 0;
	}
	b->balloon_bytes = want;
	return 0;
}

static void account(struct shim_dev *d, enum shim_backing k, size_t bytes, int add)
{
	struct base_dev *b = bd_of(d);
	if (add) {
		b->cur[k] += bytes;
		b->count[k]++;
		if (b->cur[k] > b->peak[k])
			b->peak[k] = b->cur[k];
	} else {
		b->cur[k] -= bytes;
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
	account(a->dev, a->backing, a->bytes, 0);
	shim_alloc_bury(a);
}

/* Frees d's pending allocations whose stream passed the free (all: wait). */
static void reap(struct shim_dev *d, int all)
{
	struct base_dev *bd = bd_of(d);
	size_t k = 0;
	for (size_t i = 0; i < bd->npend; i++) {
		struct pending *p = &bd->pend[i];
		CUresult q =
		    all ? shim_real.cuEventSynchronize(p->ev) : shim_real.cuEventQuery(p->ev);
		if (q == CUDA_ERROR_NOT_READY) {
			bd->pend[k++] = *p;
			continue;
		}
		if (shim_real.cuEventDestroy_v2(p->ev) != CUDA_SUCCESS)
			SP_TRACE(SHIM, "destroying a free's event failed");
		free_now(p->a);
	}
	bd->npend = k;
}

CUresult shim_base_alloc(struct shim_dev *d, CUdeviceptr *dptr, size_t bytes, const char *api,
                         int async, CUmemoryPool pool, CUstream s, int ptds)
{
	reap(d, 0);
	struct base_dev *bd = bd_of(d);
	CUdeviceptr p = 0;
	void *host = NULL;
	enum shim_backing b = SHIM_BACK_MANAGED;
	CUresult r = CUDA_ERROR_OUT_OF_MEMORY;
	if (uvm()) {
		r = shim_real.cuMemAllocManaged(&p, bytes, CU_MEM_ATTACH_GLOBAL);
	} else {
		/* pass-through pools (exportable) and the program's chunks count:
		 * they are on the device too */
		if (bd->cur[SHIM_BACK_DEVICE] + bd->cur[SHIM_BACK_DEVICE_ASYNC] + d->ext_bytes +
		        bytes <=
		    d->budget) {
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
		SP_WARN(SHIM, "%s of %s on device %d (mode %s): driver error %d", api,
		        sp_format_size(bytes, b1, sizeof(b1)), d->idx, shim_mode_name(shim.mode),
		        (int)r);
		return r;
	}
	struct shim_alloc *a = NULL;
	r = shim_alloc_insert(d, p, bytes, b, &a);
	if (r != CUDA_SUCCESS) {
		CUresult f =
		    b == SHIM_BACK_HOST ? shim_real.cuMemFreeHost(host) : shim_real.cuMemFree_v2(p);
		if (f != CUDA_SUCCESS)
			SP_TRACE(SHIM, "freeing an untracked allocation failed");
		return r;
	}
	a->host = host;
	account(d, b, bytes, 1);
	*dptr = p;
	return CUDA_SUCCESS;
}

CUresult shim_base_free(struct shim_alloc *a, int async, CUstream s, int ptds)
{
	struct shim_dev *d = a->dev;
	struct base_dev *bd = bd_of(d);
	shim_alloc_untrack(a);
	if (a->backing == SHIM_BACK_DEVICE_ASYNC && async) {
		/* the driver's own pool orders it */
		CUresult r = ptds ? shim_real.cuMemFreeAsync_ptsz(a->base, s)
		                  : shim_real.cuMemFreeAsync(a->base, s);
		if (r != CUDA_SUCCESS)
			SP_WARN(SHIM, "cuMemFreeAsync of %#llx: driver error %d",
			        (unsigned long long)a->base, (int)r);
		account(d, a->backing, a->bytes, 0);
		shim_alloc_bury(a);
		return r;
	}
	if (!async) {
		free_now(a);
		reap(d, 0);
		return CUDA_SUCCESS;
	}
	CUevent ev = NULL;
	if (bd->npend == bd->cap_pend) {
		size_t cap = bd->cap_pend ? 2 * bd->cap_pend : 64;
		struct pending *t = realloc(bd->pend, cap * sizeof(*t));
		if (t) {
			bd->pend = t;
			bd->cap_pend = cap;
		}
	}
	/* the event is of the freeing thread's context (its stream's) */
	CUstream st = !s && ptds ? CU_STREAM_PER_THREAD : s;
	if (bd->npend == bd->cap_pend ||
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
	bd->pend[bd->npend++] = (struct pending){a, ev};
	reap(d, 0);
	return CUDA_SUCCESS;
}

void shim_base_prefetch(struct shim_dev *d, struct shim_alloc *const *a, int n, CUstream s,
                        uint64_t op)
{
	if (!shim_real.cuMemPrefetchAsync_v2)
		return;
	struct base_dev *bd = bd_of(d);
	CUmemLocation loc = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = d->device};
	for (int i = 0; i < n; i++) {
		if (a[i]->backing != SHIM_BACK_MANAGED ||
		    (a[i]->prefetched_to == d && a[i]->prefetched_op == op))
			continue;
		a[i]->prefetched_to = d;
		a[i]->prefetched_op = op;
		CUresult r = shim_real.cuMemPrefetchAsync_v2(a[i]->base, a[i]->bytes, loc, 0, s);
		if (r != CUDA_SUCCESS) {
			if (!bd->prefetch_errors++)
				SP_WARN(SHIM,
				        "cuMemPrefetchAsync of allocation %" PRIu64
				        " to device %d: driver error %d",
				        a[i]->seq, d->idx, (int)r);
			continue;
		}
		bd->prefetches++;
		bd->prefetch_bytes += a[i]->bytes;
	}
}

void shim_base_get_info(struct shim_dev *d, size_t *free_b, size_t *total_b)
{
	/* the budget is the device the program sees */
	struct base_dev *bd = bd_of(d);
	uint64_t used = shim.mode == SHIM_MODE_HOSTMAP
	                    ? bd->cur[SHIM_BACK_DEVICE] + bd->cur[SHIM_BACK_DEVICE_ASYNC]
	                    : 0;
	used += d->ext_bytes;
	uint64_t f = d->budget > used ? d->budget - used : 0;
	*total_b = d->budget;
	if (f < *free_b)
		*free_b = f;
}

/* ---- the report (every device's lock held) ---------------------------------------- */

/* One device's figures, or every device's added up (peaks: the sum of each
 * device's own peak). */
struct base_sum {
	uint64_t budget, live, chunks, managed_peak, device_peak, device_count, host_peak,
	    host_count, balloon, prefetches, prefetch_bytes, period;
};

static void sum_add(struct base_sum *t, const struct shim_dev *d)
{
	const struct base_dev *b = bd_of(d);
	uint64_t period = 0, cycles = 0;
	if (d->rec)
		shim_rec_mode(d->rec, &period, &cycles);
	t->budget += d->budget;
	t->live += d->nallocs;
	t->chunks += d->nchunks_made;
	t->managed_peak += b->peak[SHIM_BACK_MANAGED];
	t->device_peak += b->peak[SHIM_BACK_DEVICE] + b->peak[SHIM_BACK_DEVICE_ASYNC];
	t->device_count += b->count[SHIM_BACK_DEVICE] + b->count[SHIM_BACK_DEVICE_ASYNC];
	t->host_peak += b->peak[SHIM_BACK_HOST];
	t->host_count += b->count[SHIM_BACK_HOST];
	t->balloon += b->balloon_bytes;
	t->prefetches += b->prefetches;
	t->prefetch_bytes += b->prefetch_bytes;
	if (period > t->period)
		t->period = period;
}

static int dev_is_open(const struct shim_dev *d)
{
	return __atomic_load_n(&d->ready, __ATOMIC_ACQUIRE);
}

void shim_base_report(FILE *f)
{
	char b[4][32];
	struct base_sum t;
	memset(&t, 0, sizeof(t));
	int ndev = 0;
	for (int i = 0; i < SHIM_MAX_DEV; i++)
		if (dev_is_open(&shim.dev[i])) {
			sum_add(&t, &shim.dev[i]);
			ndev++;
		}
	fprintf(f, "spill shim: mode %s, budget %s, %" PRIu64 " allocations (%" PRIu64 " live)\n",
	        shim_mode_name(shim.mode), sp_format_size(t.budget, b[0], 32), shim.nseq, t.live);
	if (uvm()) {
		fprintf(f, "spill shim: managed memory %s at peak; %s\n",
		        sp_format_size(t.managed_peak, b[0], 32),
		        t.balloon ? "the driver oversubscribes at the budget (the device "
		                    "beyond it held by the shim)"
		                  : "the driver oversubscribes at the device's size");
		if (t.balloon)
			fprintf(f, "spill shim: held beyond the budget: %s\n",
			        sp_format_size(t.balloon, b[1], 32));
	} else {
		fprintf(f,
		        "spill shim: on the device %" PRIu64 " allocations (%s at peak), mapped "
		        "from pinned host memory %" PRIu64 " (%s at peak)\n",
		        t.device_count, sp_format_size(t.device_peak, b[0], 32), t.host_count,
		        sp_format_size(t.host_peak, b[1], 32));
	}
	if (shim.mode == SHIM_MODE_UVM_PREFETCH)
		fprintf(f,
		        "spill shim: %" PRIu64 " prefetches of %s to the device (%" PRIu64
		        " launches; %s)\n",
		        t.prefetches, sp_format_size(t.prefetch_bytes, b[2], 32), shim.ops,
		        t.period ? "ahead by the recorded iteration"
		                 : "no repeating iteration seen");
	if (t.chunks)
		fprintf(f,
		        "spill shim: %" PRIu64
		        " chunks the program mapped itself: on their device, "
		        "never moved, counted in its budget\n",
		        t.chunks);
	if (ndev < 2)
		return;
	for (int i = 0; i < SHIM_MAX_DEV; i++) {
		const struct shim_dev *d = &shim.dev[i];
		if (!dev_is_open(d))
			continue;
		struct base_sum x;
		memset(&x, 0, sizeof(x));
		sum_add(&x, d);
		fprintf(f, "spill shim: device %d: budget %s, %" PRIu64 " live allocations", d->idx,
		        sp_format_size(x.budget, b[0], 32), x.live);
		if (uvm())
			fprintf(f, ", managed %s at peak, held beyond the budget %s",
			        sp_format_size(x.managed_peak, b[1], 32),
			        sp_format_size(x.balloon, b[2], 32));
		else
			fprintf(f,
			        ", on the device %" PRIu64
			        " (%s at peak), mapped from host %" PRIu64 " (%s at peak)",
			        x.device_count, sp_format_size(x.device_peak, b[1], 32),
			        x.host_count, sp_format_size(x.host_peak, b[2], 32));
		if (shim.mode == SHIM_MODE_UVM_PREFETCH)
			fprintf(f, ", %" PRIu64 " prefetches of %s (%" PRIu64 " operations)",
			        x.prefetches, sp_format_size(x.prefetch_bytes, b[3], 32), d->ops);
		fprintf(f, ", %" PRIu64 " chunks\n", x.chunks);
	}
}

static void json_sum(FILE *f, const struct base_sum *t)
{
	fprintf(f,
	        "\"managed_peak\":%" PRIu64 ",\"device_peak\":%" PRIu64 ",\"hostmap_peak\":%" PRIu64
	        ",\"hostmap_allocations\":%" PRIu64 ",\"balloon\":%" PRIu64
	        ",\"prefetches\":%" PRIu64 ",\"prefetch_bytes\":%" PRIu64 ",",
	        t->managed_peak, t->device_peak, t->host_peak, t->host_count, t->balloon,
	        t->prefetches, t->prefetch_bytes);
}

void shim_base_json(FILE *f, const struct shim_dev *d)
{
	struct base_sum t;
	memset(&t, 0, sizeof(t));
	if (d)
		sum_add(&t, d);
	else
		for (int i = 0; i < SHIM_MAX_DEV; i++)
			if (dev_is_open(&shim.dev[i]))
				sum_add(&t, &shim.dev[i]);
	json_sum(f, &t);
}
