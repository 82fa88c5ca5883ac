/* shim/mem.c — the program's device allocations as stable-address vmm objects,
 * and residency before every operation that touches them.
 *
 * An allocation is a VMM_OBJ_STABLE object on the program's device: its
 * address is a reserved range that keeps its value while the vmm maps memory
 * into it, copies it out and unmaps it. Before a launch, copy or memset the
 * shim finds the tracked allocations the operation reaches (kernel parameters
 * scanned word by word with the layout from cuFuncGetParamInfo), acquires
 * them, and makes the program's stream wait for the transfers.
 *
 * Acquired allocations stay acquired ("held") after the operation: a launch
 * whose allocations are resident costs a table lookup, not a round of events.
 * When an acquire does not fit, the shim releases every held allocation the
 * operation does not touch in one batch, with one event that covers the
 * program's streams used since the last batch, and the vmm evicts by its
 * policy (Belady on the recorded iteration, LRU before one is seen).
 *
 * Each device the program uses has its own vmm, budget, allocation table and
 * lock (struct shim_dev), opened at that device's first allocation. An
 * operation holds the locks of the devices whose allocations it touches
 * (ascending order) across its acquires, its driver call and its bookkeeping,
 * so no thread releases memory another thread is about to launch on, and two
 * threads on two devices do not wait for each other. shim.lock, taken after
 * device locks and held briefly, covers the shared tables: freed ranges,
 * kernels, the report; a device's table changes only under both locks.
 */
#include "shim/internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SHIM_DEV_INIT(i) [i] = {.lock = PTHREAD_MUTEX_INITIALIZER, .idx = i}
struct shim_state shim = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .dev = {SHIM_DEV_INIT(0), SHIM_DEV_INIT(1), SHIM_DEV_INIT(2), SHIM_DEV_INIT(3),
            SHIM_DEV_INIT(4), SHIM_DEV_INIT(5), SHIM_DEV_INIT(6), SHIM_DEV_INIT(7),
            SHIM_DEV_INIT(8), SHIM_DEV_INIT(9), SHIM_DEV_INIT(10), SHIM_DEV_INIT(11),
            SHIM_DEV_INIT(12), SHIM_DEV_INIT(13), SHIM_DEV_INIT(14), SHIM_DEV_INIT(15)}};

/* A kernel's parameter layout, cached by CUfunction. nparams -1: unknown. */
struct shim_fn_info {
	CUfunction fn;
	int nparams;
	uint32_t k; /* kstat */
	size_t *off, *size;
};

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- kernels and their names ------------------------------------------------- */

/* Under shim.lock. */
static uint32_t kstat_get(const char *name)
{
	for (uint32_t i = 0; i < shim.nk; i++)
		if (!strncmp(shim.kstats[i].name, name, sizeof(shim.kstats[i].name) - 1))
			return i;
	if (shim.nk == shim.cap_k) {
		uint32_t cap = shim.cap_k ? 2 * shim.cap_k : 64;
		struct shim_kstat *k = realloc(shim.kstats, cap * sizeof(*k));
		if (!k)
			return 0; /* slot 0 exists: "memcpy" is made first */
		shim.kstats = k;
		shim.cap_k = cap;
	}
	struct shim_kstat *k = &shim.kstats[shim.nk];
	memset(k, 0, sizeof(*k));
	snprintf(k->name, sizeof(k->name), "%s", name);
	return shim.nk++;
}

uint32_t shim_kstat_get(const char *name)
{
	pthread_mutex_lock(&shim.lock);
	uint32_t k = kstat_get(name);
	pthread_mutex_unlock(&shim.lock);
	return k;
}

static size_t fn_hash(CUfunction f, size_t cap)
{
	uint64_t x = (uint64_t)(uintptr_t)f;
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	return (size_t)x & (cap - 1);
}

static int fns_grow(void)
{
	size_t cap = shim.cap_fns ? 2 * shim.cap_fns : 256;
	struct shim_fn_info *t = calloc(cap, sizeof(*t));
	if (!t)
		return -ENOMEM;
	for (size_t i = 0; i < shim.cap_fns; i++) {
		if (!shim.fns[i].fn)
			continue;
		size_t j = fn_hash(shim.fns[i].fn, cap);
		while (t[j].fn)
			j = (j + 1) & (cap - 1);
		t[j] = shim.fns[i];
	}
	free(shim.fns);
	shim.fns = t;
	shim.cap_fns = cap;
	return 0;
}

/* The layout: cuFuncGetParamInfo, or cuKernelGetParamInfo for a CUkernel
 * passed as a CUfunction (lazy loading), until the index runs past the end. */
static void fn_layout(struct shim_fn_info *fi)
{
	size_t cap = 0;
	fi->nparams = -1;
	for (int api = 0; api < 2 && fi->nparams < 0; api++) {
		__typeof__(shim_real.cuFuncGetParamInfo) get =
		    api == 0
		        ? shim_real.cuFuncGetParamInfo
		        : (__typeof__(shim_real.cuFuncGetParamInfo))shim_real.cuKernelGetParamInfo;
		if (!get)
			continue;
		for (size_t i = 0;; i++) {
			size_t off = 0, sz = 0;
			CUresult r = get(fi->fn, i, &off, &sz);
			if (r != CUDA_SUCCESS) {
				/* past the end is INVALID_VALUE; another error at 0: not this API */
				if (i > 0 || r == CUDA_ERROR_INVALID_VALUE)
					fi->nparams = (int)i;
				break;
			}
			if (i == cap) {
				cap = cap ? 2 * cap : 8;
				size_t *o = realloc(fi->off, cap * sizeof(*o));
				size_t *s = o ? realloc(fi->size, cap * sizeof(*s)) : NULL;
				if (o)
					fi->off = o;
				if (!o || !s)
					return;
				fi->size = s;
			}
			fi->off[i] = off;
			fi->size[i] = sz;
		}
	}
}

static struct shim_fn_info *fn_info(CUfunction f)
{
	if (shim.nfns * 2 >= shim.cap_fns && fns_grow() < 0)
		return NULL;
	size_t j = fn_hash(f, shim.cap_fns);
	while (shim.fns[j].fn && shim.fns[j].fn != f)
		j = (j + 1) & (shim.cap_fns - 1);
	struct shim_fn_info *fi = &shim.fns[j];
	if (fi->fn)
		return fi;
	fi->fn = f;
	shim.nfns++;
	fn_layout(fi);
	const char *name = NULL;
	if (!shim_real.cuFuncGetName || shim_real.cuFuncGetName(&name, f) != CUDA_SUCCESS)
		name = NULL;
	char buf[32];
	if (!name) {
		snprintf(buf, sizeof(buf), "kernel@%p", (void *)f);
		name = buf;
	}
	fi->k = kstat_get(name);
	if (fi->nparams < 0)
		SP_WARN(SHIM,
		        "kernel %s: no parameter layout from the driver; every allocation is "
		        "made resident for its launches",
		        name);
	return fi;
}

/* ---- devices and their allocation tables ---------------------------------------- */

/* The device locks this thread holds (bit i: shim.dev[i]). */
static __thread unsigned tls_held;

void shim_dev_lock(struct shim_dev *d)
{
	pthread_mutex_lock(&d->lock);
	tls_held |= 1u << d->idx;
}

void shim_dev_unlock(struct shim_dev *d)
{
	tls_held &= ~(1u << d->idx);
	pthread_mutex_unlock(&d->lock);
}

static int dev_ready(const struct shim_dev *d)
{
	return __atomic_load_n(&d->ready, __ATOMIC_ACQUIRE);
}

unsigned shim_dev_lock_all(void)
{
	unsigned set = 0;
	for (int i = 0; i < SHIM_MAX_DEV; i++) {
		if (dev_ready(&shim.dev[i])) {
			shim_dev_lock(&shim.dev[i]);
			set |= 1u << i;
		}
	}
	return set;
}

void shim_dev_unlock_set(unsigned set)
{
	for (int i = SHIM_MAX_DEV - 1; i >= 0; i--)
		if (set & (1u << i))
			shim_dev_unlock(&shim.dev[i]);
}

/* Index of the first allocation of d whose base is > p. */
static size_t upper(const struct shim_dev *d, CUdeviceptr p)
{
	size_t lo = 0, hi = d->nallocs;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (d->allocs[mid]->base <= p)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* Under d's lock or shim.lock. */
static struct shim_alloc *find_in(const struct shim_dev *d, CUdeviceptr p)
{
	size_t i = upper(d, p);
	if (!i)
		return NULL;
	struct shim_alloc *a = d->allocs[i - 1];
	return p - a->base < a->bytes ? a : NULL;
}

/* Among the devices in set (their lock or shim.lock held). */
static struct shim_alloc *find_set(unsigned set, CUdeviceptr p)
{
	for (; set; set &= set - 1) {
		struct shim_dev *d = &shim.dev[__builtin_ctz(set)];
		struct shim_alloc *a = d->nallocs ? find_in(d, p) : NULL;
		if (a)
			return a;
	}
	return NULL;
}

static unsigned ready_set(void)
{
	unsigned set = 0;
	for (int i = 0; i < SHIM_MAX_DEV; i++)
		if (dev_ready(&shim.dev[i]))
			set |= 1u << i;
	return set;
}

static struct shim_alloc *find(CUdeviceptr p)
{
	return find_set(tls_held, p);
}

struct shim_dev *shim_dev_of(CUdeviceptr p)
{
	pthread_mutex_lock(&shim.lock);
	struct shim_alloc *a = find_set(ready_set(), p);
	struct shim_dev *d = a ? a->dev : NULL;
	pthread_mutex_unlock(&shim.lock);
	return d;
}

/* Under d's lock and shim.lock. */
static int table_insert(struct shim_dev *d, struct shim_alloc *a)
{
	if (d->nallocs == d->cap_allocs) {
		size_t cap = d->cap_allocs ? 2 * d->cap_allocs : 256;
		struct shim_alloc **t = realloc(d->allocs, cap * sizeof(*t));
		if (!t)
			return -ENOMEM;
		d->allocs = t;
		d->cap_allocs = cap;
	}
	size_t i = upper(d, a->base);
	memmove(&d->allocs[i + 1], &d->allocs[i], (d->nallocs - i) * sizeof(*d->allocs));
	d->allocs[i] = a;
	d->nallocs++;
	return 0;
}

static void table_remove(struct shim_dev *d, struct shim_alloc *a)
{
	size_t i = upper(d, a->base);
	if (i && d->allocs[i - 1] == a) {
		memmove(&d->allocs[i - 1], &d->allocs[i], (d->nallocs - i) * sizeof(*d->allocs));
		d->nallocs--;
	}
}

/* Freed ranges, newest first wins; a new allocation over one clears it.
 * Under shim.lock. */
static int in_grave(CUdeviceptr p)
{
	unsigned n = shim.ngrave < 256 ? shim.ngrave : 256;
	for (unsigned i = 0; i < n; i++)
		if (shim.grave[i].bytes && p - shim.grave[i].base < shim.grave[i].bytes)
			return 1;
	return 0;
}

static void grave_clear(CUdeviceptr base, size_t bytes)
{
	unsigned n = shim.ngrave < 256 ? shim.ngrave : 256;
	for (unsigned i = 0; i < n; i++)
		if (shim.grave[i].bytes && shim.grave[i].base < base + bytes &&
		    base < shim.grave[i].base + shim.grave[i].bytes)
			shim.grave[i].bytes = 0;
}

/* ---- init ------------------------------------------------------------------------- */

static int fill_api(struct shim_dev *d)
{
	struct dev_driver_api *a = &d->api;
	a->ctx = d->ctx;
	a->device = d->device;
	a->ctx_get_current = shim_real.cuCtxGetCurrent;
	a->ctx_push = shim_real.cuCtxPushCurrent_v2;
	a->ctx_pop = shim_real.cuCtxPopCurrent_v2;
	a->get_error_string = shim_real.cuGetErrorString;
	a->device_total_mem = shim_real.cuDeviceTotalMem_v2;
	a->device_get_name = shim_real.cuDeviceGetName;
	a->mem_alloc = shim_real.cuMemAlloc_v2;
	a->mem_free = shim_real.cuMemFree_v2;
	a->host_alloc = shim_real.cuMemHostAlloc;
	a->host_free = shim_real.cuMemFreeHost;
	a->addr_reserve = shim_real.cuMemAddressReserve;
	a->addr_free = shim_real.cuMemAddressFree;
	a->mem_create = shim_real.cuMemCreate;
	a->mem_release = shim_real.cuMemRelease;
	a->mem_map = shim_real.cuMemMap;
	a->mem_unmap = shim_real.cuMemUnmap;
	a->mem_set_access = shim_real.cuMemSetAccess;
	a->granularity = shim_real.cuMemGetAllocationGranularity;
	a->stream_create = shim_real.cuStreamCreate;
	a->stream_destroy = shim_real.cuStreamDestroy_v2;
	a->stream_sync = shim_real.cuStreamSynchronize;
	a->stream_wait_event = shim_real.cuStreamWaitEvent;
	a->event_create = shim_real.cuEventCreate;
	a->event_destroy = shim_real.cuEventDestroy_v2;
	a->event_record = shim_real.cuEventRecord;
	a->event_query = shim_real.cuEventQuery;
	a->event_sync = shim_real.cuEventSynchronize;
	a->event_elapsed = shim_real.cuEventElapsedTime_v2;
	a->memcpy_async = shim_real.cuMemcpyAsync;
	a->memset_d8_async = shim_real.cuMemsetD8Async;
	a->launch_host_func = shim_real.cuLaunchHostFunc;
	a->ctx_sync = shim_real.cuCtxSynchronize;
	return 0;
}

/* Once per process, under shim.lock: the parameters and the mode. Returns 0
 * or -errno (the shim then passes everything through). */
static int load(void)
{
	if (shim.loaded)
		return 0;
	if (shim.failed)
		return -ENODEV;
	shim.failed = 1;
	SP_CHECK(shim_real_init());
	SP_CHECK(sp_params_load(&shim.params, NULL));
	if (sp_params_apply_logging(&shim.params) < 0)
		SP_WARN(SHIM, "%s", sp_last_error());
	SP_CHECK(shim_mode_parse(shim.params.shim_mode, &shim.mode));
	kstat_get("memcpy");
	kstat_get("memset");
	if (*shim.params.shim_trace) {
		shim.cap_launch = 1u << 16;
		shim.launches = calloc(shim.cap_launch, sizeof(*shim.launches));
	}
	shim.t0 = now_s();
	shim.failed = 0;
	shim.loaded = 1;
	return 0;
}

/* d is open: the first one makes the shim ready (report at exit). */
static void dev_opened(struct shim_dev *d)
{
	d->failed = 0;
	static int reporting;
	pthread_mutex_lock(&shim.lock);
	if (!shim.base)
		shim.base = d;
	int first = !reporting++;
	__atomic_store_n(&d->ready, 1, __ATOMIC_RELEASE);
	__atomic_add_fetch(&shim.ndev, 1, __ATOMIC_RELAXED);
	__atomic_store_n(&shim.ready, 1, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&shim.lock);
	if (first) {
		atexit(shim_report_at_exit);
		shim_report_start_signal();
	}
}

/* dev_open_in for a baseline mode (mode.c): no vmm; the balloon, and the
 * recorder for uvm-prefetch. */
static int base_init(struct shim_dev *d)
{
	SP_CHECK(shim_base_init(d));
	d->rec = shim_rec_new(shim.mode == SHIM_MODE_UVM_PREFETCH);
	if (!d->rec)
		return sp_error(-ENOMEM, "shim: out of memory");
	dev_opened(d);
	char a[32];
	SP_INFO(SHIM,
	        "device %d: mode %s (SPILL_SHIM_MODE), device memory budget %s (SPILL_DEVICE_MEM)",
	        d->idx, shim_mode_name(shim.mode), sp_format_size(d->budget, a, sizeof(a)));
	return 0;
}

/* dev_init's work, with ctx current. */
static int dev_open_in(struct shim_dev *d, CUcontext ctx)
{
	d->ctx = ctx;
	d->device = d->idx;
	size_t free_b = 0, total_b = 0;
	if (!shim_real.cuMemGetInfo_v2 || shim_real.cuMemGetInfo_v2(&free_b, &total_b))
		return sp_error(-ENODEV, "shim: cuMemGetInfo failed");
	/* SPILL_DEVICE_MEM is each device's budget */
	d->budget = shim.params.device_mem ? shim.params.device_mem : free_b / 10 * 9;
	if (shim.mode != SHIM_MODE_SPILL)
		return base_init(d);
	fill_api(d);
	struct dev_config dc = {.backend = DEV_BACKEND_DRIVER,
	                        .ndevices = 1,
	                        .device_mem = d->budget,
	                        .driver = &d->api};
	SP_CHECK(dev_open(&dc, &d->dev));
	struct dev_info in;
	SP_CHECK(dev_info(d->dev, 0, &in));
	d->budget = in.capacity;
	struct vmm_config vc;
	SP_CHECK(vmm_config_from_params(&shim.params, &vc));
	vc.ndevices = 1;
	vc.device_mem = d->budget;
	vc.stable_mem = d->budget;
	vc.stats_at_close = 0;
	vc.trace_file = NULL;
	if (*shim.params.shim_trace && vc.trace_cap < (1u << 16))
		vc.trace_cap = 1u << 16;
	vc.host_fallback = shim.params.shim_host_fallback;
	int rc = vmm_open(d->dev, &vc, &d->vmm);
	if (rc == -ENOTSUP && vc.host_fallback) { /* a driver without host chunks */
		SP_WARN(SHIM, "%s; evicted allocations stay unmapped", sp_last_error());
		vc.host_fallback = 0;
		rc = vmm_open(d->dev, &vc, &d->vmm);
	}
	SP_CHECK(rc);
	SP_CHECK(dev_stream_create(d->dev, 0, &d->join));
	SP_CHECK(dev_event_create(d->dev, &d->join_ev));
	for (int i = 0; i < 16; i++)
		SP_CHECK(dev_event_create(d->dev, &d->used_ev[i]));
	d->rec = shim_rec_new(!strcmp(shim.params.shim_policy, "belady"));
	if (!d->rec)
		return sp_error(-ENOMEM, "shim: out of memory");
	dev_opened(d);
	char a[32];
	SP_INFO(SHIM, "device %d: memory budget %s on %s (SPILL_DEVICE_MEM), policy %s",
	        (int)d->device, sp_format_size(d->budget, a, sizeof(a)), in.name,
	        shim.params.shim_policy);
	return 0;
}

int shim_ctx_push(CUcontext ctx)
{
	CUcontext cur = NULL;
	if (!ctx || (shim_real.cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur == ctx))
		return 0;
	return shim_real.cuCtxPushCurrent_v2(ctx) == CUDA_SUCCESS;
}

void shim_ctx_pop(int pushed)
{
	CUcontext c;
	if (pushed && shim_real.cuCtxPopCurrent_v2(&c) != CUDA_SUCCESS)
		SP_WARN(SHIM, "cuCtxPopCurrent failed");
}

/* Opens d in ctx (a context on d's device; made current for the while), at
 * its first allocation or chunk: its vmm in spill mode, its baseline state
 * otherwise. Under d's lock. Returns 0, or -errno (d's allocations then pass
 * through). */
static int dev_init(struct shim_dev *d, CUcontext ctx)
{
	if (d->ready)
		return 0;
	if (d->failed)
		return -ENODEV;
	d->failed = 1;
	int pushed = shim_ctx_push(ctx);
	int rc = dev_open_in(d, ctx);
	shim_ctx_pop(pushed);
	return rc;
}

/* The calling thread's device, or NULL with *ctx NULL when it has no context. */
static struct shim_dev *current_dev(CUcontext *ctx)
{
	CUdevice dev = 0;
	*ctx = NULL;
	if (shim_real.cuCtxGetCurrent(ctx) != CUDA_SUCCESS || !*ctx)
		return NULL;
	if (shim_real.cuCtxGetDevice(&dev) != CUDA_SUCCESS || dev < 0 || dev >= SHIM_MAX_DEV)
		return NULL;
	return &shim.dev[dev];
}

/* ---- batch release ---------------------------------------------------------------- */

static void note_stream(struct shim_dev *d, CUstream s)
{
	for (int i = 0; i < d->nused; i++)
		if (d->used[i] == s)
			return;
	if (d->nused < 16)
		d->used[d->nused++] = s;
	else
		d->used_overflow = 1;
}

/* Waits for everything queued in d's context (the program's free does). */
static void ctx_sync(struct shim_dev *d)
{
	if (shim_real.cuCtxPushCurrent_v2(d->ctx) != CUDA_SUCCESS) {
		shim_real.cuCtxSynchronize();
		return;
	}
	shim_real.cuCtxSynchronize();
	CUcontext c;
	if (shim_real.cuCtxPopCurrent_v2(&c) != CUDA_SUCCESS)
		SP_WARN(SHIM, "cuCtxPopCurrent failed");
}

/* Every open device's context: after another device's stream used d's memory
 * (peer access), whose streams an event of d's context cannot join. */
static void sync_all(void)
{
	for (int i = 0; i < SHIM_MAX_DEV; i++)
		if (dev_ready(&shim.dev[i]) && shim.dev[i].ctx)
			ctx_sync(&shim.dev[i]);
}

void shim_dev_sync(struct shim_dev *d)
{
	if (d->peer_used)
		sync_all();
	else
		ctx_sync(d);
}

/* One event after every use so far of d's allocations about to be released:
 * the streams used since the last batch joined on d's stream. NULL when the
 * devices had to be synchronized instead. */
static struct dev_event *join_uses(struct shim_dev *d)
{
	if (d->peer_used) {
		sync_all();
		d->peer_used = 0;
		return NULL;
	}
	if (d->used_overflow) {
		ctx_sync(d);
		return NULL;
	}
	for (int i = 0; i < d->nused; i++) {
		if (dev_driver_event_record(d->used_ev[i], d->used[i]) < 0 ||
		    dev_stream_wait_event(d->join, d->used_ev[i]) < 0) {
			SP_WARN(SHIM, "ordering a release: %s; synchronizing", sp_last_error());
			ctx_sync(d);
			return NULL;
		}
	}
	if (dev_event_record(d->join_ev, d->join) < 0) {
		ctx_sync(d);
		return NULL;
	}
	return d->join_ev;
}

static void release_one(struct shim_alloc *a, struct dev_event *done)
{
	if (a->backing == SHIM_BACK_VMM && vmm_release(a->dev->vmm, a->obj, 0, done) < 0)
		SP_WARN(SHIM, "release of allocation %" PRIu64 ": %s", a->seq, sp_last_error());
	a->held = 0;
	a->ready = NULL;
}

/* Releases every held allocation of d except those in keep. Under d's lock. */
static void release_batch(struct shim_dev *d, struct shim_alloc *const *keep, int nkeep)
{
	struct dev_event *done = join_uses(d);
	for (size_t i = 0; i < d->nallocs; i++) {
		struct shim_alloc *a = d->allocs[i];
		if (!a->held || a->pinned)
			continue;
		int k = 0;
		while (k < nkeep && keep[k] != a)
			k++;
		if (k == nkeep)
			release_one(a, done);
	}
	d->nused = 0;
	d->used_overflow = 0;
	d->batch_releases++;
}

/* Acquires a on its device. A miss when the device is full first releases
 * the held ones not in keep (so the victim is chosen among all of them), and
 * an acquire that still does not fit tries once more after that.
 * *where: where its copies were before. Under a's device's lock. */
static int hold(struct shim_alloc *a, struct shim_alloc *const *keep, int nkeep,
                enum vmm_access acc, uint32_t *where)
{
	struct shim_dev *d = a->dev;
	void *ptr = NULL;
	struct dev_event *ready = NULL;
	if (a->backing == SHIM_BACK_CHUNK) {
		*where = shim_chunk_resident(a) ? 1u : VMM_INFO_HOST;
		return shim_chunk_hold(a, keep, nkeep, acc == VMM_OVERWRITE);
	}
	*where = vmm_obj_where(d->vmm, a->obj);
	if (!(*where & 1u)) {
		/* a miss that must evict: let the policy choose among everything the
		 * operation does not need, not only what is not held right now; memory
		 * freed in stream order that nothing uses any more goes first */
		uint64_t used = 0, cap = 0;
		if (vmm_place_usage(d->vmm, 0, &used, &cap) == 0 &&
		    used + d->ext_bytes + a->bytes > cap) {
			shim_pool_reclaim(d, SHIM_RECLAIM_PRESSURE);
			if (d->ext_bytes)
				shim_mem_fit_external(d, a->bytes, keep, nkeep);
			else
				release_batch(d, keep, nkeep);
		}
	}
	int rc = vmm_acquire(d->vmm, a->obj, 0, acc, &ptr, &ready);
	if (rc == -ENOMEM) {
		shim_pool_reclaim(d, SHIM_RECLAIM_WAIT);
		release_batch(d, keep, nkeep);
		rc = vmm_acquire(d->vmm, a->obj, 0, acc, &ptr, &ready);
	}
	if (rc < 0)
		return rc;
	a->held = 1;
	a->ready = ready;
	a->waited = 0;
	return 0;
}

/* Allocations that pass through to the driver (pools the shim cannot make
 * evictable) hold d->ext_bytes of the device: evicts released allocations,
 * least recently used first, until what the vmm holds plus them plus need
 * fits the budget. Under d's lock. */
void shim_mem_fit_external(struct shim_dev *d, size_t need, struct shim_alloc *const *keep,
                           int nkeep)
{
	for (int released = 0;;) {
		uint64_t used = 0, cap = 0;
		if (vmm_place_usage(d->vmm, 0, &used, &cap) < 0 ||
		    used + d->ext_bytes + need <= cap)
			return;
		struct shim_alloc *victim = NULL;
		for (size_t i = 0; i < d->nallocs; i++) {
			struct shim_alloc *a = d->allocs[i];
			int k = 0;
			while (k < nkeep && keep[k] != a)
				k++;
			int resident = a->backing == SHIM_BACK_CHUNK
			                   ? shim_chunk_resident(a)
			                   : (vmm_obj_where(d->vmm, a->obj) & 1u) != 0;
			if (k < nkeep || a->held || a->pinned || !resident)
				continue;
			if (!victim || a->last_use < victim->last_use)
				victim = a;
		}
		if (!victim && !released) {
			release_batch(d, keep, nkeep); /* held ones become candidates */
			released = 1;
			continue;
		}
		if (!victim ||
		    (victim->backing == SHIM_BACK_CHUNK ? shim_chunk_evict(victim)
		                                        : vmm_evict(d->vmm, victim->obj, 0)) < 0)
			return; /* the acquire then fails, or fits the vmm's own room */
	}
}

/* ---- operations --------------------------------------------------------------------- */

#define SHIM_MAX_TOUCH 256

struct op_state {
	struct shim_alloc *a[SHIM_MAX_TOUCH];
	enum shim_use use[SHIM_MAX_TOUCH];
	int n;
	uint32_t k;
	uint64_t sig;
	int all;                      /* unknown layout: every allocation */
	int stale;                    /* a freed address inside a struct parameter */
	int bad_param;                /* the refused launch's parameter, -1: a copy or set */
	uint64_t bad_word;            /* and the freed address it holds */
	unsigned set;                 /* the devices whose tables the scan searches */
	unsigned locked;              /* the device locks begin took: end drops them */
	struct shim_dev *cur;         /* the device of the calling thread's context, or NULL */
	CUstream stream;              /* the operation's stream, as the driver sees it */
	uint64_t misses, h2d, disk2h; /* for the kernel's stats, added at the end */
	char name[64];                /* the kernel's name, for log lines */
};

static __thread struct op_state tls_op;

static void add_touch(struct op_state *st, struct shim_alloc *a, enum shim_use use)
{
	for (int i = 0; i < st->n; i++) {
		if (st->a[i] == a) {
			if (use != SHIM_USE_READ && st->use[i] == SHIM_USE_READ)
				st->use[i] = SHIM_USE_WRITE;
			if (use == SHIM_USE_WRITE)
				st->use[i] = SHIM_USE_WRITE;
			return;
		}
	}
	if (st->n < SHIM_MAX_TOUCH) {
		st->a[st->n] = a;
		st->use[st->n++] = use;
	}
}

/* Every 8-byte word of a parameter that points into a tracked allocation. A word in a freed range refuses the
 * launch (-1) only when it is a whole pointer-sized parameter (pointer != 0):
 * inside a larger parameter (a struct of pointers, some unused) it may be a
 * stale field the kernel never reads, so it is only counted. On an H100,
 * PyTorch under PYTORCH_NO_CUDA_MEMORY_CACHING=1 had a backward kernel refused
 * that runs without the shim. */
static int scan_words(struct op_state *st, const unsigned char *p, size_t bytes, int pointer)
{
	CUdeviceptr lo = UINT64_MAX;
	for (unsigned set = st->set; set; set &= set - 1) {
		const struct shim_dev *d = &shim.dev[__builtin_ctz(set)];
		if (d->nallocs && d->allocs[0]->base < lo)
			lo = d->allocs[0]->base;
	}
	if (lo == UINT64_MAX && !shim.ngrave)
		return 0;
	int stale = 0;
	for (size_t o = 0; o + 8 <= bytes; o += 8) {
		uint64_t w;
		memcpy(&w, p + o, 8);
		if (w < lo && !shim.ngrave)
			continue;
		struct shim_alloc *a = find_set(st->set, (CUdeviceptr)w);
		if (a)
			add_touch(st, a, SHIM_USE_WRITE);
		else if (shim.ngrave && w && in_grave((CUdeviceptr)w)) {
			if (pointer) {
				st->bad_word = w;
				return -1;
			}
			stale = 1;
		}
	}
	st->stale |= stale;
	return 0;
}

static int scan_params(struct op_state *st, struct shim_op *op)
{
	struct shim_fn_info *fi = fn_info(op->fn);
	if (!fi)
		return -ENOMEM;
	st->k = fi->k;
	/* the extra form: one packed buffer */
	if (op->extra) {
		void *buf = NULL;
		size_t size = 0;
		for (void **e = op->extra; *e != CU_LAUNCH_PARAM_END; e += 2) {
			if (e[0] == CU_LAUNCH_PARAM_BUFFER_POINTER)
				buf = e[1];
			else if (e[0] == CU_LAUNCH_PARAM_BUFFER_SIZE && e[1])
				size = *(size_t *)e[1];
			else if (e[0] != CU_LAUNCH_PARAM_BUFFER_POINTER &&
			         e[0] != CU_LAUNCH_PARAM_BUFFER_SIZE)
				break;
		}
		if (buf && size) /* no parameter bounds: every word as in a struct */
			return scan_words(st, buf, size, 0);
	}
	if (!op->params)
		return 0;
	if (fi->nparams < 0) {
		st->all = 1;
		return 0;
	}
	for (int i = 0; i < fi->nparams; i++) {
		if (fi->size[i] < 8 || !op->params[i])
			continue;
		if (scan_words(st, op->params[i], fi->size[i], fi->size[i] == 8) < 0) {
			st->bad_param = i;
			return -1;
		}
	}
	return 0;
}

static uint64_t mix(uint64_t h, uint64_t x)
{
	h ^= x + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
	return h;
}

static CUstream effective_stream(const struct shim_op *op)
{
	if (op->stream == NULL && op->ptds)
		return CU_STREAM_PER_THREAD;
	return op->stream;
}

/* Makes the program's stream wait for a held allocation's transfer. */
static CUresult order_after_ready(struct shim_alloc *a, CUstream s)
{
	if (!a->ready || (a->waited && a->ready_waited == s))
		return CUDA_SUCCESS;
	if (dev_event_query(a->ready) == 0) {
		a->ready = NULL;
		return CUDA_SUCCESS;
	}
	if (dev_driver_stream_wait(a->ready, s) < 0) {
		SP_WARN(SHIM, "ordering after a transfer: %s", sp_last_error());
		return CUDA_ERROR_UNKNOWN;
	}
	a->ready_waited = s;
	a->waited = 1;
	return CUDA_SUCCESS;
}

static CUresult errno_to_cu(int rc)
{
	switch (rc) {
	case -ENOMEM: return CUDA_ERROR_OUT_OF_MEMORY;
	case -EINVAL: return CUDA_ERROR_INVALID_VALUE;
	case -ENOTSUP: return CUDA_ERROR_NOT_SUPPORTED;
	default: return CUDA_ERROR_UNKNOWN;
	}
}

/* Under shim.lock: the allocations op reaches among the devices in st->set
 * (their locks held, or shim.lock alone for a first look). Returns 0, or -1
 * when it reaches freed memory. */
static int scan_locked(struct shim_op *op, struct op_state *st, unsigned set)
{
	st->n = 0;
	st->all = 0;
	st->stale = 0;
	st->bad_param = -1;
	st->bad_word = 0;
	st->set = set;
	st->k = op->fn ? 0 : kstat_get(op->kind);
	int bad = 0;
	if (op->fn) {
		if (scan_params(st, op) < 0)
			bad = 1;
	} else {
		for (int i = 0; i < op->ntouch; i++) {
			struct shim_touch *t = &op->touch[i];
			struct shim_alloc *a = find_set(set, t->ptr);
			if (!a) {
				if (shim.ngrave && in_grave(t->ptr))
					bad = 1;
				continue;
			}
			enum shim_use use = t->use;
			/* overwriting part of it keeps the rest: a read-modify-write */
			if (use == SHIM_USE_OVERWRITE && (t->ptr != a->base || t->bytes < a->bytes))
				use = SHIM_USE_WRITE;
			add_touch(st, a, use);
		}
	}
	snprintf(st->name, sizeof(st->name), "%s", shim.kstats[st->k].name);
	if (bad) {
		shim.refused++;
		return -1;
	}
	if (st->stale)
		shim.stale_launches++;
	if (st->all) {
		for (unsigned x = set; x; x &= x - 1) {
			struct shim_dev *d = &shim.dev[__builtin_ctz(x)];
			for (size_t i = 0; i < d->nallocs && st->n < SHIM_MAX_TOUCH; i++)
				add_touch(st, d->allocs[i], SHIM_USE_WRITE);
		}
	}
	return 0;
}

/* Under the locks of the devices op touches: shim_op_begin's work after the
 * scan. On an error nothing was done and the caller drops the locks. */
static CUresult begin_locked(struct shim_op *op, struct op_state *st)
{
	CUstream s = effective_stream(op);
	uint64_t sig = mix(0, op->fn ? (uint64_t)(uintptr_t)op->fn : st->k);
	if (shim.mode != SHIM_MODE_SPILL) {
		/* uvm-prefetch: its allocations, before it, to its device (once the
		 * shim manages that device) */
		for (int i = 0; i < st->n; i++)
			sig = mix(sig, st->a[i]->base);
		st->sig = sig;
		if (st->cur)
			shim_base_prefetch(st->cur, st->a, st->n, s, st->cur->ops);
		return CUDA_SUCCESS;
	}
	st->misses = st->h2d = st->disk2h = 0;
	for (int i = 0; i < st->n; i++) {
		struct shim_alloc *a = st->a[i];
		sig = mix(sig, a->base);
		if (!a->held) {
			/* a held copy may be written by a later operation with no acquire
			 * in between: it is always held for writing */
			enum vmm_access acc =
			    st->use[i] == SHIM_USE_OVERWRITE ? VMM_OVERWRITE : VMM_WRITE;
			uint32_t where = 0;
			int rc = hold(a, st->a, st->n, acc, &where);
			if (rc < 0) {
				char b1[32], b2[32];
				SP_WARN(SHIM,
				        "%s: allocation %" PRIu64 " (%s) cannot be made resident "
				        "within the budget of %s on device %d: %s",
				        st->name, a->seq, sp_format_size(a->bytes, b1, sizeof(b1)),
				        sp_format_size(a->dev->budget, b2, sizeof(b2)), a->dev->idx,
				        sp_last_error());
				return errno_to_cu(rc);
			}
			if (!(where & 1u) && (where & (VMM_INFO_HOST | VMM_INFO_DISK)) &&
			    acc != VMM_OVERWRITE) {
				st->misses++;
				st->h2d += a->bytes;
				if (!(where & VMM_INFO_HOST))
					st->disk2h += a->bytes;
			}
		}
		if (a->first_k == UINT32_MAX)
			a->first_k = st->k;
		a->last_use = a->dev->ops;
		CUresult r = order_after_ready(a, s);
		if (r != CUDA_SUCCESS)
			return r;
	}
	st->sig = sig;
	return CUDA_SUCCESS;
}

static void lock_set(unsigned set)
{
	for (unsigned x = set; x; x &= x - 1)
		shim_dev_lock(&shim.dev[__builtin_ctz(x)]);
}

CUresult shim_op_begin(struct shim_op *op)
{
	struct op_state *st = &tls_op;
	st->locked = 0;
	if (!__atomic_load_n(&shim.ready, __ATOMIC_ACQUIRE))
		return CUDA_SUCCESS; /* nothing tracked yet */
	/* the baselines leave operations to the driver; uvm-prefetch looks at launches */
	if (shim.mode != SHIM_MODE_SPILL && (shim.mode != SHIM_MODE_UVM_PREFETCH || !op->fn))
		return CUDA_SUCCESS;
	CUcontext ctx;
	st->cur = current_dev(&ctx);
	if (st->cur && !dev_ready(st->cur))
		st->cur = NULL;
	unsigned all = ready_set(), set = all;
	if (__builtin_popcount(all) > 1) {
		/* several devices: a first look under shim.lock finds whose locks to take */
		pthread_mutex_lock(&shim.lock);
		int bad = scan_locked(op, st, all);
		pthread_mutex_unlock(&shim.lock);
		set = st->cur ? 1u << st->cur->idx : 0;
		for (int i = 0; i < st->n; i++)
			set |= 1u << st->a[i]->dev->idx;
		if (st->all)
			set = all;
		if (bad < 0)
			set = 0;
	}
	lock_set(set);
	pthread_mutex_lock(&shim.lock);
	int bad = scan_locked(op, st, set);
	pthread_mutex_unlock(&shim.lock);
	CUresult r = CUDA_ERROR_ILLEGAL_ADDRESS;
	if (bad < 0) {
		if (st->bad_param >= 0) /* which word: to tell a real use from a stale value */
			SP_WARN(SHIM,
			        "launch of %s: refused, it reaches device memory that was freed "
			        "(parameter %d, pointer %#" PRIx64 ")",
			        st->name, st->bad_param, st->bad_word);
		else
			SP_WARN(SHIM, "%s %s: refused, it reaches device memory that was freed",
			        op->fn ? "launch of" : op->kind, op->fn ? st->name : "");
	} else {
		r = begin_locked(op, st);
	}
	if (r != CUDA_SUCCESS)
		shim_dev_unlock_set(set);
	else
		st->locked = set;
	return r;
}

/* uvm-prefetch, after a launch on d: d's recorder sees the launch, and the
 * next allocations it predicts (among the devices locked) go to d on the
 * launch's stream. */
static void end_prefetch(struct shim_dev *d, struct shim_op *op, struct op_state *st,
                         CUresult driver_result)
{
	uint64_t pre[8];
	int npre = 0;
	if (driver_result == CUDA_SUCCESS && st->n)
		npre = shim_rec_op(d->rec, NULL, st->sig, st->a, st->n, pre, 8);
	struct shim_alloc *next[8];
	int n = 0;
	for (int i = 0; i < npre; i++) {
		struct shim_alloc *a = find((CUdeviceptr)pre[i]);
		if (a)
			next[n++] = a;
	}
	/* marked with the next operation's number, which then does not prefetch them again */
	shim_base_prefetch(d, next, n, effective_stream(op), d->ops + 1);
}

/* After the operation, for each device e locked: its count, the stream that
 * used its allocations; in spill mode the recorder of e sees e's part of it
 * and prefetches e's next ones. */
static void end_dev(struct shim_dev *e, struct op_state *st, CUresult driver_result)
{
	struct shim_alloc *mine[SHIM_MAX_TOUCH];
	int n = 0;
	for (int i = 0; i < st->n; i++)
		if (st->a[i]->dev == e)
			mine[n++] = st->a[i];
	e->ops++;
	if (!n)
		return;
	if (st->cur == e) {
		note_stream(e, st->stream);
	} else {
		/* a stream of another context used e's memory (peer access) */
		e->peer_used = 1;
		e->peer_ops++;
	}
	if (shim.mode != SHIM_MODE_SPILL)
		return;
	uint64_t pre[8];
	int npre = 0;
	if (driver_result == CUDA_SUCCESS)
		npre = shim_rec_op(e->rec, e->vmm, st->sig, mine, n, pre, 8);
	int released = 0;
	for (int i = 0; i < npre; i++) {
		struct shim_alloc *a = find_in(e, (CUdeviceptr)pre[i]);
		if (!a || a->held || a->backing != SHIM_BACK_VMM ||
		    (vmm_obj_where(e->vmm, a->obj) & 1u))
			continue;
		uint64_t used = 0, cap = 0;
		if (vmm_place_usage(e->vmm, 0, &used, &cap) == 0 &&
		    used + e->ext_bytes + a->bytes > cap) {
			/* the vmm evicts for a prefetch within its own capacity: beside
			 * memory it does not see (chunks, pass-through pools) that
			 * would overrun the budget, so no prefetch there */
			if (e->ext_bytes)
				continue;
			/* the prefetch may evict only what is needed after it: let it
			 * choose among everything, held or not */
			if (!released)
				release_batch(e, NULL, 0);
			released = 1;
		}
		if (vmm_prefetch(e->vmm, a->obj, 0) < 0)
			SP_TRACE(SHIM, "prefetch of allocation %" PRIu64 ": %s", a->seq,
			         sp_last_error());
	}
}

void shim_op_end(struct shim_op *op, CUresult driver_result)
{
	struct op_state *st = &tls_op;
	unsigned set = st->locked;
	st->locked = 0;
	if (!set) /* begin took no lock: nothing tracked, or a baseline */
		return;
	st->stream = effective_stream(op);
	pthread_mutex_lock(&shim.lock);
	struct shim_kstat *ks = &shim.kstats[st->k];
	ks->ops++;
	ks->misses += st->misses;
	ks->h2d += st->h2d;
	ks->disk2h += st->disk2h;
	shim.ops++;
	if (op->fn && shim.launches) {
		struct shim_launch_rec *l = &shim.launches[shim.nlaunch % shim.cap_launch];
		l->t = now_s();
		l->k = st->k;
		shim.nlaunch++;
	}
	pthread_mutex_unlock(&shim.lock);
	if (shim.mode != SHIM_MODE_SPILL && st->cur)
		end_prefetch(st->cur, op, st, driver_result); /* before its ops count moves */
	for (unsigned x = set; x; x &= x - 1)
		end_dev(&shim.dev[__builtin_ctz(x)], st, driver_result);
	shim_dev_unlock_set(set);
}

/* ---- allocation API ------------------------------------------------------------- */

/* shim_dev_enter and shim_dev_enter_at: ord < 0 is the current device. */
static int enter(int ord, struct shim_dev **out)
{
	pthread_mutex_lock(&shim.lock);
	int rc = load();
	pthread_mutex_unlock(&shim.lock);
	CUcontext ctx = NULL;
	struct shim_dev *d = rc == 0 ? current_dev(&ctx) : NULL;
	if (rc == 0 && !d)
		rc = ctx ? sp_error(-ENODEV, "shim: no device for the current context") : -EAGAIN;
	int cur = d ? d->idx : -1; /* ctx's device */
	if (rc == 0 && ord >= 0 && cur != ord) {
		d = NULL;
		if (ord >= SHIM_MAX_DEV)
			rc = sp_error(-ENODEV, "shim: device %d is beyond the %d the shim manages",
			              ord, SHIM_MAX_DEV);
		else
			d = &shim.dev[ord];
	}
	if (d) {
		shim_dev_lock(d);
		if (d->idx != cur && !dev_ready(d) && !d->failed) {
			/* not the calling thread's device, not open yet: its primary context */
			CUcontext pctx = NULL;
			if (!shim_real.cuDevicePrimaryCtxRetain ||
			    shim_real.cuDevicePrimaryCtxRetain(&pctx, d->idx) != CUDA_SUCCESS)
				pctx = NULL;
			ctx = pctx;
		}
		rc = ctx ? dev_init(d, ctx)
		         : sp_error(-ENODEV, "shim: no context on device %d", d->idx);
		if (rc < 0) {
			static int warned[SHIM_MAX_DEV];
			if (!__atomic_fetch_add(&warned[d->idx], 1, __ATOMIC_RELAXED))
				SP_WARN(SHIM, "device %d: not tracking allocations: %s", d->idx,
				        sp_last_error());
			shim_dev_unlock(d);
		}
	} else if (rc < 0 && rc != -EAGAIN) {
		static int warned;
		if (!__atomic_fetch_add(&warned, 1, __ATOMIC_RELAXED))
			SP_WARN(SHIM, "not tracking allocations: %s", sp_last_error());
	}
	if (rc == 0)
		*out = d;
	return rc;
}

int shim_dev_enter(struct shim_dev **out)
{
	return enter(-1, out);
}

int shim_dev_enter_at(int ord, struct shim_dev **out)
{
	return enter(ord < 0 ? SHIM_MAX_DEV : ord, out);
}

/* Under d's lock: into d's table (with shim.lock), its range no longer freed. */
static int track(struct shim_dev *d, struct shim_alloc *a)
{
	pthread_mutex_lock(&shim.lock);
	int rc = table_insert(d, a);
	if (rc == 0)
		grave_clear(a->base, a->cap);
	pthread_mutex_unlock(&shim.lock);
	return rc;
}

static uint64_t next_seq(void)
{
	return __atomic_add_fetch(&shim.nseq, 1, __ATOMIC_RELAXED);
}

CUresult shim_alloc_create(struct shim_dev *d, size_t bytes, const char *api,
                           struct shim_alloc **out)
{
	struct shim_alloc *a = calloc(1, sizeof(*a));
	if (!a)
		return CUDA_ERROR_OUT_OF_MEMORY;
	a->dev = d;
	a->seq = next_seq();
	a->bytes = bytes;
	a->cap = bytes;
	a->first_k = UINT32_MAX;
	char name[32];
	snprintf(name, sizeof(name), "alloc%" PRIu64, a->seq);
	struct vmm_obj_desc desc = {.bytes = bytes,
	                            .kind = VMM_KIND_WORKSPACE,
	                            .name = name,
	                            .flags = VMM_OBJ_STABLE,
	                            .home = 0};
	int rc = vmm_obj_create(d->vmm, &desc, &a->obj);
	if (rc < 0) {
		char b1[32], b2[32];
		SP_WARN(SHIM, "%s of %s on device %d: %s (budget %s)", api,
		        sp_format_size(bytes, b1, 32), d->idx, sp_last_error(),
		        sp_format_size(d->budget, b2, 32));
		free(a);
		return rc == -ENOMEM ? CUDA_ERROR_OUT_OF_MEMORY : errno_to_cu(rc);
	}
	a->base = (CUdeviceptr)(uintptr_t)vmm_obj_stable_addr(d->vmm, a->obj);
	if (track(d, a) < 0) {
		if (vmm_obj_destroy(d->vmm, a->obj) < 0)
			SP_WARN(SHIM, "%s", sp_last_error());
		free(a);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	if (__atomic_load_n(&shim.capturing, __ATOMIC_ACQUIRE)) {
		/* a graph being captured may keep its address: resident for good */
		uint32_t where;
		if (hold(a, NULL, 0, VMM_WRITE, &where) == 0 &&
		    (!a->ready || dev_event_sync(a->ready) == 0)) {
			a->ready = NULL;
			a->pinned = 1;
		}
	}
	*out = a;
	return CUDA_SUCCESS;
}

CUresult shim_mem_alloc(CUdeviceptr *dptr, size_t bytes, const char *api)
{
	if (!dptr)
		return CUDA_ERROR_INVALID_VALUE;
	if (!bytes)
		return CUDA_ERROR_INVALID_VALUE; /* as the driver */
	struct shim_dev *d = NULL;
	if (shim_dev_enter(&d) < 0) {
		if (!shim_real.cuMemAlloc_v2)
			return CUDA_ERROR_NOT_INITIALIZED;
		CUresult r = shim_real.cuMemAlloc_v2(dptr, bytes);
		if (r == CUDA_SUCCESS)
			shim_alloc_reused(*dptr, bytes);
		return r;
	}
	struct shim_alloc *a = NULL;
	CUresult r;
	if (shim.mode != SHIM_MODE_SPILL)
		r = shim_base_alloc(d, dptr, bytes, api, 0, NULL, NULL, 0);
	else if ((r = shim_alloc_create(d, bytes, api, &a)) == CUDA_SUCCESS)
		*dptr = a->base;
	shim_dev_unlock(d);
	return r;
}

/* Under shim.lock. */
static void grave_add(CUdeviceptr base, size_t bytes)
{
	shim.grave[shim.ngrave % 256].base = base;
	shim.grave[shim.ngrave % 256].bytes = bytes;
	shim.ngrave++;
}

/* Keeps a destroyed allocation for the report. Under shim.lock. */
static void dead_add(struct shim_alloc *a)
{
	if (shim.ndead == shim.cap_dead) {
		size_t cap = shim.cap_dead ? 2 * shim.cap_dead : 256;
		struct shim_alloc **t = realloc(shim.dead, cap * sizeof(*t));
		if (!t) {
			free(a);
			return;
		}
		shim.dead = t;
		shim.cap_dead = cap;
	}
	shim.dead[shim.ndead++] = a;
}

struct shim_alloc *shim_alloc_find(CUdeviceptr p)
{
	return find(p);
}

struct shim_alloc *shim_alloc_next(struct shim_dev *d, CUdeviceptr p)
{
	size_t i = upper(d, p);
	if (i && p - d->allocs[i - 1]->base < d->allocs[i - 1]->bytes)
		return d->allocs[i - 1];
	return i < d->nallocs ? d->allocs[i] : NULL;
}

void shim_alloc_reused(CUdeviceptr base, size_t bytes)
{
	pthread_mutex_lock(&shim.lock);
	if (shim.ngrave)
		grave_clear(base, bytes);
	pthread_mutex_unlock(&shim.lock);
}

int shim_alloc_freed(CUdeviceptr p)
{
	pthread_mutex_lock(&shim.lock);
	int freed = shim.ngrave && in_grave(p);
	pthread_mutex_unlock(&shim.lock);
	return freed;
}

void shim_alloc_retire(struct shim_alloc *a, struct dev_event *done)
{
	if (a->held)
		release_one(a, done);
	pthread_mutex_lock(&shim.lock);
	table_remove(a->dev, a);
	grave_add(a->base, a->cap);
	pthread_mutex_unlock(&shim.lock);
}

void shim_alloc_untrack(struct shim_alloc *a)
{
	pthread_mutex_lock(&shim.lock);
	table_remove(a->dev, a);
	pthread_mutex_unlock(&shim.lock);
}

int shim_alloc_revive(struct shim_alloc *a)
{
	return track(a->dev, a) < 0 ? -ENOMEM : 0;
}

void shim_alloc_destroy(struct shim_alloc *a)
{
	struct vmm *v = a->dev->vmm;
	struct vmm_obj_info inf;
	if (vmm_obj_info(v, a->obj, &inf) == 0) {
		a->h2d = inf.bytes_moved[VMM_XFER_H2D];
		a->d2h = inf.bytes_moved[VMM_XFER_D2H];
		a->h2disk = inf.bytes_moved[VMM_XFER_H2DISK];
		a->disk2h = inf.bytes_moved[VMM_XFER_DISK2H];
	}
	if (vmm_obj_destroy(v, a->obj) < 0)
		SP_WARN(SHIM, "freeing allocation %" PRIu64 ": %s", a->seq, sp_last_error());
	shim_alloc_bury(a);
}

CUresult shim_alloc_insert(struct shim_dev *d, CUdeviceptr base, size_t bytes,
                           enum shim_backing backing, struct shim_alloc **out)
{
	struct shim_alloc *a = calloc(1, sizeof(*a));
	if (!a)
		return CUDA_ERROR_OUT_OF_MEMORY;
	a->dev = d;
	a->seq = next_seq();
	a->base = base;
	a->bytes = bytes;
	a->cap = bytes;
	a->backing = backing;
	a->first_k = UINT32_MAX;
	a->prefetched_op = UINT64_MAX;
	if (track(d, a) < 0) {
		free(a);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*out = a;
	return CUDA_SUCCESS;
}

void shim_alloc_bury(struct shim_alloc *a)
{
	pthread_mutex_lock(&shim.lock);
	dead_add(a);
	pthread_mutex_unlock(&shim.lock);
}

CUresult shim_mem_free(CUdeviceptr dptr)
{
	int ready = __atomic_load_n(&shim.ready, __ATOMIC_ACQUIRE);
	struct shim_dev *d = ready ? shim_dev_of(dptr) : NULL;
	struct shim_alloc *a = NULL;
	if (d) {
		shim_dev_lock(d);
		a = find_in(d, dptr);
		if (!a || a->base != dptr) {
			shim_dev_unlock(d);
			a = NULL;
		}
	}
	if (!a) {
		int freed = ready && shim_alloc_freed(dptr);
		if (freed) {
			SP_WARN(SHIM, "cuMemFree of %#llx: already freed (double free)",
			        (unsigned long long)dptr);
			return CUDA_ERROR_INVALID_VALUE;
		}
		/* not ours: the driver's answer (a plain allocation, or its error) */
		if (ready)
			shim_pool_forget_external(dptr);
		CUresult r = shim_real.cuMemFree_v2 ? shim_real.cuMemFree_v2(dptr)
		                                    : CUDA_ERROR_NOT_INITIALIZED;
		if (r != CUDA_SUCCESS && ready)
			SP_WARN(SHIM, "cuMemFree of %#llx: not an allocation (%d)",
			        (unsigned long long)dptr, (int)r);
		return r;
	}
	CUresult r = CUDA_SUCCESS;
	if (a->backing == SHIM_BACK_CHUNK) { /* mapped memory is not cuMemFree's */
		r = CUDA_ERROR_INVALID_VALUE;
	} else if (a->backing != SHIM_BACK_VMM) { /* a baseline's: the driver's free */
		r = shim_base_free(a, 0, NULL, 0);
	} else {
		/* like the driver's free: work queued before it may still use the memory */
		if (d->peer_used)
			sync_all();
		else
			ctx_sync(d);
		shim_alloc_retire(a, NULL);
		shim_alloc_destroy(a);
	}
	shim_dev_unlock(d);
	return r;
}

CUresult shim_mem_get_info(size_t *free_b, size_t *total_b)
{
	if (!free_b || !total_b)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = shim_real.cuMemGetInfo_v2 ? shim_real.cuMemGetInfo_v2(free_b, total_b)
	                                       : CUDA_ERROR_NOT_INITIALIZED;
	if (r != CUDA_SUCCESS)
		return r;
	CUcontext ctx;
	struct shim_dev *d =
	    __atomic_load_n(&shim.ready, __ATOMIC_ACQUIRE) ? current_dev(&ctx) : NULL;
	if (d && dev_ready(d)) {
		shim_dev_lock(d);
		if (shim.mode != SHIM_MODE_SPILL) {
			shim_base_get_info(d, free_b, total_b);
		} else {
			/* the budget is the device the program sees; what the vmm holds is used */
			uint64_t used = 0, cap = 0;
			if (vmm_place_usage(d->vmm, 0, &used, &cap) < 0)
				used = 0;
			used += d->ext_bytes; /* pools that pass through count too */
			uint64_t f = d->budget > used ? d->budget - used : 0;
			*total_b = d->budget;
			if (f < *free_b)
				*free_b = f;
		}
		shim_dev_unlock(d);
	} else {
		/* before the device's first allocation: the budget it will have */
		uint64_t b = 0;
		const char *e = getenv("SPILL_DEVICE_MEM");
		if (e && sp_parse_size(e, &b) == 0 && b && b < *total_b) {
			*total_b = b;
			if (*free_b > b)
				*free_b = b;
		}
	}
	return CUDA_SUCCESS;
}

int shim_mem_range(CUdeviceptr ptr, CUdeviceptr *base, size_t *bytes)
{
	pthread_mutex_lock(&shim.lock);
	struct shim_alloc *a = shim.ready ? find_set(ready_set(), ptr) : NULL;
	if (a) {
		*base = a->base;
		*bytes = a->bytes;
	}
	pthread_mutex_unlock(&shim.lock);
	return a != NULL;
}

void shim_mem_pin_all(const char *why)
{
	if (!__atomic_load_n(&shim.ready, __ATOMIC_ACQUIRE))
		return;
	unsigned set = shim_dev_lock_all();
	if (shim.mode == SHIM_MODE_SPILL) {
		for (unsigned x = set; x; x &= x - 1) {
			struct shim_dev *d = &shim.dev[__builtin_ctz(x)];
			for (size_t i = 0; i < d->nallocs; i++) {
				struct shim_alloc *a = d->allocs[i];
				uint32_t where;
				if (!a->held && hold(a, NULL, 0, VMM_WRITE, &where) < 0) {
					SP_WARN(SHIM,
					        "%s: allocation %" PRIu64 " cannot be pinned: %s",
					        why, a->seq, sp_last_error());
					continue;
				}
				/* a capturing stream cannot wait for an event from outside */
				if (a->ready && dev_event_sync(a->ready) < 0)
					SP_WARN(SHIM, "%s: %s", why, sp_last_error());
				a->ready = NULL;
				a->pinned = 1;
			}
			SP_INFO(SHIM, "%s: %zu allocations pinned on device %d", why, d->nallocs,
			        d->idx);
		}
	}
	/* a baseline's memory never moves */
	__atomic_store_n(&shim.capturing, 1, __ATOMIC_RELEASE);
	shim_dev_unlock_set(set);
}
