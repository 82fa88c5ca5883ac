/* tests/shim/fakecuda.c — a host-emulated CUDA driver (libcuda.so.1) for the shim's tests.
 *
 * The preload shim intercepts the CUDA driver API; to test it on machines without
 * a GPU, this library stands in for the driver: the subset of the API that the
 * shim and its test programs call, with the driver's ABI (export names with their
 * _v2/_ptds/_ptsz variants, and a cuGetProcAddress that resolves versions and the
 * per-thread flag as the driver does), implemented over spill's host backend
 * (device/host.c). Device memory is host memory and a reserved range with nothing
 * mapped is PROT_NONE, so a kernel that touches non-resident memory crashes the
 * test, as it would fault a GPU. Kernels are host functions registered by the test
 * (fakecu.h). FAKECU_DEVICES devices (default 1), each with its own capacity
 * (FAKECU_DEVICE_MEM each), counters and primary context; an allocation
 * counts against the device current in the calling thread's context (a
 * cuMemCreate chunk: its location's), so a shim that puts memory on the wrong
 * device runs out there. All devices share one host backend, so any device
 * reaches any allocation: peer access is always possible, and enabling it
 * (cuCtxEnablePeerAccess) is only bookkeeping.
 * Invariants: the tables (ranges, handles, kernels, streams) live under g.lock, and
 * every op is queued under it, so the legacy default stream is ordered against the
 * blocking streams in call order; nothing waits for device work while holding it.
 * Internal calls never go through an exported name (the shim may interpose those).
 * Stream-ordered pools keep freed blocks (no release threshold: they go at
 * cuMemPoolTrimTo, cuMemPoolDestroy, or when the device is full) and reuse
 * them first fit, on another stream after the free's event.
 * Where a test can tell it from a GPU: copies touching pageable memory, synchronous
 * sets and cuStreamDestroy finish their work before returning (the driver may);
 * fakecu_device_used() counts physical bytes (cuMemAlloc and device-located
 * cuMemCreate chunks, mapped or not); managed memory is never counted (its
 * pages stay where every kernel reaches them) and a prefetch moves nothing.
 */

/* The driver's own view of cuda.h: no #define of cuMemAlloc to cuMemAlloc_v2 and
 * friends, and declarations of every versioned name, so each can be defined. */
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

#include "tests/shim/fakecu.h"

#include "device/device.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

#define DRIVER_VERSION   13000
#define DEVICE_NAME      "spill fake GPU"
#define DEFAULT_MEM      (1ull << 30)
#define HOST_CHUNK_ROOM  (64ull << 30) /* capacity for host-located chunks, beyond the device's */
#define DEFAULT_BW       25e9          /* link bandwidth of the profile when not throttled */
#define PITCH_ALIGN      512
#define CTX_STACK_MAX    64
#define KARGS_HDR        16   /* the kernel's function, before its packed parameters */
#define KARGS_MAX        4096 /* dev_launch's limit */
#define MAX_BLOCK_THREAD 1024
#define MAX_DEV          8

/* ---- state ---------------------------------------------------------------------- */

/* R_MANAGED: cuMemAllocManaged, reachable from the device and the host alike;
 * its pages are not counted against the device (the driver migrates them). */
enum range_kind { R_ALLOC, R_HOST, R_RESERVE, R_MANAGED };

/* A cuMemCreate allocation; its handle is its address. Freed once no handle
 * reference (cuMemCreate, cuMemRetainAllocationHandle) and no mapping is left. */
struct chunk {
	struct dev_phys *ph;
	size_t bytes;
	int dev;  /* the device it counts against */
	int host; /* located on the host: not counted against the device */
	int refs, maps;
};

struct mapping {
	uintptr_t start;
	size_t bytes;
	struct chunk *ch;
};

/* An allocation (device or pinned host) or a reservation with its mappings. */
struct range {
	uintptr_t start;
	size_t bytes;
	enum range_kind kind;
	uintptr_t raw_start; /* R_RESERVE: what was reserved, around [start, start+bytes) */
	size_t raw_bytes;
	struct mapping *maps; /* R_RESERVE: sorted by start, disjoint */
	size_t nmaps, cap_maps;
	int dev;                         /* R_ALLOC: the device it counts against */
	struct CUmemPoolHandle_st *pool; /* R_ALLOC from a pool (cuMemAllocAsync) */
	int pool_freed;                  /* freed in stream order, kept by its pool */
};

/* A block freed with cuMemFreeAsync: its range stays allocated, owned by the
 * pool, until a later allocation reuses it (after ev when on another stream,
 * as the driver's pools insert that dependency) or the pool releases it. */
struct pool_block {
	struct range *r;
	struct dev_event *ev;    /* recorded on the freeing stream at the free */
	struct CUstream_st *s;   /* the freeing stream */
	struct pool_block *next; /* oldest first */
};

/* A memory pool (cuMemPoolCreate, or the device's default one). */
struct CUmemPoolHandle_st {
	CUmemPoolProps props;
	int exported; /* cuMemPoolExportToShareableHandle succeeded */
	struct pool_block *free;
};

struct CUctx_st {
	int dev;
	unsigned peers; /* devices whose memory it may reach (cuCtxEnablePeerAccess) */
};

struct CUmod_st {
	int unused;
};

struct CUfunc_st {
	char *name;
	fakecu_kernel_fn fn;
	int nparams;
	size_t *size, *off;
	size_t total; /* bytes of the packed parameters */
};

struct CUstream_st {
	struct dev_stream *ds;
	struct dev_event *tail; /* recorded when the legacy stream must wait for this one */
	int legacy, blocking;
	int dirty;     /* ops queued since the legacy stream last waited for this stream */
	uint64_t seen; /* the legacy generation this stream last waited for */
	struct CUstream_st *next, *prev;
};

struct CUevent_st {
	struct dev_event *de;
	unsigned flags;
	int recorded; /* atomic */
};

/* What a thread owns: its per-thread default stream and the event its
 * synchronous calls wait on. Freed at thread exit (pthread key destructor). */
struct thread_state {
	struct CUstream_st *ptds;
	struct dev_event *sync_ev;
};

enum handle_kind { H_STREAM = 1, H_EVENT, H_MODULE, H_FUNC, H_CHUNK, H_POOL };

struct handle_slot {
	uintptr_t key; /* 0 empty, 1 tombstone */
	int kind;
};

static struct {
	pthread_mutex_t lock;
	/* written once by init_once */
	CUresult init_rc;
	struct dev_ctx *dev;
	uint64_t devmem;
	size_t gran;
	pthread_key_t key;
	/* under lock */
	int forked; /* in a child of fork(), no stream has been given new workers yet */
	struct CUstream_st *legacy;
	struct dev_event *legacy_ev; /* recorded after every op on the legacy stream */
	uint64_t legacy_gen;         /* ops queued on the legacy stream so far */
	struct CUstream_st *streams; /* every stream but the legacy one */
	struct range **rg;           /* sorted by start */
	size_t nrg, cap_rg;
	struct handle_slot *hs; /* live handles, so a bad one is an error, not a crash */
	size_t hs_cap, hs_live, hs_tomb;
	struct CUfunc_st **kern;
	size_t nkern, cap_kern;
	int primary_refs;
	struct CUmemPoolHandle_st *cur_pool; /* cuDeviceSetMemPool; NULL = the default */
	/* atomics */
	int ndev; /* written once by init_once */
	uint64_t copied[FAKECU_COPY_KINDS], launches, prefetched;
	uint64_t used[MAX_DEV], peak[MAX_DEV], prefetched_on[MAX_DEV];
} g = {.lock = PTHREAD_MUTEX_INITIALIZER};

static struct CUctx_st g_primary[MAX_DEV];
static struct CUmemPoolHandle_st g_default_pool = {
    .props = {.allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
              .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}}};
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static _Thread_local struct thread_state *t_state;
static CUresult cu_err(int rc)
{
	switch (rc) {
	case 0: return CUDA_SUCCESS;
	case -ENOMEM: return CUDA_ERROR_OUT_OF_MEMORY;
	case -EINVAL:
	case -EBUSY: return CUDA_ERROR_INVALID_VALUE;
	case -EAGAIN: return CUDA_ERROR_NOT_READY;
	case -ENOTSUP: return CUDA_ERROR_NOT_SUPPORTED;
	default: return CUDA_ERROR_UNKNOWN;
	}
}

static void warn(const char *what, int rc)
{
	if (rc < 0)
		fprintf(stderr, "fakecuda: %s failed: %s\n", what, sp_last_error());
}

/* ---- handles: pointer -> kind, under g.lock ------------------------------------- */

static size_t hs_hash(uintptr_t k, size_t cap)
{
	return (size_t)(((uint64_t)k * 0x9e3779b97f4a7c15ull) >> 20) & (cap - 1);
}

static struct handle_slot *hs_slot(const void *p)
{
	uintptr_t k = (uintptr_t)p;
	if (k <= 1 || !g.hs_cap)
		return NULL;
	for (size_t j = hs_hash(k, g.hs_cap);; j = (j + 1) & (g.hs_cap - 1)) {
		if (g.hs[j].key == k)
			return &g.hs[j];
		if (g.hs[j].key == 0)
			return NULL;
	}
}

static int hs_has(const void *p, enum handle_kind kind)
{
	struct handle_slot *s = hs_slot(p);
	return s && s->kind == (int)kind;
}

static int hs_add(const void *p, enum handle_kind kind)
{
	if ((g.hs_live + g.hs_tomb + 1) * 4 >= g.hs_cap * 3) {
		size_t cap = g.hs_cap ? g.hs_cap : 64;
		while ((g.hs_live + 1) * 2 >= cap)
			cap *= 2;
		struct handle_slot *t = calloc(cap, sizeof(*t));
		if (!t)
			return -ENOMEM;
		for (size_t i = 0; i < g.hs_cap; i++) {
			if (g.hs[i].key <= 1)
				continue;
			size_t j = hs_hash(g.hs[i].key, cap);
			while (t[j].key)
				j = (j + 1) & (cap - 1);
			t[j] = g.hs[i];
		}
		free(g.hs);
		g.hs = t;
		g.hs_cap = cap;
		g.hs_tomb = 0;
	}
	uintptr_t k = (uintptr_t)p;
	size_t j = hs_hash(k, g.hs_cap);
	while (g.hs[j].key > 1)
		j = (j + 1) & (g.hs_cap - 1);
	if (g.hs[j].key == 1)
		g.hs_tomb--;
	g.hs[j] = (struct handle_slot){k, (int)kind};
	g.hs_live++;
	return 0;
}

static void hs_del(const void *p)
{
	struct handle_slot *s = hs_slot(p);
	if (s) {
		s->key = 1;
		g.hs_live--;
		g.hs_tomb++;
	}
}

/* ---- address ranges, under g.lock ----------------------------------------------- */

/* Index of the last range starting at or below p, or -1. */
static long range_floor(uintptr_t p)
{
	long lo = 0, hi = (long)g.nrg - 1, best = -1;
	while (lo <= hi) {
		long mid = (lo + hi) / 2;
		if (g.rg[mid]->start <= p) {
			best = mid;
			lo = mid + 1;
		} else {
			hi = mid - 1;
		}
	}
	return best;
}

static struct range *range_find(uintptr_t p)
{
	long i = range_floor(p);
	if (i < 0)
		return NULL;
	struct range *r = g.rg[i];
	return p - r->start < r->bytes ? r : NULL;
}

static int range_add(uintptr_t start, size_t bytes, enum range_kind kind)
{
	if (g.nrg == g.cap_rg) {
		size_t cap = g.cap_rg ? 2 * g.cap_rg : 64;
		struct range **t = realloc(g.rg, cap * sizeof(*t));
		if (!t)
			return -ENOMEM;
		g.rg = t;
		g.cap_rg = cap;
	}
	struct range *r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	*r = (struct range){.start = start, .bytes = bytes, .kind = kind};
	size_t i = (size_t)(range_floor(start) + 1);
	memmove(&g.rg[i + 1], &g.rg[i], (g.nrg - i) * sizeof(*g.rg));
	g.rg[i] = r;
	g.nrg++;
	return 0;
}

static void range_del(struct range *r)
{
	size_t i = (size_t)range_floor(r->start);
	memmove(&g.rg[i], &g.rg[i + 1], (g.nrg - i - 1) * sizeof(*g.rg));
	g.nrg--;
	free(r->maps);
	free(r);
}

/* Index of the last mapping of r starting at or below p, or -1. */
static long map_floor(const struct range *r, uintptr_t p)
{
	long lo = 0, hi = (long)r->nmaps - 1, best = -1;
	while (lo <= hi) {
		long mid = (lo + hi) / 2;
		if (r->maps[mid].start <= p) {
			best = mid;
			lo = mid + 1;
		} else {
			hi = mid - 1;
		}
	}
	return best;
}

/* 1 if every byte of [p, p+n) is mapped. */
static int map_covered(const struct range *r, uintptr_t p, size_t n)
{
	long i = map_floor(r, p);
	if (i < 0)
		return 0;
	for (uintptr_t at = p, end = p + n; at < end; i++) {
		if ((size_t)i >= r->nmaps)
			return 0;
		const struct mapping *m = &r->maps[i];
		if (m->start > at || at - m->start >= m->bytes)
			return 0;
		at = m->start + m->bytes;
	}
	return 1;
}

static const struct mapping *map_at(const struct range *r, uintptr_t p)
{
	long i = map_floor(r, p);
	if (i < 0 || p - r->maps[i].start >= r->maps[i].bytes)
		return NULL;
	return &r->maps[i];
}

enum place { P_PAGEABLE, P_PINNED, P_DEVICE, P_BAD };

/* Where [p, p+n) lies under unified addressing: device memory in an allocation or
 * the mapped part of a reservation; P_BAD when it runs past an allocation or into
 * an unmapped part; pinned in a host allocation; pageable host memory otherwise. */
static enum place place_of(uintptr_t p, size_t n)
{
	if (n > UINTPTR_MAX - p)
		return P_BAD;
	struct range *r = range_find(p);
	if (!r)
		return P_PAGEABLE;
	if (n > r->bytes - (p - r->start))
		return P_BAD;
	switch (r->kind) {
	case R_HOST: return P_PINNED;
	case R_ALLOC:
	case R_MANAGED: return P_DEVICE;
	case R_RESERVE: /* a host chunk's mapping is pinned host memory */
		return !map_covered(r, p, n) ? P_BAD : map_at(r, p)->ch->host ? P_PINNED : P_DEVICE;
	}
	return P_BAD;
}

/* Each device's capacity, under g.lock; the counters are atomics for
 * fakecu_device_*. */
static int used_take(int dev, size_t bytes)
{
	uint64_t used = __atomic_load_n(&g.used[dev], __ATOMIC_RELAXED);
	if (bytes > g.devmem || used > g.devmem - bytes)
		return 0;
	used += bytes;
	__atomic_store_n(&g.used[dev], used, __ATOMIC_RELAXED);
	if (used > __atomic_load_n(&g.peak[dev], __ATOMIC_RELAXED))
		__atomic_store_n(&g.peak[dev], used, __ATOMIC_RELAXED);
	return 1;
}

static void used_give(int dev, size_t bytes)
{
	__atomic_sub_fetch(&g.used[dev], bytes, __ATOMIC_RELAXED);
}

static _Thread_local CUcontext t_ctx[CTX_STACK_MAX];
static _Thread_local int t_nctx;

/* The device of the calling thread's current context (0 without one). */
static int cur_dev(void)
{
	return t_nctx ? t_ctx[t_nctx - 1]->dev : 0;
}

static int ctx_valid(CUcontext c)
{
	return c >= g_primary && c < g_primary + g.ndev;
}

static int dev_valid(CUdevice d)
{
	return d >= 0 && d < g.ndev;
}

/* Under g.lock: frees c once no handle and no mapping refers to it. */
static void chunk_maybe_free(struct chunk *c)
{
	if (c->refs || c->maps)
		return;
	hs_del(c);
	warn("cuMemRelease: dev_phys_destroy", dev_phys_destroy(g.dev, c->ph));
	if (!c->host)
		used_give(c->dev, c->bytes);
	free(c);
}

/* ---- initialization --------------------------------------------------------------- */

/* A size in bytes, with an optional K, M, G or T suffix (powers of 1024). */
static int parse_size(const char *s, uint64_t *out)
{
	if (*s < '0' || *s > '9')
		return -1;
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	int shift = 0;
	switch (*end) {
	case 'K': shift = 10; break;
	case 'M': shift = 20; break;
	case 'G': shift = 30; break;
	case 'T': shift = 40; break;
	}
	end += shift != 0;
	if (errno || *end || (shift && v > (UINT64_MAX >> shift)))
		return -1;
	*out = (uint64_t)v << shift;
	return 0;
}

/* A rate in bytes/s, with an optional K, M or G suffix (powers of 1000). */
static int parse_rate(const char *s, double *out)
{
	if (*s < '0' || *s > '9')
		return -1;
	char *end;
	double v = strtod(s, &end);
	switch (*end) {
	case 'K': v *= 1e3, end++; break;
	case 'M': v *= 1e6, end++; break;
	case 'G': v *= 1e9, end++; break;
	}
	if (*end || !(v >= 0))
		return -1;
	*out = v;
	return 0;
}

static void thread_exit(void *p);

/* The tables stay consistent across fork(): nobody holds the lock when it happens. */
static void fork_prepare(void)
{
	pthread_mutex_lock(&g.lock);
}

static void fork_parent(void)
{
	pthread_mutex_unlock(&g.lock);
}

static void fork_child(void)
{
	g.forked = 1;
	pthread_mutex_unlock(&g.lock);
}

static int stream_new(int blocking, struct CUstream_st **out)
{
	struct CUstream_st *s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	int rc = dev_stream_create(g.dev, 0, &s->ds);
	if (rc == 0) {
		rc = dev_event_create(g.dev, &s->tail);
		if (rc < 0)
			warn("dev_stream_destroy", dev_stream_destroy(s->ds));
	}
	if (rc < 0) {
		free(s);
		return rc;
	}
	s->blocking = blocking;
	*out = s;
	return 0;
}

static void stream_free(struct CUstream_st *s)
{
	warn("dev_stream_destroy", dev_stream_destroy(s->ds)); /* waits for its work */
	warn("dev_event_destroy", dev_event_destroy(s->tail));
	free(s);
}

static void init_once(void)
{
	const char *mem = getenv("FAKECU_DEVICE_MEM"), *bw = getenv("FAKECU_COPY_BW");
	const char *nd = getenv("FAKECU_DEVICES");
	g.ndev = nd && *nd ? atoi(nd) : 1;
	if (g.ndev < 1 || g.ndev > MAX_DEV) {
		fprintf(stderr, "fakecuda: FAKECU_DEVICES=%s is not 1 to %d\n", nd, MAX_DEV);
		g.init_rc = CUDA_ERROR_INVALID_VALUE;
		return;
	}
	for (int i = 0; i < MAX_DEV; i++)
		g_primary[i].dev = i;
	uint64_t devmem = DEFAULT_MEM;
	double rate = 0;
	if (mem && *mem && (parse_size(mem, &devmem) < 0 || devmem == 0)) {
		fprintf(stderr, "fakecuda: FAKECU_DEVICE_MEM=%s is not a size in bytes\n", mem);
		g.init_rc = CUDA_ERROR_INVALID_VALUE;
		return;
	}
	if (bw && *bw && parse_rate(bw, &rate) < 0) {
		fprintf(stderr, "fakecuda: FAKECU_COPY_BW=%s is not a rate in bytes/s\n", bw);
		g.init_rc = CUDA_ERROR_INVALID_VALUE;
		return;
	}
	/* Host-located chunks come from the same device file (so they map into any
	 * reservation); the device's own limit is enforced here, not by device.c. */
	uint64_t cap = devmem * (uint64_t)g.ndev + HOST_CHUNK_ROOM;
	double link = rate > 0 ? rate : DEFAULT_BW;
	char prof[1024];
	snprintf(prof, sizeof(prof),
	         "name = fakecu\ndevice = " DEVICE_NAME "\ndevices = 1\nmemory = %llu\n"
	         "flops = 60 TFLOP/s\nmem_bw = 3000 GB/s\nh2d = %.0f B/s\nd2h = %.0f B/s\n"
	         "host_link = %.0f B/s\np2p = %.0f B/s\ndisk = 2 GB/s\n",
	         (unsigned long long)cap, link, link, link, link);
	struct dev_config cfg = {.backend = DEV_BACKEND_HOST,
	                         .ndevices = 1,
	                         .device_mem = cap,
	                         .profile_text = prof,
	                         .link_throttle = rate > 0};
	struct dev_info info;
	int rc = dev_open(&cfg, &g.dev);
	if (rc == 0)
		rc = dev_info(g.dev, 0, &info);
	if (rc == 0) {
		g.devmem = devmem;
		g.gran = info.granularity;
		rc = stream_new(1, &g.legacy);
	}
	if (rc == 0) {
		g.legacy->legacy = 1;
		rc = dev_event_create(g.dev, &g.legacy_ev);
	}
	if (rc == 0)
		rc = -pthread_key_create(&g.key, thread_exit);
	if (rc == 0)
		rc = -pthread_atfork(fork_prepare, fork_parent, fork_child);
	if (rc < 0) {
		fprintf(stderr, "fakecuda: cannot open the host backend: %s\n", sp_last_error());
		g.init_rc = CUDA_ERROR_NOT_INITIALIZED;
	}
}

/* cuInit is implied: every call that needs the device opens it. */
static CUresult init(void)
{
	pthread_once(&g_once, init_once);
	return g.init_rc;
}

#define NEED_INIT()                              \
	do {                                     \
		CUresult need_init_rc_ = init(); \
		if (need_init_rc_)               \
			return need_init_rc_;    \
	} while (0)

static struct thread_state *thread_state(void)
{
	struct thread_state *ts = t_state;
	if (ts)
		return ts;
	ts = calloc(1, sizeof(*ts));
	if (!ts)
		return NULL;
	if (dev_event_create(g.dev, &ts->sync_ev) < 0) {
		free(ts);
		return NULL;
	}
	pthread_setspecific(g.key, ts);
	t_state = ts;
	return ts;
}

static void stream_unlink(struct CUstream_st *s)
{
	if (s->prev)
		s->prev->next = s->next;
	else
		g.streams = s->next;
	if (s->next)
		s->next->prev = s->prev;
}

static void stream_link(struct CUstream_st *s)
{
	s->prev = NULL;
	s->next = g.streams;
	if (s->next)
		s->next->prev = s;
	g.streams = s;
}

static void thread_exit(void *p)
{
	struct thread_state *ts = p;
	if (ts->ptds) {
		pthread_mutex_lock(&g.lock);
		stream_unlink(ts->ptds);
		pthread_mutex_unlock(&g.lock);
		stream_free(ts->ptds);
	}
	warn("dev_event_destroy", dev_event_destroy(ts->sync_ev));
	free(ts);
	t_state = NULL;
}

/* ---- streams: resolving handles, legacy ordering, queueing ------------------------ */

/* Under g.lock. A child of fork() has none of the parent's worker threads, so
 * (as tests fork to watch a kernel fault) every stream gets new ones; the old are
 * left behind, and no work queued before the fork is waited for. Forking while
 * device work runs is unsupported, as with CUDA. */
static int after_fork(void)
{
	if (!g.forked)
		return 0;
	int rc = dev_event_create(g.dev, &g.legacy_ev);
	for (struct CUstream_st *s = g.legacy; s && rc == 0;
	     s = s == g.legacy ? g.streams : s->next) {
		rc = dev_stream_create(g.dev, 0, &s->ds);
		if (rc == 0)
			rc = dev_event_create(g.dev, &s->tail);
		s->dirty = 0;
		s->seen = g.legacy_gen;
	}
	if (rc == 0)
		g.forked = 0;
	return rc;
}

/* Under g.lock. NULL is the legacy stream, or the thread's own one for the
 * per-thread-default-stream (_ptds/_ptsz) entry points. */
static CUresult stream_resolve(CUstream h, int ptds, struct thread_state *ts,
                               struct CUstream_st **out)
{
	if (h == CU_STREAM_LEGACY || (!h && !ptds)) {
		*out = g.legacy;
		return CUDA_SUCCESS;
	}
	if (h == CU_STREAM_PER_THREAD || !h) {
		if (!ts->ptds) {
			struct CUstream_st *s;
			int rc = stream_new(1, &s);
			if (rc < 0)
				return cu_err(rc);
			stream_link(s);
			ts->ptds = s;
		}
		*out = ts->ptds;
		return CUDA_SUCCESS;
	}
	if (!hs_has(h, H_STREAM))
		return CUDA_ERROR_INVALID_HANDLE;
	*out = h;
	return CUDA_SUCCESS;
}

/* Under g.lock, before an op on s: an op on the legacy stream waits for the work
 * queued so far on every blocking stream; an op on a blocking stream waits for
 * the legacy stream's work queued so far. */
static int order_before(struct CUstream_st *s)
{
	if (s->legacy) {
		for (struct CUstream_st *b = g.streams; b; b = b->next) {
			if (!b->blocking || !b->dirty)
				continue;
			int rc = dev_event_record(b->tail, b->ds);
			if (rc == 0)
				rc = dev_stream_wait_event(s->ds, b->tail);
			if (rc < 0)
				return rc;
			b->dirty = 0;
		}
	} else if (s->blocking && s->seen != g.legacy_gen) {
		int rc = dev_stream_wait_event(s->ds, g.legacy_ev);
		if (rc < 0)
			return rc;
		s->seen = g.legacy_gen;
	}
	return 0;
}

static int order_after(struct CUstream_st *s)
{
	if (s->legacy) {
		int rc = dev_event_record(g.legacy_ev, s->ds);
		if (rc < 0)
			return rc;
		g.legacy_gen++;
	} else if (s->blocking) {
		s->dirty = 1;
	}
	return 0;
}

enum op_kind { OP_COPY, OP_SET, OP_KERNEL, OP_HOSTFN, OP_RECORD, OP_WAIT };

struct op {
	enum op_kind kind;
	void *dst;
	const void *src;
	size_t bytes;
	int dst_dev, src_dev, value;
	const struct dev_kernel *k;
	const void *args;
	size_t args_size;
	void (*fn)(void *);
	void *arg;
	struct dev_event *ev;
};

static int op_queue(struct dev_stream *ds, const struct op *op)
{
	switch (op->kind) {
	case OP_COPY:
		return dev_memcpy_async(ds, op->dst, op->dst_dev, op->src, op->src_dev, op->bytes);
	case OP_SET: return dev_memset_async(ds, op->dst, op->dst_dev, op->value, op->bytes);
	case OP_KERNEL:
		return dev_launch(ds, op->k, op->args, op->args_size, (struct dev_cost){0, 0, 0});
	case OP_HOSTFN: return dev_host_callback(ds, op->fn, op->arg);
	case OP_RECORD: return dev_event_record(op->ev, ds);
	case OP_WAIT: return dev_stream_wait_event(ds, op->ev);
	}
	return -EINVAL;
}

/* Under g.lock: queues op on s in legacy-stream order. */
static int queue_locked(struct CUstream_st *s, const struct op *op)
{
	int e = order_before(s);
	if (e == 0)
		e = op_queue(s->ds, op);
	if (e == 0)
		e = order_after(s);
	return e;
}

/* Queues op on stream h in legacy-stream order; with wait, returns once it is done. */
static CUresult submit(CUstream h, int ptds, const struct op *op, int wait)
{
	int need_ts = wait || h == CU_STREAM_PER_THREAD || (!h && ptds);
	struct thread_state *ts = need_ts ? thread_state() : NULL;
	if (need_ts && !ts)
		return CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_lock(&g.lock);
	struct CUstream_st *s = NULL;
	CUresult rc = cu_err(after_fork());
	if (rc == CUDA_SUCCESS)
		rc = stream_resolve(h, ptds, ts, &s);
	if (rc == CUDA_SUCCESS) {
		int e = queue_locked(s, op);
		if (e == 0 && wait)
			e = dev_event_record(ts->sync_ev, s->ds);
		rc = cu_err(e);
	}
	pthread_mutex_unlock(&g.lock);
	if (rc == CUDA_SUCCESS && wait)
		rc = cu_err(dev_event_sync(ts->sync_ev));
	return rc;
}

/* Waits for (or, with query, polls) the work queued on h before the call. */
static CUresult stream_wait(CUstream h, int ptds, int query)
{
	NEED_INIT();
	struct thread_state *ts = thread_state();
	if (!ts)
		return CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_lock(&g.lock);
	struct CUstream_st *s = NULL;
	CUresult rc = cu_err(after_fork());
	if (rc == CUDA_SUCCESS)
		rc = stream_resolve(h, ptds, ts, &s);
	if (rc == CUDA_SUCCESS)
		rc = cu_err(dev_event_record(ts->sync_ev, s->ds));
	pthread_mutex_unlock(&g.lock);
	if (rc)
		return rc;
	return cu_err(query ? dev_event_query(ts->sync_ev) : dev_event_sync(ts->sync_ev));
}

/* Waits for the work queued on every stream before the call (cuCtxSynchronize,
 * and the frees and unmaps that the driver makes synchronous). */
static CUresult ctx_sync(void)
{
	pthread_mutex_lock(&g.lock);
	size_t n = 1;
	for (struct CUstream_st *s = g.streams; s; s = s->next)
		n++;
	struct dev_event **ev = calloc(n, sizeof(*ev));
	int rc = ev ? after_fork() : -ENOMEM;
	struct CUstream_st *s = g.legacy;
	for (size_t i = 0; i < n && rc == 0; i++) {
		rc = dev_event_create(g.dev, &ev[i]);
		if (rc == 0)
			rc = dev_event_record(ev[i], s->ds);
		s = i == 0 ? g.streams : s->next;
	}
	pthread_mutex_unlock(&g.lock);
	for (size_t i = 0; ev && i < n && ev[i]; i++) {
		if (rc == 0)
			rc = dev_event_sync(ev[i]);
		warn("dev_event_destroy", dev_event_destroy(ev[i]));
	}
	free(ev);
	return cu_err(rc);
}

/* Internal kernels: host-to-host copies (the device layer copies only to or from
 * a device) and 16- or 32-bit fills. */
struct h2h_args {
	void *dst;
	const void *src;
	size_t bytes;
};

static void h2h_run(const void *a)
{
	const struct h2h_args *x = a;
	memmove(x->dst, x->src, x->bytes);
}

struct fill_args {
	void *dst;
	size_t count, elem;
	uint32_t value;
};

static void fill_run(const void *a)
{
	const struct fill_args *x = a;
	for (size_t i = 0; i < x->count; i++) {
		if (x->elem == 2)
			((uint16_t *)x->dst)[i] = (uint16_t)x->value;
		else
			((uint32_t *)x->dst)[i] = x->value;
	}
}

static const struct dev_kernel k_h2h = {"fakecu h2h copy", h2h_run, NULL};
static const struct dev_kernel k_fill = {"fakecu fill", fill_run, NULL};

/* ---- init, devices, contexts ------------------------------------------------------ */

EXPORT CUresult cuInit(unsigned int Flags)
{
	return Flags ? CUDA_ERROR_INVALID_VALUE : init();
}

EXPORT CUresult cuDriverGetVersion(int *driverVersion)
{
	if (!driverVersion)
		return CUDA_ERROR_INVALID_VALUE;
	*driverVersion = DRIVER_VERSION;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
	NEED_INIT();
	if (!device)
		return CUDA_ERROR_INVALID_VALUE;
	if (!dev_valid(ordinal))
		return CUDA_ERROR_INVALID_DEVICE;
	*device = ordinal;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetCount(int *count)
{
	NEED_INIT();
	if (!count)
		return CUDA_ERROR_INVALID_VALUE;
	*count = g.ndev;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
	NEED_INIT();
	if (!name || len <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	if (!dev_valid(dev))
		return CUDA_ERROR_INVALID_DEVICE;
	snprintf(name, (size_t)len, "%s", DEVICE_NAME);
	return CUDA_SUCCESS;
}

static CUresult total_mem(size_t *bytes, CUdevice dev)
{
	NEED_INIT();
	if (!bytes)
		return CUDA_ERROR_INVALID_VALUE;
	if (!dev_valid(dev))
		return CUDA_ERROR_INVALID_DEVICE;
	*bytes = g.devmem;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
	return total_mem(bytes, dev);
}

EXPORT CUresult cuDeviceTotalMem(unsigned int *bytes, CUdevice dev)
{
	size_t b;
	CUresult rc = bytes ? total_mem(&b, dev) : CUDA_ERROR_INVALID_VALUE;
	if (rc == CUDA_SUCCESS)
		*bytes = b > UINT32_MAX ? UINT32_MAX : (unsigned int)b;
	return rc;
}

/* An H100-like device; attributes not listed are 0. */
static int attribute(CUdevice_attribute a)
{
	switch (a) {
	case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: return MAX_BLOCK_THREAD;
	case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X:
	case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: return 1024;
	case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: return 64;
	case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: return INT32_MAX;
	case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y:
	case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: return 65535;
	case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: return 48 << 10;
	case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY: return 64 << 10;
	case CU_DEVICE_ATTRIBUTE_WARP_SIZE: return 32;
	case CU_DEVICE_ATTRIBUTE_MAX_PITCH: return INT32_MAX;
	case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK:
	case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR: return 65536;
	case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: return 1755000;
	case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: return 2619000;
	case CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT:
	case CU_DEVICE_ATTRIBUTE_SURFACE_ALIGNMENT: return 512;
	case CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT: return 32;
	case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: return 132;
	case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: return 5120;
	case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: return 50 << 20;
	case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: return 2048;
	case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT: return 2;
	case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: return 9;
	case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: return 0;
	case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: return 228 << 10;
	case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: return 227 << 10;
	case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR: return 32;
	case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: return 1;
	case CU_DEVICE_ATTRIBUTE_GPU_OVERLAP:
	case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY:
	case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS:
	case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING:
	case CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED:
	case CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED:
	case CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED:
	case CU_DEVICE_ATTRIBUTE_COMPUTE_PREEMPTION_SUPPORTED:
	case CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH:
	case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
	case CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
	case CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: return 1;
	default: return 0;
	}
}

EXPORT CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
	NEED_INIT();
	if (!pi || (int)attrib <= 0 || attrib >= CU_DEVICE_ATTRIBUTE_MAX)
		return CUDA_ERROR_INVALID_VALUE;
	if (!dev_valid(dev))
		return CUDA_ERROR_INVALID_DEVICE;
	*pi = attribute(attrib);
	return CUDA_SUCCESS;
}

EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
	NEED_INIT();
	if (!pctx)
		return CUDA_ERROR_INVALID_VALUE;
	if (!dev_valid(dev))
		return CUDA_ERROR_INVALID_DEVICE;
	pthread_mutex_lock(&g.lock);
	g.primary_refs++;
	pthread_mutex_unlock(&g.lock);
	*pctx = &g_primary[dev];
	return CUDA_SUCCESS;
}

/* The primary context lives as long as the process: releasing only counts. */
static CUresult primary_release(CUdevice dev)
{
	NEED_INIT();
	if (!dev_valid(dev))
		return CUDA_ERROR_INVALID_DEVICE;
	pthread_mutex_lock(&g.lock);
	if (g.primary_refs > 0)
		g.primary_refs--;
	pthread_mutex_unlock(&g.lock);
	return CUDA_SUCCESS;
}

EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
	return primary_release(dev);
}

EXPORT CUresult cuDevicePrimaryCtxRelease(CUdevice dev)
{
	return primary_release(dev);
}

EXPORT CUresult cuCtxGetCurrent(CUcontext *pctx)
{
	NEED_INIT();
	if (!pctx)
		return CUDA_ERROR_INVALID_VALUE;
	*pctx = t_nctx ? t_ctx[t_nctx - 1] : NULL;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxSetCurrent(CUcontext ctx)
{
	NEED_INIT();
	if (!ctx) {
		if (t_nctx)
			t_nctx--;
		return CUDA_SUCCESS;
	}
	if (!ctx_valid(ctx))
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!t_nctx)
		t_nctx = 1;
	t_ctx[t_nctx - 1] = ctx;
	return CUDA_SUCCESS;
}

static CUresult ctx_push(CUcontext ctx)
{
	NEED_INIT();
	if (!ctx_valid(ctx))
		return CUDA_ERROR_INVALID_CONTEXT;
	if (t_nctx == CTX_STACK_MAX)
		return CUDA_ERROR_OUT_OF_MEMORY;
	t_ctx[t_nctx++] = ctx;
	return CUDA_SUCCESS;
}

static CUresult ctx_pop(CUcontext *pctx)
{
	NEED_INIT();
	if (!t_nctx)
		return CUDA_ERROR_INVALID_CONTEXT;
	CUcontext c = t_ctx[--t_nctx];
	if (pctx)
		*pctx = c;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxPushCurrent_v2(CUcontext ctx)
{
	return ctx_push(ctx);
}

EXPORT CUresult cuCtxPushCurrent(CUcontext ctx)
{
	return ctx_push(ctx);
}

EXPORT CUresult cuCtxPopCurrent_v2(CUcontext *pctx)
{
	return ctx_pop(pctx);
}

EXPORT CUresult cuCtxPopCurrent(CUcontext *pctx)
{
	return ctx_pop(pctx);
}

EXPORT CUresult cuCtxGetDevice(CUdevice *device)
{
	NEED_INIT();
	if (!device)
		return CUDA_ERROR_INVALID_VALUE;
	*device = cur_dev();
	return CUDA_SUCCESS;
}

/* Every device reaches every other (one host backend): enabling only records it. */
EXPORT CUresult cuDeviceCanAccessPeer(int *can, CUdevice dev, CUdevice peer)
{
	NEED_INIT();
	if (!can)
		return CUDA_ERROR_INVALID_VALUE;
	if (!dev_valid(dev) || !dev_valid(peer))
		return CUDA_ERROR_INVALID_DEVICE;
	*can = dev != peer;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxEnablePeerAccess(CUcontext peer, unsigned int flags)
{
	NEED_INIT();
	if (flags)
		return CUDA_ERROR_INVALID_VALUE;
	if (!t_nctx)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!ctx_valid(peer) || peer == t_ctx[t_nctx - 1])
		return CUDA_ERROR_INVALID_DEVICE;
	CUcontext c = t_ctx[t_nctx - 1];
	unsigned bit = 1u << peer->dev;
	if (__atomic_fetch_or(&c->peers, bit, __ATOMIC_RELAXED) & bit)
		return CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxSynchronize(void)
{
	CUresult rc = init();
	return rc ? rc : ctx_sync();
}

/* ---- errors ----------------------------------------------------------------------- */

#define ERRORS(X)                                                                        \
	X(CUDA_SUCCESS, "no error")                                                      \
	X(CUDA_ERROR_INVALID_VALUE, "invalid argument")                                  \
	X(CUDA_ERROR_OUT_OF_MEMORY, "out of memory")                                     \
	X(CUDA_ERROR_NOT_INITIALIZED, "initialization error")                            \
	X(CUDA_ERROR_DEINITIALIZED, "driver shutting down")                              \
	X(CUDA_ERROR_NO_DEVICE, "no CUDA-capable device is detected")                    \
	X(CUDA_ERROR_INVALID_DEVICE, "invalid device ordinal")                           \
	X(CUDA_ERROR_INVALID_IMAGE, "device kernel image is invalid")                    \
	X(CUDA_ERROR_INVALID_CONTEXT, "invalid device context")                          \
	X(CUDA_ERROR_ALREADY_MAPPED, "resource already mapped")                          \
	X(CUDA_ERROR_NOT_MAPPED, "resource not mapped")                                  \
	X(CUDA_ERROR_INVALID_HANDLE, "invalid resource handle")                          \
	X(CUDA_ERROR_NOT_FOUND, "named symbol not found")                                \
	X(CUDA_ERROR_NOT_READY, "device not ready")                                      \
	X(CUDA_ERROR_ILLEGAL_ADDRESS, "an illegal memory access was encountered")        \
	X(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "too many resources requested for launch") \
	X(CUDA_ERROR_LAUNCH_FAILED, "unspecified launch failure")                        \
	X(CUDA_ERROR_NOT_PERMITTED, "operation not permitted")                           \
	X(CUDA_ERROR_NOT_SUPPORTED, "operation not supported")                           \
	X(CUDA_ERROR_UNKNOWN, "unknown error")

EXPORT CUresult cuGetErrorString(CUresult error, const char **pStr)
{
	if (!pStr)
		return CUDA_ERROR_INVALID_VALUE;
	switch (error) {
#define X(code, text) \
	case code: *pStr = text; return CUDA_SUCCESS;
		ERRORS(X)
#undef X
	default: *pStr = NULL; return CUDA_ERROR_INVALID_VALUE;
	}
}

EXPORT CUresult cuGetErrorName(CUresult error, const char **pStr)
{
	if (!pStr)
		return CUDA_ERROR_INVALID_VALUE;
	switch (error) {
#define X(code, text) \
	case code: *pStr = #code; return CUDA_SUCCESS;
		ERRORS(X)
#undef X
	default: *pStr = NULL; return CUDA_ERROR_INVALID_VALUE;
	}
}

/* ---- memory ------------------------------------------------------------------------ */

static CUresult mem_alloc(CUdeviceptr *dptr, size_t bytes)
{
	NEED_INIT();
	if (!dptr || !bytes)
		return CUDA_ERROR_INVALID_VALUE;
	void *p = NULL;
	int dev = cur_dev();
	pthread_mutex_lock(&g.lock);
	int e = used_take(dev, bytes) ? 0 : -ENOMEM;
	if (e == 0) {
		e = dev_mem_alloc(g.dev, 0, bytes, &p);
		if (e == 0 && (e = range_add((uintptr_t)p, bytes, R_ALLOC)) < 0)
			warn("dev_mem_free", dev_mem_free(g.dev, 0, p));
		if (e < 0)
			used_give(dev, bytes);
		else
			range_find((uintptr_t)p)->dev = dev;
	}
	pthread_mutex_unlock(&g.lock);
	if (e == 0)
		*dptr = (CUdeviceptr)(uintptr_t)p;
	return cu_err(e);
}

/* The driver frees only after the device is idle, so queued work never touches
 * freed memory. */
static CUresult mem_free(CUdeviceptr dptr, enum range_kind kind)
{
	NEED_INIT();
	CUresult rc = ctx_sync();
	if (rc)
		return rc;
	pthread_mutex_lock(&g.lock);
	struct range *r = range_find((uintptr_t)dptr);
	int e = -EINVAL;
	int managed = r && kind == R_ALLOC && r->kind == R_MANAGED; /* cuMemFree frees it too */
	if (r && (r->kind == kind || managed) && r->start == (uintptr_t)dptr && !r->pool_freed) {
		size_t bytes = r->bytes;
		e = kind == R_ALLOC ? dev_mem_free(g.dev, 0, (void *)r->start)
		                    : dev_host_free(g.dev, (void *)r->start);
		if (e == 0) {
			int dev = r->dev;
			range_del(r);
			if (kind == R_ALLOC && !managed)
				used_give(dev, bytes);
		}
	}
	pthread_mutex_unlock(&g.lock);
	return cu_err(e);
}

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
	return mem_alloc(dptr, bytesize);
}

/* Device memory of the backend, not counted against the device: the driver
 * oversubscribes managed memory, migrating pages as they are touched. */
EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
	NEED_INIT();
	if (!dptr || !bytesize || (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST))
		return CUDA_ERROR_INVALID_VALUE;
	void *p = NULL;
	pthread_mutex_lock(&g.lock);
	int e = dev_mem_alloc(g.dev, 0, bytesize, &p);
	if (e == 0 && (e = range_add((uintptr_t)p, bytesize, R_MANAGED)) < 0)
		warn("dev_mem_free", dev_mem_free(g.dev, 0, p));
	pthread_mutex_unlock(&g.lock);
	if (e == 0)
		*dptr = (CUdeviceptr)(uintptr_t)p;
	return cu_err(e);
}

/* Checks the range is managed and queues nothing (the pages are where every
 * kernel reaches them); counts the bytes sent to device dev (-1: the host). */
static CUresult prefetch(CUdeviceptr p, size_t count, int dev, CUstream h, int ptds)
{
	NEED_INIT();
	struct thread_state *ts = thread_state();
	if (!ts)
		return CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_lock(&g.lock);
	struct range *r = range_find((uintptr_t)p);
	struct CUstream_st *s = NULL;
	CUresult rc = r && r->kind == R_MANAGED && count && count <= r->bytes - (p - r->start)
	                  ? stream_resolve(h, ptds, ts, &s)
	                  : CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_unlock(&g.lock);
	if (rc == CUDA_SUCCESS && dev >= 0) {
		__atomic_add_fetch(&g.prefetched, count, __ATOMIC_RELAXED);
		__atomic_add_fetch(&g.prefetched_on[dev], count, __ATOMIC_RELAXED);
	}
	return rc;
}

/* The device of loc, -1 for the host, -2 for neither. */
static int prefetch_target(CUmemLocation loc)
{
	return loc.type == CU_MEM_LOCATION_TYPE_DEVICE && dev_valid(loc.id) ? loc.id
	       : loc.type == CU_MEM_LOCATION_TYPE_HOST                      ? -1
	                                                                    : -2;
}

EXPORT CUresult cuMemPrefetchAsync(CUdeviceptr devPtr, size_t count, CUdevice dstDevice,
                                   CUstream hStream)
{
	if (dstDevice != 0 && dstDevice != CU_DEVICE_CPU)
		return CUDA_ERROR_INVALID_DEVICE;
	return prefetch(devPtr, count, dstDevice == 0 ? 0 : -1, hStream, 0);
}

EXPORT CUresult cuMemPrefetchAsync_ptsz(CUdeviceptr devPtr, size_t count, CUdevice dstDevice,
                                        CUstream hStream)
{
	if (dstDevice != 0 && dstDevice != CU_DEVICE_CPU)
		return CUDA_ERROR_INVALID_DEVICE;
	return prefetch(devPtr, count, dstDevice == 0 ? 0 : -1, hStream, 1);
}

EXPORT CUresult cuMemPrefetchAsync_v2(CUdeviceptr devPtr, size_t count, CUmemLocation location,
                                      unsigned int flags, CUstream hStream)
{
	int t = prefetch_target(location);
	if (t < -1 || flags)
		return CUDA_ERROR_INVALID_VALUE;
	return prefetch(devPtr, count, t, hStream, 0);
}

EXPORT CUresult cuMemPrefetchAsync_v2_ptsz(CUdeviceptr devPtr, size_t count, CUmemLocation location,
                                           unsigned int flags, CUstream hStream)
{
	int t = prefetch_target(location);
	if (t < -1 || flags)
		return CUDA_ERROR_INVALID_VALUE;
	return prefetch(devPtr, count, t, hStream, 1);
}

/* The 32-bit API: the host backend's addresses rarely fit, then it is out of memory. */
EXPORT CUresult cuMemAlloc(unsigned int *dptr, unsigned int bytesize)
{
	if (!dptr)
		return CUDA_ERROR_INVALID_VALUE;
	CUdeviceptr d;
	CUresult rc = mem_alloc(&d, bytesize);
	if (rc == CUDA_SUCCESS && d > UINT32_MAX) {
		mem_free(d, R_ALLOC);
		rc = CUDA_ERROR_OUT_OF_MEMORY;
	}
	if (rc == CUDA_SUCCESS)
		*dptr = (unsigned int)d;
	return rc;
}

static CUresult mem_alloc_pitch(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height,
                                unsigned int elem)
{
	if (!dptr || !pitch || !width || !height || (elem != 4 && elem != 8 && elem != 16))
		return CUDA_ERROR_INVALID_VALUE;
	size_t p = (width + PITCH_ALIGN - 1) / PITCH_ALIGN * PITCH_ALIGN;
	if (p < width || height > SIZE_MAX / p)
		return CUDA_ERROR_OUT_OF_MEMORY;
	CUresult rc = mem_alloc(dptr, p * height);
	if (rc == CUDA_SUCCESS)
		*pitch = p;
	return rc;
}

EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes,
                                   size_t Height, unsigned int ElementSizeBytes)
{
	return mem_alloc_pitch(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
}

EXPORT CUresult cuMemAllocPitch(unsigned int *dptr, unsigned int *pPitch, unsigned int WidthInBytes,
                                unsigned int Height, unsigned int ElementSizeBytes)
{
	if (!dptr || !pPitch)
		return CUDA_ERROR_INVALID_VALUE;
	CUdeviceptr d;
	size_t p;
	CUresult rc = mem_alloc_pitch(&d, &p, WidthInBytes, Height, ElementSizeBytes);
	if (rc == CUDA_SUCCESS && (d > UINT32_MAX || p > UINT32_MAX)) {
		mem_free(d, R_ALLOC);
		rc = CUDA_ERROR_OUT_OF_MEMORY;
	}
	if (rc == CUDA_SUCCESS) {
		*dptr = (unsigned int)d;
		*pPitch = (unsigned int)p;
	}
	return rc;
}

EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr)
{
	return mem_free(dptr, R_ALLOC);
}

EXPORT CUresult cuMemFree(unsigned int dptr)
{
	return mem_free(dptr, R_ALLOC);
}

static CUresult mem_info(size_t *free_bytes, size_t *total)
{
	NEED_INIT();
	if (!free_bytes || !total)
		return CUDA_ERROR_INVALID_VALUE;
	*total = g.devmem;
	*free_bytes = g.devmem - __atomic_load_n(&g.used[cur_dev()], __ATOMIC_RELAXED);
	return CUDA_SUCCESS;
}

EXPORT CUresult cuMemGetInfo_v2(size_t *free, size_t *total)
{
	return mem_info(free, total);
}

EXPORT CUresult cuMemGetInfo(unsigned int *free, unsigned int *total)
{
	if (!free || !total)
		return CUDA_ERROR_INVALID_VALUE;
	size_t f, t;
	CUresult rc = mem_info(&f, &t);
	if (rc == CUDA_SUCCESS) {
		*free = f > UINT32_MAX ? UINT32_MAX : (unsigned int)f;
		*total = t > UINT32_MAX ? UINT32_MAX : (unsigned int)t;
	}
	return rc;
}

/* The allocation holding dptr; for a reservation, the mapping holding it. */
static CUresult address_range(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
	NEED_INIT();
	pthread_mutex_lock(&g.lock);
	struct range *r = range_find((uintptr_t)dptr);
	uintptr_t base = 0;
	size_t size = 0;
	if (r && r->kind != R_RESERVE) {
		base = r->start;
		size = r->bytes;
	} else if (r) {
		const struct mapping *m = map_at(r, (uintptr_t)dptr);
		if (m) {
			base = m->start;
			size = m->bytes;
		}
	}
	pthread_mutex_unlock(&g.lock);
	if (!size)
		return CUDA_ERROR_NOT_FOUND;
	if (pbase)
		*pbase = base;
	if (psize)
		*psize = size;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
	return address_range(pbase, psize, dptr);
}

EXPORT CUresult cuMemGetAddressRange(unsigned int *pbase, unsigned int *psize, unsigned int dptr)
{
	CUdeviceptr b;
	size_t s;
	CUresult rc = address_range(&b, &s, dptr);
	if (rc == CUDA_SUCCESS && (b > UINT32_MAX || s > UINT32_MAX))
		rc = CUDA_ERROR_INVALID_VALUE;
	if (rc == CUDA_SUCCESS && pbase)
		*pbase = (unsigned int)b;
	if (rc == CUDA_SUCCESS && psize)
		*psize = (unsigned int)s;
	return rc;
}

static CUresult host_alloc(void **pp, size_t bytes)
{
	NEED_INIT();
	if (!pp || !bytes)
		return CUDA_ERROR_INVALID_VALUE;
	void *p = NULL;
	pthread_mutex_lock(&g.lock);
	int e = dev_host_alloc(g.dev, bytes, &p);
	if (e == 0 && (e = range_add((uintptr_t)p, bytes, R_HOST)) < 0)
		warn("dev_host_free", dev_host_free(g.dev, p));
	pthread_mutex_unlock(&g.lock);
	if (e == 0)
		*pp = p;
	return cu_err(e);
}

EXPORT CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
	if (Flags & ~(unsigned)(CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP |
	                        CU_MEMHOSTALLOC_WRITECOMBINED))
		return CUDA_ERROR_INVALID_VALUE;
	return host_alloc(pp, bytesize);
}

EXPORT CUresult cuMemAllocHost_v2(void **pp, size_t bytesize)
{
	return host_alloc(pp, bytesize);
}

EXPORT CUresult cuMemAllocHost(void **pp, unsigned int bytesize)
{
	return host_alloc(pp, bytesize);
}

EXPORT CUresult cuMemFreeHost(void *p)
{
	return mem_free((CUdeviceptr)(uintptr_t)p, R_HOST);
}

/* Unified addressing: the device sees pinned host memory at its host address. */
static CUresult host_dev_ptr(CUdeviceptr *pdptr, void *p, unsigned int Flags)
{
	NEED_INIT();
	if (!pdptr || !p || Flags)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&g.lock);
	struct range *r = range_find((uintptr_t)p);
	int ok = r && r->kind == R_HOST;
	pthread_mutex_unlock(&g.lock);
	if (!ok)
		return CUDA_ERROR_INVALID_VALUE;
	*pdptr = (CUdeviceptr)(uintptr_t)p;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *pdptr, void *p, unsigned int Flags)
{
	return host_dev_ptr(pdptr, p, Flags);
}

EXPORT CUresult cuMemHostGetDevicePointer(unsigned int *pdptr, void *p, unsigned int Flags)
{
	CUdeviceptr d;
	CUresult rc = pdptr ? host_dev_ptr(&d, p, Flags) : CUDA_ERROR_INVALID_VALUE;
	if (rc == CUDA_SUCCESS && d > UINT32_MAX)
		rc = CUDA_ERROR_INVALID_VALUE;
	if (rc == CUDA_SUCCESS)
		*pdptr = (unsigned int)d;
	return rc;
}

EXPORT CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr)
{
	NEED_INIT();
	if (!data || !ptr)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&g.lock);
	struct range *r = range_find((uintptr_t)ptr);
	struct range v = r ? *r : (struct range){0};
	int mapped = r && (r->kind != R_RESERVE || map_covered(r, (uintptr_t)ptr, 1));
	pthread_mutex_unlock(&g.lock);
	if (!r)
		return CUDA_ERROR_INVALID_VALUE;
	int device = v.kind != R_HOST;
	switch (attribute) {
	case CU_POINTER_ATTRIBUTE_CONTEXT:
		if (!mapped)
			return CUDA_ERROR_INVALID_VALUE;
		*(CUcontext *)data = &g_primary[v.kind == R_ALLOC ? v.dev : 0];
		break;
	case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
		if (!mapped)
			return CUDA_ERROR_INVALID_VALUE;
		*(unsigned int *)data = device ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
		break;
	case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
		if (!mapped)
			return CUDA_ERROR_INVALID_VALUE;
		*(CUdeviceptr *)data = ptr;
		break;
	case CU_POINTER_ATTRIBUTE_HOST_POINTER:
		if (device)
			return CUDA_ERROR_INVALID_VALUE;
		*(void **)data = (void *)(uintptr_t)ptr;
		break;
	case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *(int *)data = 0; break;
	case CU_POINTER_ATTRIBUTE_IS_MANAGED: *(int *)data = v.kind == R_MANAGED; break;
	case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
		*(int *)data = v.kind == R_ALLOC;
		break;
	case CU_POINTER_ATTRIBUTE_MAPPED: *(int *)data = mapped; break;
	case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: *(CUdeviceptr *)data = v.start; break;
	case CU_POINTER_ATTRIBUTE_RANGE_SIZE: *(size_t *)data = v.bytes; break;
	default: return CUDA_ERROR_NOT_SUPPORTED;
	}
	return CUDA_SUCCESS;
}

/* What the handle holds: enough to recognize it, nothing another process can open. */
struct ipc_handle {
	char magic[8];
	uint64_t base, bytes;
	int32_t pid;
};

EXPORT CUresult cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr dptr)
{
	_Static_assert(sizeof(struct ipc_handle) <= sizeof(CUipcMemHandle), "IPC handle size");
	NEED_INIT();
	if (!pHandle)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&g.lock);
	struct range *r = range_find((uintptr_t)dptr);
	struct ipc_handle h = {"fakecu", 0, 0, (int32_t)getpid()};
	if (r && r->kind == R_ALLOC) { /* VMM memory is not legacy-IPC capable */
		h.base = r->start;
		h.bytes = r->bytes;
	}
	pthread_mutex_unlock(&g.lock);
	if (!h.bytes)
		return CUDA_ERROR_INVALID_VALUE;
	memset(pHandle, 0, sizeof(*pHandle));
	memcpy(pHandle, &h, sizeof(h));
	return CUDA_SUCCESS;
}

/* ---- copies and sets ----------------------------------------------------------------- */

enum {
	C_SYNC = 1,    /* returns once done */
	C_DST_DEV = 2, /* the destination must be device memory */
	C_SRC_DEV = 4,
	C_PTDS = 8, /* NULL is the per-thread default stream */
};

/* Pageable host memory is copied synchronously, as the driver may: the caller is
 * free to reuse it once the call returns. */
static CUresult copy(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream h, unsigned how)
{
	NEED_INIT();
	if (!dst || !src)
		return CUDA_ERROR_INVALID_VALUE;
	if (!bytes)
		return CUDA_SUCCESS;
	pthread_mutex_lock(&g.lock);
	enum place pd = place_of((uintptr_t)dst, bytes), ps = place_of((uintptr_t)src, bytes);
	pthread_mutex_unlock(&g.lock);
	/* pinned host memory is mapped for the device: its address is a device pointer too */
	if (pd == P_BAD || ps == P_BAD || ((how & C_DST_DEV) && pd == P_PAGEABLE) ||
	    ((how & C_SRC_DEV) && ps == P_PAGEABLE))
		return CUDA_ERROR_INVALID_VALUE;
	int dd = pd == P_DEVICE ? 0 : DEV_HOST, sd = ps == P_DEVICE ? 0 : DEV_HOST;
	enum fakecu_copy kind =
	    dd == 0 ? (sd == 0 ? FAKECU_D2D : FAKECU_H2D) : (sd == 0 ? FAKECU_D2H : FAKECU_H2H);
	struct h2h_args args = {(void *)(uintptr_t)dst, (const void *)(uintptr_t)src, bytes};
	struct op op = {.kind = OP_COPY,
	                .dst = args.dst,
	                .src = args.src,
	                .bytes = bytes,
	                .dst_dev = dd,
	                .src_dev = sd};
	if (kind == FAKECU_H2H)
		op = (struct op){
		    .kind = OP_KERNEL, .k = &k_h2h, .args = &args, .args_size = sizeof(args)};
	int wait = (how & C_SYNC) || pd == P_PAGEABLE || ps == P_PAGEABLE;
	CUresult rc = submit(h, !!(how & C_PTDS), &op, wait);
	if (rc == CUDA_SUCCESS)
		__atomic_add_fetch(&g.copied[kind], bytes, __ATOMIC_RELAXED);
	return rc;
}

/* Sets count elements of elem (1, 2 or 4) bytes; device or pinned memory only. */
static CUresult set(CUdeviceptr dst, unsigned int value, size_t count, size_t elem, CUstream h,
                    unsigned how)
{
	NEED_INIT();
	if (!dst || (dst % elem) || count > SIZE_MAX / elem)
		return CUDA_ERROR_INVALID_VALUE;
	if (!count)
		return CUDA_SUCCESS;
	size_t bytes = count * elem;
	pthread_mutex_lock(&g.lock);
	enum place p = place_of((uintptr_t)dst, bytes);
	pthread_mutex_unlock(&g.lock);
	if (p != P_DEVICE && p != P_PINNED)
		return CUDA_ERROR_INVALID_VALUE;
	uint32_t ones = elem == 4 ? 0x01010101u : elem == 2 ? 0x0101u : 1u;
	int bytewise = value == (value & 0xff) * ones;
	struct fill_args args = {(void *)(uintptr_t)dst, count, elem, value};
	struct op op = {.kind = OP_SET,
	                .dst = args.dst,
	                .bytes = bytes,
	                .dst_dev = p == P_DEVICE ? 0 : DEV_HOST,
	                .value = (int)(value & 0xff)};
	if (!bytewise)
		op = (struct op){
		    .kind = OP_KERNEL, .k = &k_fill, .args = &args, .args_size = sizeof(args)};
	return submit(h, !!(how & C_PTDS), &op, !!(how & C_SYNC));
}

#define COPY_H2D (C_DST_DEV)
#define COPY_D2H (C_SRC_DEV)
#define COPY_D2D (C_DST_DEV | C_SRC_DEV)
#define PTR(p)   ((CUdeviceptr)(uintptr_t)(p))

EXPORT CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount)
{
	return copy(dst, src, ByteCount, NULL, C_SYNC);
}

EXPORT CUresult cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount)
{
	return copy(dst, src, ByteCount, NULL, C_SYNC | C_PTDS);
}

EXPORT CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream)
{
	return copy(dst, src, ByteCount, hStream, 0);
}

EXPORT CUresult cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount,
                                   CUstream hStream)
{
	return copy(dst, src, ByteCount, hStream, C_PTDS);
}

EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
	return copy(dstDevice, PTR(srcHost), ByteCount, NULL, C_SYNC | COPY_H2D);
}

EXPORT CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
	return copy(dstDevice, PTR(srcHost), ByteCount, NULL, C_SYNC | C_PTDS | COPY_H2D);
}

EXPORT CUresult cuMemcpyHtoD(unsigned int dstDevice, const void *srcHost, unsigned int ByteCount)
{
	return copy(dstDevice, PTR(srcHost), ByteCount, NULL, C_SYNC | COPY_H2D);
}

EXPORT CUresult cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
	return copy(PTR(dstHost), srcDevice, ByteCount, NULL, C_SYNC | COPY_D2H);
}

EXPORT CUresult cuMemcpyDtoH_v2_ptds(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
	return copy(PTR(dstHost), srcDevice, ByteCount, NULL, C_SYNC | C_PTDS | COPY_D2H);
}

EXPORT CUresult cuMemcpyDtoH(void *dstHost, unsigned int srcDevice, unsigned int ByteCount)
{
	return copy(PTR(dstHost), srcDevice, ByteCount, NULL, C_SYNC | COPY_D2H);
}

EXPORT CUresult cuMemcpyDtoD_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount)
{
	return copy(dstDevice, srcDevice, ByteCount, NULL, C_SYNC | COPY_D2D);
}

EXPORT CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount)
{
	return copy(dstDevice, srcDevice, ByteCount, NULL, C_SYNC | C_PTDS | COPY_D2D);
}

EXPORT CUresult cuMemcpyDtoD(unsigned int dstDevice, unsigned int srcDevice, unsigned int ByteCount)
{
	return copy(dstDevice, srcDevice, ByteCount, NULL, C_SYNC | COPY_D2D);
}

EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount,
                                     CUstream hStream)
{
	return copy(dstDevice, PTR(srcHost), ByteCount, hStream, COPY_H2D);
}

EXPORT CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dstDevice, const void *srcHost,
                                          size_t ByteCount, CUstream hStream)
{
	return copy(dstDevice, PTR(srcHost), ByteCount, hStream, C_PTDS | COPY_H2D);
}

EXPORT CUresult cuMemcpyHtoDAsync(unsigned int dstDevice, const void *srcHost,
                                  unsigned int ByteCount, CUstream hStream)
{
	return copy(dstDevice, PTR(srcHost), ByteCount, hStream, COPY_H2D);
}

EXPORT CUresult cuMemcpyDtoHAsync_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount,
                                     CUstream hStream)
{
	return copy(PTR(dstHost), srcDevice, ByteCount, hStream, COPY_D2H);
}

EXPORT CUresult cuMemcpyDtoHAsync_v2_ptsz(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount,
                                          CUstream hStream)
{
	return copy(PTR(dstHost), srcDevice, ByteCount, hStream, C_PTDS | COPY_D2H);
}

EXPORT CUresult cuMemcpyDtoHAsync(void *dstHost, unsigned int srcDevice, unsigned int ByteCount,
                                  CUstream hStream)
{
	return copy(PTR(dstHost), srcDevice, ByteCount, hStream, COPY_D2H);
}

EXPORT CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount,
                                     CUstream hStream)
{
	return copy(dstDevice, srcDevice, ByteCount, hStream, COPY_D2D);
}

EXPORT CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dstDevice, CUdeviceptr srcDevice,
                                          size_t ByteCount, CUstream hStream)
{
	return copy(dstDevice, srcDevice, ByteCount, hStream, C_PTDS | COPY_D2D);
}

EXPORT CUresult cuMemcpyDtoDAsync(unsigned int dstDevice, unsigned int srcDevice,
                                  unsigned int ByteCount, CUstream hStream)
{
	return copy(dstDevice, srcDevice, ByteCount, hStream, COPY_D2D);
}

/* Synchronous sets may run asynchronously on a GPU; here they finish first. */
EXPORT CUresult cuMemsetD8_v2(CUdeviceptr dstDevice, unsigned char uc, size_t N)
{
	return set(dstDevice, uc, N, 1, NULL, C_SYNC);
}

EXPORT CUresult cuMemsetD8_v2_ptds(CUdeviceptr dstDevice, unsigned char uc, size_t N)
{
	return set(dstDevice, uc, N, 1, NULL, C_SYNC | C_PTDS);
}

EXPORT CUresult cuMemsetD8(unsigned int dstDevice, unsigned char uc, unsigned int N)
{
	return set(dstDevice, uc, N, 1, NULL, C_SYNC);
}

EXPORT CUresult cuMemsetD16_v2(CUdeviceptr dstDevice, unsigned short us, size_t N)
{
	return set(dstDevice, us, N, 2, NULL, C_SYNC);
}

EXPORT CUresult cuMemsetD16_v2_ptds(CUdeviceptr dstDevice, unsigned short us, size_t N)
{
	return set(dstDevice, us, N, 2, NULL, C_SYNC | C_PTDS);
}

EXPORT CUresult cuMemsetD16(unsigned int dstDevice, unsigned short us, unsigned int N)
{
	return set(dstDevice, us, N, 2, NULL, C_SYNC);
}

EXPORT CUresult cuMemsetD32_v2(CUdeviceptr dstDevice, unsigned int ui, size_t N)
{
	return set(dstDevice, ui, N, 4, NULL, C_SYNC);
}

EXPORT CUresult cuMemsetD32_v2_ptds(CUdeviceptr dstDevice, unsigned int ui, size_t N)
{
	return set(dstDevice, ui, N, 4, NULL, C_SYNC | C_PTDS);
}

EXPORT CUresult cuMemsetD32(unsigned int dstDevice, unsigned int ui, unsigned int N)
{
	return set(dstDevice, ui, N, 4, NULL, C_SYNC);
}

EXPORT CUresult cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream)
{
	return set(dstDevice, uc, N, 1, hStream, 0);
}

EXPORT CUresult cuMemsetD8Async_ptsz(CUdeviceptr dstDevice, unsigned char uc, size_t N,
                                     CUstream hStream)
{
	return set(dstDevice, uc, N, 1, hStream, C_PTDS);
}

EXPORT CUresult cuMemsetD16Async(CUdeviceptr dstDevice, unsigned short us, size_t N,
                                 CUstream hStream)
{
	return set(dstDevice, us, N, 2, hStream, 0);
}

EXPORT CUresult cuMemsetD16Async_ptsz(CUdeviceptr dstDevice, unsigned short us, size_t N,
                                      CUstream hStream)
{
	return set(dstDevice, us, N, 2, hStream, C_PTDS);
}

EXPORT CUresult cuMemsetD32Async(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream)
{
	return set(dstDevice, ui, N, 4, hStream, 0);
}

EXPORT CUresult cuMemsetD32Async_ptsz(CUdeviceptr dstDevice, unsigned int ui, size_t N,
                                      CUstream hStream)
{
	return set(dstDevice, ui, N, 4, hStream, C_PTDS);
}

/* ---- 2D, 3D and peer copies --------------------------------------------------------- */

/* A strided copy: d slices of h rows of w bytes. */
struct copy3d_args {
	char *dst;
	const char *src;
	size_t w, h, d, dpitch, dslice, spitch, sslice;
};

static void copy3d_run(const void *a)
{
	const struct copy3d_args *x = a;
	for (size_t z = 0; z < x->d; z++)
		for (size_t y = 0; y < x->h; y++)
			memmove(x->dst + z * x->dslice + y * x->dpitch,
			        x->src + z * x->sslice + y * x->spitch, x->w);
}

static const struct dev_kernel k_copy3d = {"fakecu 3d copy", copy3d_run, NULL};

/* One side of a 2D/3D copy: its first byte and where its span lies (arrays
 * are not emulated: -ENOTSUP). Device memory must be device memory over the
 * whole span, as the driver faults otherwise. Under g.lock. */
static int side3d(CUmemorytype type, const void *host, CUdeviceptr dev, size_t x, size_t y,
                  size_t z, size_t pitch, size_t height, size_t w, size_t h, size_t d,
                  uintptr_t *start, enum place *pl)
{
	if (type == CU_MEMORYTYPE_ARRAY)
		return -ENOTSUP;
	if (type != CU_MEMORYTYPE_HOST && type != CU_MEMORYTYPE_DEVICE &&
	    type != CU_MEMORYTYPE_UNIFIED)
		return -EINVAL;
	uintptr_t base = type == CU_MEMORYTYPE_HOST ? (uintptr_t)host : (uintptr_t)dev;
	if (!base || (h > 1 && pitch < x + w) || (d > 1 && height < y + h))
		return -EINVAL;
	size_t slice = pitch * height;
	*start = base + z * slice + y * pitch + x;
	size_t span = (d - 1) * slice + (h - 1) * pitch + w;
	*pl = place_of(*start, span);
	/* mapped pinned memory: its address is a device pointer too */
	if (*pl == P_BAD || (type == CU_MEMORYTYPE_DEVICE && *pl == P_PAGEABLE))
		return -EINVAL;
	return 0;
}

static CUresult copy3d(const CUDA_MEMCPY3D *c, CUstream h, unsigned how)
{
	NEED_INIT();
	if (!c)
		return CUDA_ERROR_INVALID_VALUE;
	if (!c->WidthInBytes || !c->Height || !c->Depth)
		return CUDA_SUCCESS;
	uintptr_t ds = 0, ss = 0;
	enum place pd = P_BAD, ps = P_BAD;
	pthread_mutex_lock(&g.lock);
	int e = side3d(c->dstMemoryType, c->dstHost, c->dstDevice, c->dstXInBytes, c->dstY, c->dstZ,
	               c->dstPitch, c->dstHeight, c->WidthInBytes, c->Height, c->Depth, &ds, &pd);
	if (e == 0)
		e = side3d(c->srcMemoryType, c->srcHost, c->srcDevice, c->srcXInBytes, c->srcY,
		           c->srcZ, c->srcPitch, c->srcHeight, c->WidthInBytes, c->Height, c->Depth,
		           &ss, &ps);
	pthread_mutex_unlock(&g.lock);
	if (e < 0)
		return cu_err(e);
	struct copy3d_args a = {(char *)ds,
	                        (const char *)ss,
	                        c->WidthInBytes,
	                        c->Height,
	                        c->Depth,
	                        c->dstPitch,
	                        c->dstPitch * c->dstHeight,
	                        c->srcPitch,
	                        c->srcPitch * c->srcHeight};
	struct op op = {.kind = OP_KERNEL, .k = &k_copy3d, .args = &a, .args_size = sizeof(a)};
	int wait = (how & C_SYNC) || pd == P_PAGEABLE || ps == P_PAGEABLE;
	CUresult rc = submit(h, !!(how & C_PTDS), &op, wait);
	int dd = pd == P_DEVICE, sd = ps == P_DEVICE;
	enum fakecu_copy kind =
	    dd ? (sd ? FAKECU_D2D : FAKECU_H2D) : (sd ? FAKECU_D2H : FAKECU_H2H);
	if (rc == CUDA_SUCCESS)
		__atomic_add_fetch(&g.copied[kind], c->WidthInBytes * c->Height * c->Depth,
		                   __ATOMIC_RELAXED);
	return rc;
}

static CUresult copy2d(const CUDA_MEMCPY2D *c, CUstream h, unsigned how)
{
	if (!c)
		return CUDA_ERROR_INVALID_VALUE;
	CUDA_MEMCPY3D x = {.srcXInBytes = c->srcXInBytes,
	                   .srcY = c->srcY,
	                   .srcMemoryType = c->srcMemoryType,
	                   .srcHost = c->srcHost,
	                   .srcDevice = c->srcDevice,
	                   .srcArray = c->srcArray,
	                   .srcPitch = c->srcPitch,
	                   .srcHeight = c->srcY + c->Height,
	                   .dstXInBytes = c->dstXInBytes,
	                   .dstY = c->dstY,
	                   .dstMemoryType = c->dstMemoryType,
	                   .dstHost = c->dstHost,
	                   .dstDevice = c->dstDevice,
	                   .dstArray = c->dstArray,
	                   .dstPitch = c->dstPitch,
	                   .dstHeight = c->dstY + c->Height,
	                   .WidthInBytes = c->WidthInBytes,
	                   .Height = c->Height,
	                   .Depth = 1};
	return copy3d(&x, h, how);
}

/* One host backend: a peer copy is a device-to-device copy between two allocations. */
static CUresult copy3d_peer(const CUDA_MEMCPY3D_PEER *c, CUstream h, unsigned how)
{
	if (!c)
		return CUDA_ERROR_INVALID_VALUE;
	if (!ctx_valid(c->srcContext) || !ctx_valid(c->dstContext))
		return CUDA_ERROR_INVALID_CONTEXT;
	CUDA_MEMCPY3D x = {.srcXInBytes = c->srcXInBytes,
	                   .srcY = c->srcY,
	                   .srcZ = c->srcZ,
	                   .srcMemoryType = c->srcMemoryType,
	                   .srcHost = c->srcHost,
	                   .srcDevice = c->srcDevice,
	                   .srcArray = c->srcArray,
	                   .srcPitch = c->srcPitch,
	                   .srcHeight = c->srcHeight,
	                   .dstXInBytes = c->dstXInBytes,
	                   .dstY = c->dstY,
	                   .dstZ = c->dstZ,
	                   .dstMemoryType = c->dstMemoryType,
	                   .dstHost = c->dstHost,
	                   .dstDevice = c->dstDevice,
	                   .dstArray = c->dstArray,
	                   .dstPitch = c->dstPitch,
	                   .dstHeight = c->dstHeight,
	                   .WidthInBytes = c->WidthInBytes,
	                   .Height = c->Height,
	                   .Depth = c->Depth};
	return copy3d(&x, h, how);
}

static CUresult copy_peer(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx,
                          size_t bytes, CUstream h, unsigned how)
{
	if (!ctx_valid(dctx) || !ctx_valid(sctx))
		return CUDA_ERROR_INVALID_CONTEXT;
	return copy(dst, src, bytes, h, how | COPY_D2D);
}

EXPORT CUresult cuMemcpy2D_v2(const CUDA_MEMCPY2D *pCopy)
{
	return copy2d(pCopy, NULL, C_SYNC);
}

EXPORT CUresult cuMemcpy2D_v2_ptds(const CUDA_MEMCPY2D *pCopy)
{
	return copy2d(pCopy, NULL, C_SYNC | C_PTDS);
}

EXPORT CUresult cuMemcpy2DUnaligned_v2(const CUDA_MEMCPY2D *pCopy)
{
	return copy2d(pCopy, NULL, C_SYNC);
}

EXPORT CUresult cuMemcpy2DUnaligned_v2_ptds(const CUDA_MEMCPY2D *pCopy)
{
	return copy2d(pCopy, NULL, C_SYNC | C_PTDS);
}

EXPORT CUresult cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D *pCopy, CUstream hStream)
{
	return copy2d(pCopy, hStream, 0);
}

EXPORT CUresult cuMemcpy2DAsync_v2_ptsz(const CUDA_MEMCPY2D *pCopy, CUstream hStream)
{
	return copy2d(pCopy, hStream, C_PTDS);
}

EXPORT CUresult cuMemcpy3D_v2(const CUDA_MEMCPY3D *pCopy)
{
	return copy3d(pCopy, NULL, C_SYNC);
}

EXPORT CUresult cuMemcpy3D_v2_ptds(const CUDA_MEMCPY3D *pCopy)
{
	return copy3d(pCopy, NULL, C_SYNC | C_PTDS);
}

EXPORT CUresult cuMemcpy3DAsync_v2(const CUDA_MEMCPY3D *pCopy, CUstream hStream)
{
	return copy3d(pCopy, hStream, 0);
}

EXPORT CUresult cuMemcpy3DAsync_v2_ptsz(const CUDA_MEMCPY3D *pCopy, CUstream hStream)
{
	return copy3d(pCopy, hStream, C_PTDS);
}

EXPORT CUresult cuMemcpy3DPeer(const CUDA_MEMCPY3D_PEER *pCopy)
{
	return copy3d_peer(pCopy, NULL, C_SYNC);
}

EXPORT CUresult cuMemcpy3DPeer_ptds(const CUDA_MEMCPY3D_PEER *pCopy)
{
	return copy3d_peer(pCopy, NULL, C_SYNC | C_PTDS);
}

EXPORT CUresult cuMemcpy3DPeerAsync(const CUDA_MEMCPY3D_PEER *pCopy, CUstream hStream)
{
	return copy3d_peer(pCopy, hStream, 0);
}

EXPORT CUresult cuMemcpy3DPeerAsync_ptsz(const CUDA_MEMCPY3D_PEER *pCopy, CUstream hStream)
{
	return copy3d_peer(pCopy, hStream, C_PTDS);
}

EXPORT CUresult cuMemcpyPeer(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,
                             CUcontext srcContext, size_t ByteCount)
{
	return copy_peer(dstDevice, dstContext, srcDevice, srcContext, ByteCount, NULL, C_SYNC);
}

EXPORT CUresult cuMemcpyPeer_ptds(CUdeviceptr dstDevice, CUcontext dstContext,
                                  CUdeviceptr srcDevice, CUcontext srcContext, size_t ByteCount)
{
	return copy_peer(dstDevice, dstContext, srcDevice, srcContext, ByteCount, NULL,
	                 C_SYNC | C_PTDS);
}

EXPORT CUresult cuMemcpyPeerAsync(CUdeviceptr dstDevice, CUcontext dstContext,
                                  CUdeviceptr srcDevice, CUcontext srcContext, size_t ByteCount,
                                  CUstream hStream)
{
	return copy_peer(dstDevice, dstContext, srcDevice, srcContext, ByteCount, hStream, 0);
}

EXPORT CUresult cuMemcpyPeerAsync_ptsz(CUdeviceptr dstDevice, CUcontext dstContext,
                                       CUdeviceptr srcDevice, CUcontext srcContext,
                                       size_t ByteCount, CUstream hStream)
{
	return copy_peer(dstDevice, dstContext, srcDevice, srcContext, ByteCount, hStream, C_PTDS);
}

/* ---- streams and events ------------------------------------------------------------ */

EXPORT CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
	NEED_INIT();
	if (!phStream || (Flags & ~(unsigned)CU_STREAM_NON_BLOCKING))
		return CUDA_ERROR_INVALID_VALUE;
	struct CUstream_st *s;
	int e = stream_new(!(Flags & CU_STREAM_NON_BLOCKING), &s);
	if (e < 0)
		return cu_err(e);
	pthread_mutex_lock(&g.lock);
	e = hs_add(s, H_STREAM);
	if (e == 0)
		stream_link(s);
	pthread_mutex_unlock(&g.lock);
	if (e < 0) {
		stream_free(s);
		return cu_err(e);
	}
	*phStream = s;
	return CUDA_SUCCESS;
}

/* The driver returns at once and frees the stream when its work is done; here the
 * call waits for that work. */
static CUresult stream_destroy(CUstream h)
{
	NEED_INIT();
	pthread_mutex_lock(&g.lock);
	int ok = hs_has(h, H_STREAM);
	if (ok) {
		hs_del(h);
		stream_unlink(h);
	}
	pthread_mutex_unlock(&g.lock);
	if (!ok)
		return CUDA_ERROR_INVALID_HANDLE;
	stream_free(h);
	return CUDA_SUCCESS;
}

EXPORT CUresult cuStreamDestroy_v2(CUstream hStream)
{
	return stream_destroy(hStream);
}

EXPORT CUresult cuStreamDestroy(CUstream hStream)
{
	return stream_destroy(hStream);
}

EXPORT CUresult cuStreamSynchronize(CUstream hStream)
{
	return stream_wait(hStream, 0, 0);
}

EXPORT CUresult cuStreamSynchronize_ptsz(CUstream hStream)
{
	return stream_wait(hStream, 1, 0);
}

EXPORT CUresult cuStreamQuery(CUstream hStream)
{
	return stream_wait(hStream, 0, 1);
}

EXPORT CUresult cuStreamQuery_ptsz(CUstream hStream)
{
	return stream_wait(hStream, 1, 1);
}

static CUresult event_get(CUevent e)
{
	NEED_INIT();
	pthread_mutex_lock(&g.lock);
	int ok = hs_has(e, H_EVENT);
	pthread_mutex_unlock(&g.lock);
	return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

static CUresult stream_wait_event(CUstream h, CUevent e, int ptds)
{
	CUresult rc = event_get(e);
	if (rc)
		return rc;
	struct op op = {.kind = OP_WAIT, .ev = e->de};
	return submit(h, ptds, &op, 0);
}

EXPORT CUresult cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags)
{
	return stream_wait_event(hStream, hEvent, 0);
}

EXPORT CUresult cuStreamWaitEvent_ptsz(CUstream hStream, CUevent hEvent, unsigned int Flags)
{
	return stream_wait_event(hStream, hEvent, 1);
}

EXPORT CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags)
{
	NEED_INIT();
	unsigned all = CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
	if (!phEvent || (Flags & ~all) ||
	    ((Flags & CU_EVENT_INTERPROCESS) && !(Flags & CU_EVENT_DISABLE_TIMING)))
		return CUDA_ERROR_INVALID_VALUE;
	struct CUevent_st *e = calloc(1, sizeof(*e));
	if (!e)
		return CUDA_ERROR_OUT_OF_MEMORY;
	e->flags = Flags;
	int rc2 = dev_event_create(g.dev, &e->de);
	if (rc2 == 0) {
		pthread_mutex_lock(&g.lock);
		rc2 = hs_add(e, H_EVENT);
		pthread_mutex_unlock(&g.lock);
		if (rc2 < 0)
			warn("dev_event_destroy", dev_event_destroy(e->de));
	}
	if (rc2 < 0) {
		free(e);
		return cu_err(rc2);
	}
	*phEvent = e;
	return CUDA_SUCCESS;
}

/* Records and waits already queued keep their own capture: destroying at once is safe. */
static CUresult event_destroy(CUevent e)
{
	NEED_INIT();
	pthread_mutex_lock(&g.lock);
	int ok = hs_has(e, H_EVENT);
	if (ok)
		hs_del(e);
	pthread_mutex_unlock(&g.lock);
	if (!ok)
		return CUDA_ERROR_INVALID_HANDLE;
	warn("dev_event_destroy", dev_event_destroy(e->de));
	free(e);
	return CUDA_SUCCESS;
}

EXPORT CUresult cuEventDestroy_v2(CUevent hEvent)
{
	return event_destroy(hEvent);
}

EXPORT CUresult cuEventDestroy(CUevent hEvent)
{
	return event_destroy(hEvent);
}

static CUresult event_record(CUevent e, CUstream h, int ptds)
{
	CUresult rc = event_get(e);
	if (rc)
		return rc;
	struct op op = {.kind = OP_RECORD, .ev = e->de};
	rc = submit(h, ptds, &op, 0);
	if (rc == CUDA_SUCCESS)
		__atomic_store_n(&e->recorded, 1, __ATOMIC_RELAXED);
	return rc;
}

EXPORT CUresult cuEventRecord(CUevent hEvent, CUstream hStream)
{
	return event_record(hEvent, hStream, 0);
}

EXPORT CUresult cuEventRecord_ptsz(CUevent hEvent, CUstream hStream)
{
	return event_record(hEvent, hStream, 1);
}

EXPORT CUresult cuEventQuery(CUevent hEvent)
{
	CUresult rc = event_get(hEvent);
	return rc ? rc : cu_err(dev_event_query(hEvent->de));
}

EXPORT CUresult cuEventSynchronize(CUevent hEvent)
{
	CUresult rc = event_get(hEvent);
	return rc ? rc : cu_err(dev_event_sync(hEvent->de));
}

static CUresult elapsed(float *ms, CUevent a, CUevent b)
{
	if (!ms)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult rc = event_get(a);
	if (rc == CUDA_SUCCESS)
		rc = event_get(b);
	if (rc)
		return rc;
	if ((a->flags | b->flags) & CU_EVENT_DISABLE_TIMING ||
	    !__atomic_load_n(&a->recorded, __ATOMIC_RELAXED) ||
	    !__atomic_load_n(&b->recorded, __ATOMIC_RELAXED))
		return CUDA_ERROR_INVALID_HANDLE;
	double ta, tb;
	int e = dev_event_time(a->de, &ta);
	if (e == 0)
		e = dev_event_time(b->de, &tb);
	if (e < 0)
		return cu_err(e);
	*ms = (float)((tb - ta) * 1e3);
	return CUDA_SUCCESS;
}

EXPORT CUresult cuEventElapsedTime_v2(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
	return elapsed(pMilliseconds, hStart, hEnd);
}

EXPORT CUresult cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
	return elapsed(pMilliseconds, hStart, hEnd);
}

static CUresult host_func(CUstream h, CUhostFn fn, void *data, int ptds)
{
	NEED_INIT();
	if (!fn)
		return CUDA_ERROR_INVALID_VALUE;
	struct op op = {.kind = OP_HOSTFN, .fn = fn, .arg = data};
	return submit(h, ptds, &op, 0);
}

EXPORT CUresult cuLaunchHostFunc(CUstream hStream, CUhostFn fn, void *userData)
{
	return host_func(hStream, fn, userData, 0);
}

EXPORT CUresult cuLaunchHostFunc_ptsz(CUstream hStream, CUhostFn fn, void *userData)
{
	return host_func(hStream, fn, userData, 1);
}

/* ---- modules and kernels ------------------------------------------------------------- */

/* Under g.lock. */
static struct CUfunc_st *kernel_find(const char *name)
{
	for (size_t i = 0; i < g.nkern; i++)
		if (strcmp(g.kern[i]->name, name) == 0)
			return g.kern[i];
	return NULL;
}

EXPORT CUresult cuModuleLoadData(CUmodule *module, const void *image)
{
	NEED_INIT();
	if (!module || !image)
		return CUDA_ERROR_INVALID_VALUE;
	struct CUmod_st *m = calloc(1, sizeof(*m));
	if (!m)
		return CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_lock(&g.lock);
	int e = hs_add(m, H_MODULE);
	pthread_mutex_unlock(&g.lock);
	if (e < 0) {
		free(m);
		return cu_err(e);
	}
	*module = m;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuModuleUnload(CUmodule hmod)
{
	NEED_INIT();
	pthread_mutex_lock(&g.lock);
	int ok = hs_has(hmod, H_MODULE);
	if (ok)
		hs_del(hmod);
	pthread_mutex_unlock(&g.lock);
	if (!ok)
		return CUDA_ERROR_INVALID_HANDLE;
	free(hmod);
	return CUDA_SUCCESS;
}

EXPORT CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
{
	NEED_INIT();
	if (!hfunc || !name)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&g.lock);
	struct CUfunc_st *f = NULL;
	CUresult rc = hs_has(hmod, H_MODULE) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
	if (rc == CUDA_SUCCESS && !(f = kernel_find(name)))
		rc = CUDA_ERROR_NOT_FOUND;
	pthread_mutex_unlock(&g.lock);
	if (rc == CUDA_SUCCESS)
		*hfunc = f;
	return rc;
}

/* Kernel records are never freed: a valid handle stays valid. */
static CUresult func_get(CUfunction f)
{
	pthread_mutex_lock(&g.lock);
	int ok = hs_has(f, H_FUNC);
	pthread_mutex_unlock(&g.lock);
	return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

EXPORT CUresult cuFuncGetParamInfo(CUfunction func, size_t paramIndex, size_t *paramOffset,
                                   size_t *paramSize)
{
	CUresult rc = init();
	if (rc || (rc = func_get(func)))
		return rc;
	if (paramIndex >= (size_t)func->nparams)
		return CUDA_ERROR_INVALID_VALUE;
	if (paramOffset)
		*paramOffset = func->off[paramIndex];
	if (paramSize)
		*paramSize = func->size[paramIndex];
	return CUDA_SUCCESS;
}

EXPORT CUresult cuFuncGetName(const char **name, CUfunction hfunc)
{
	NEED_INIT();
	if (!name)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult rc = func_get(hfunc);
	if (rc)
		return rc;
	*name = hfunc->name;
	return CUDA_SUCCESS;
}

/* Runs on the stream's worker: the args are the kernel's function, then the
 * packed parameters (KARGS_HDR-aligned, as dev_launch copies them). */
static void kernel_run(const void *args)
{
	fakecu_kernel_fn fn;
	memcpy(&fn, args, sizeof(fn));
	fn((const char *)args + KARGS_HDR);
}

static const struct dev_kernel k_user = {"fakecu kernel", kernel_run, NULL};

static CUresult launch(CUfunction f, const unsigned grid[3], const unsigned block[3], CUstream h,
                       void **params, void **extra, int ptds)
{
	CUresult rc = init();
	if (rc || (rc = func_get(f)))
		return rc;
	uint64_t threads = (uint64_t)block[0] * block[1] * block[2];
	if (!grid[0] || !grid[1] || !grid[2] || !threads || threads > MAX_BLOCK_THREAD)
		return CUDA_ERROR_INVALID_VALUE;
	if (params && extra)
		return CUDA_ERROR_INVALID_VALUE;
	_Alignas(16) char buf[KARGS_MAX];
	memcpy(buf, &f->fn, sizeof(f->fn));
	char *packed = buf + KARGS_HDR;
	if (params) {
		for (int i = 0; i < f->nparams; i++) {
			if (!params[i])
				return CUDA_ERROR_INVALID_VALUE;
			memcpy(packed + f->off[i], params[i], f->size[i]);
		}
	} else if (extra) {
		const void *ptr = NULL;
		const size_t *size = NULL;
		for (size_t i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
			if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER)
				ptr = extra[i + 1];
			else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE)
				size = extra[i + 1];
			else
				return CUDA_ERROR_INVALID_VALUE;
		}
		if (f->total && (!ptr || !size || *size < f->total))
			return CUDA_ERROR_INVALID_VALUE;
		if (f->total)
			memcpy(packed, ptr, f->total);
	} else if (f->nparams) {
		return CUDA_ERROR_INVALID_VALUE;
	}
	struct op op = {
	    .kind = OP_KERNEL, .k = &k_user, .args = buf, .args_size = KARGS_HDR + f->total};
	rc = submit(h, ptds, &op, 0);
	if (rc == CUDA_SUCCESS)
		__atomic_add_fetch(&g.launches, 1, __ATOMIC_RELAXED);
	return rc;
}

EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                               unsigned int gridDimZ, unsigned int blockDimX,
                               unsigned int blockDimY, unsigned int blockDimZ,
                               unsigned int sharedMemBytes, CUstream hStream, void **kernelParams,
                               void **extra)
{
	const unsigned grid[3] = {gridDimX, gridDimY, gridDimZ};
	const unsigned block[3] = {blockDimX, blockDimY, blockDimZ};
	return launch(f, grid, block, hStream, kernelParams, extra, 0);
}

EXPORT CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                    unsigned int gridDimZ, unsigned int blockDimX,
                                    unsigned int blockDimY, unsigned int blockDimZ,
                                    unsigned int sharedMemBytes, CUstream hStream,
                                    void **kernelParams, void **extra)
{
	const unsigned grid[3] = {gridDimX, gridDimY, gridDimZ};
	const unsigned block[3] = {blockDimX, blockDimY, blockDimZ};
	return launch(f, grid, block, hStream, kernelParams, extra, 1);
}

/* Every block runs at once on a GPU; here the kernel is one host call anyway. */
EXPORT CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gridDimX,
                                          unsigned int gridDimY, unsigned int gridDimZ,
                                          unsigned int blockDimX, unsigned int blockDimY,
                                          unsigned int blockDimZ, unsigned int sharedMemBytes,
                                          CUstream hStream, void **kernelParams)
{
	const unsigned grid[3] = {gridDimX, gridDimY, gridDimZ};
	const unsigned block[3] = {blockDimX, blockDimY, blockDimZ};
	return launch(f, grid, block, hStream, kernelParams, NULL, 0);
}

EXPORT CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gridDimX,
                                               unsigned int gridDimY, unsigned int gridDimZ,
                                               unsigned int blockDimX, unsigned int blockDimY,
                                               unsigned int blockDimZ, unsigned int sharedMemBytes,
                                               CUstream hStream, void **kernelParams)
{
	const unsigned grid[3] = {gridDimX, gridDimY, gridDimZ};
	const unsigned block[3] = {blockDimX, blockDimY, blockDimZ};
	return launch(f, grid, block, hStream, kernelParams, NULL, 1);
}

static CUresult launch_ex(const CUlaunchConfig *c, CUfunction f, void **params, void **extra,
                          int ptds)
{
	if (!c || (c->numAttrs && !c->attrs))
		return CUDA_ERROR_INVALID_VALUE;
	const unsigned grid[3] = {c->gridDimX, c->gridDimY, c->gridDimZ};
	const unsigned block[3] = {c->blockDimX, c->blockDimY, c->blockDimZ};
	return launch(f, grid, block, c->hStream, params, extra, ptds);
}

EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kernelParams,
                                 void **extra)
{
	return launch_ex(config, f, kernelParams, extra, 0);
}

EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f,
                                      void **kernelParams, void **extra)
{
	return launch_ex(config, f, kernelParams, extra, 1);
}

/* ---- virtual memory management ------------------------------------------------------- */

/* 0 for device 0, 1 for the host, -1 for anything else. */
static int location_host(const CUmemLocation *l)
{
	switch (l->type) {
	case CU_MEM_LOCATION_TYPE_DEVICE: return dev_valid(l->id) ? 0 : -1;
	case CU_MEM_LOCATION_TYPE_HOST:
	case CU_MEM_LOCATION_TYPE_HOST_NUMA: return 1;
	default: return -1;
	}
}

EXPORT CUresult cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
                                              CUmemAllocationGranularity_flags option)
{
	NEED_INIT();
	if (!granularity || !prop || location_host(&prop->location) < 0 ||
	    (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM &&
	     option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED))
		return CUDA_ERROR_INVALID_VALUE;
	*granularity = g.gran;
	return CUDA_SUCCESS;
}

/* A larger alignment than the granularity is honoured by reserving more and
 * keeping the slack inaccessible; the address hint is ignored. */
EXPORT CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment,
                                    CUdeviceptr addr, unsigned long long flags)
{
	NEED_INIT();
	if (!ptr || !size || size % g.gran || flags || (alignment & (alignment - 1)))
		return CUDA_ERROR_INVALID_VALUE;
	size_t slack = alignment > g.gran ? alignment - g.gran : 0;
	if (size > SIZE_MAX - slack)
		return CUDA_ERROR_OUT_OF_MEMORY;
	void *p = NULL;
	uintptr_t start = 0;
	pthread_mutex_lock(&g.lock);
	int e = dev_va_reserve(g.dev, 0, size + slack, &p);
	if (e == 0) {
		start = slack ? ((uintptr_t)p + alignment - 1) & ~(uintptr_t)(alignment - 1)
		              : (uintptr_t)p;
		e = range_add(start, size, R_RESERVE);
		if (e == 0) {
			struct range *r = range_find(start);
			r->raw_start = (uintptr_t)p;
			r->raw_bytes = size + slack;
		} else {
			warn("dev_va_release", dev_va_release(g.dev, p, size + slack));
		}
	}
	pthread_mutex_unlock(&g.lock);
	if (e == 0)
		*ptr = start;
	return cu_err(e);
}

EXPORT CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
	NEED_INIT();
	pthread_mutex_lock(&g.lock);
	struct range *r = range_find((uintptr_t)ptr);
	int e = -EINVAL;
	if (r && r->kind == R_RESERVE && r->start == ptr && r->bytes == size && !r->nmaps) {
		e = dev_va_release(g.dev, (void *)r->raw_start, r->raw_bytes);
		if (e == 0)
			range_del(r);
	}
	pthread_mutex_unlock(&g.lock);
	return cu_err(e);
}

EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                            const CUmemAllocationProp *prop, unsigned long long flags)
{
	NEED_INIT();
	if (!handle || !prop || !size || size % g.gran || flags ||
	    prop->type != CU_MEM_ALLOCATION_TYPE_PINNED)
		return CUDA_ERROR_INVALID_VALUE;
	int host = location_host(&prop->location);
	if (host < 0)
		return prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE
		           ? CUDA_ERROR_INVALID_DEVICE
		           : CUDA_ERROR_INVALID_VALUE;
	struct chunk *c = calloc(1, sizeof(*c));
	if (!c)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*c = (struct chunk){
	    .bytes = size, .host = host, .refs = 1, .dev = host ? 0 : prop->location.id};
	pthread_mutex_lock(&g.lock);
	int e = host || used_take(c->dev, size) ? 0 : -ENOMEM;
	if (e == 0) {
		e = dev_phys_create(g.dev, 0, size, &c->ph);
		if (e == 0 && (e = hs_add(c, H_CHUNK)) < 0)
			warn("dev_phys_destroy", dev_phys_destroy(g.dev, c->ph));
		if (e < 0 && !host)
			used_give(c->dev, size);
	}
	pthread_mutex_unlock(&g.lock);
	if (e < 0) {
		free(c);
		return cu_err(e);
	}
	*handle = (CUmemGenericAllocationHandle)(uintptr_t)c;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
	NEED_INIT();
	struct chunk *c = (struct chunk *)(uintptr_t)handle;
	pthread_mutex_lock(&g.lock);
	CUresult rc = hs_has(c, H_CHUNK) && c->refs > 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
	if (rc == CUDA_SUCCESS) {
		c->refs--;
		chunk_maybe_free(c);
	}
	pthread_mutex_unlock(&g.lock);
	return rc;
}

/* Under g.lock: room for one more mapping in r. */
static int maps_reserve(struct range *r)
{
	if (r->nmaps < r->cap_maps)
		return 0;
	size_t cap = r->cap_maps ? 2 * r->cap_maps : 8;
	struct mapping *t = realloc(r->maps, cap * sizeof(*t));
	if (!t)
		return -ENOMEM;
	r->maps = t;
	r->cap_maps = cap;
	return 0;
}

EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                         CUmemGenericAllocationHandle handle, unsigned long long flags)
{
	NEED_INIT();
	struct chunk *c = (struct chunk *)(uintptr_t)handle;
	if (!ptr || !size || offset || flags || size % g.gran || ptr % g.gran)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&g.lock);
	struct range *r = range_find((uintptr_t)ptr);
	int e = -EINVAL;
	long i = -1;
	if (hs_has(c, H_CHUNK) && c->refs > 0 && size <= c->bytes && r && r->kind == R_RESERVE &&
	    size <= r->bytes - (ptr - r->start)) {
		/* only onto an unmapped part: the neighbours must end before and start after */
		i = map_floor(r, ptr);
		int free_before = i < 0 || r->maps[i].start + r->maps[i].bytes <= ptr;
		int free_after = (size_t)(i + 1) >= r->nmaps || r->maps[i + 1].start >= ptr + size;
		if (free_before && free_after)
			e = maps_reserve(r);
	}
	if (e == 0)
		e = dev_va_map(g.dev, (void *)(uintptr_t)ptr, size, c->ph, 0);
	if (e == 0) {
		size_t at = (size_t)(i + 1);
		memmove(&r->maps[at + 1], &r->maps[at], (r->nmaps - at) * sizeof(*r->maps));
		r->maps[at] = (struct mapping){ptr, size, c};
		r->nmaps++;
		c->maps++;
	}
	pthread_mutex_unlock(&g.lock);
	return cu_err(e);
}

/* The range must be exactly one or more whole, adjacent mappings. The driver's
 * unmap is synchronous: queued work finishes before the pages go. */
EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
	NEED_INIT();
	if (!ptr || !size)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult rc = ctx_sync();
	if (rc)
		return rc;
	pthread_mutex_lock(&g.lock);
	struct range *r = range_find((uintptr_t)ptr);
	int e = -EINVAL;
	if (r && r->kind == R_RESERVE && size <= r->bytes - (ptr - r->start)) {
		long first = map_floor(r, ptr), last = first;
		uintptr_t at = ptr;
		if (first >= 0 && r->maps[first].start == ptr) {
			while ((size_t)last < r->nmaps && r->maps[last].start == at &&
			       r->maps[last].bytes <= ptr + size - at)
				at += r->maps[last++].bytes;
		}
		e = at == ptr + size ? 0 : -EINVAL;
		long done = first;
		while (e == 0 && done < last) {
			struct mapping *m = &r->maps[done];
			e = dev_va_unmap(g.dev, (void *)m->start, m->bytes);
			if (e == 0) {
				m->ch->maps--;
				chunk_maybe_free(m->ch); /* a chunk mapped twice goes at its last */
				done++;
			}
		}
		if (done > first) {
			memmove(&r->maps[first], &r->maps[done],
			        (r->nmaps - (size_t)done) * sizeof(*r->maps));
			r->nmaps -= (size_t)(done - first);
		}
	}
	pthread_mutex_unlock(&g.lock);
	return cu_err(e);
}

/* The host backend maps read-write already: only the arguments are checked. */
EXPORT CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc,
                               size_t count)
{
	NEED_INIT();
	if (!ptr || !size || !desc || !count)
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; i < count; i++) {
		if (location_host(&desc[i].location) < 0)
			return desc[i].location.type == CU_MEM_LOCATION_TYPE_DEVICE
			           ? CUDA_ERROR_INVALID_DEVICE
			           : CUDA_ERROR_INVALID_VALUE;
	}
	pthread_mutex_lock(&g.lock);
	struct range *r = range_find((uintptr_t)ptr);
	int ok = r && r->kind == R_RESERVE && size <= r->bytes - (ptr - r->start) &&
	         map_covered(r, ptr, size);
	pthread_mutex_unlock(&g.lock);
	return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
	NEED_INIT();
	if (!handle || !addr)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&g.lock);
	struct range *r = range_find((uintptr_t)addr);
	const struct mapping *m = r && r->kind == R_RESERVE ? map_at(r, (uintptr_t)addr) : NULL;
	if (m) {
		m->ch->refs++;
		*handle = (CUmemGenericAllocationHandle)(uintptr_t)m->ch;
	}
	pthread_mutex_unlock(&g.lock);
	return m ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* What a chunk was made with, as far as the emulation keeps it: pinned, on
 * its device or the host. */
EXPORT CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop,
                                                       CUmemGenericAllocationHandle handle)
{
	NEED_INIT();
	struct chunk *c = (struct chunk *)(uintptr_t)handle;
	if (!prop)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&g.lock);
	int ok = hs_has(c, H_CHUNK);
	if (ok) {
		memset(prop, 0, sizeof(*prop));
		prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
		prop->location.type =
		    c->host ? CU_MEM_LOCATION_TYPE_HOST : CU_MEM_LOCATION_TYPE_DEVICE;
		prop->location.id = c->host ? 0 : c->dev;
	}
	pthread_mutex_unlock(&g.lock);
	return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* ---- stream-ordered allocation: pools --------------------------------------------- */

/* Under g.lock: the pool handle, the default pool included; NULL if not one. */
static struct CUmemPoolHandle_st *pool_get(CUmemoryPool p)
{
	if (p == &g_default_pool)
		return &g_default_pool;
	return hs_has(p, H_POOL) ? p : NULL;
}

/* Under g.lock: gives a kept block's memory back to the device. */
static void block_release(struct pool_block *b)
{
	size_t bytes = b->r->bytes;
	int dev = b->r->dev;
	warn("dev_mem_free", dev_mem_free(g.dev, 0, (void *)b->r->start));
	range_del(b->r);
	used_give(dev, bytes);
	warn("dev_event_destroy", dev_event_destroy(b->ev));
	free(b);
}

/* Under g.lock: releases the blocks of p whose free has completed, oldest
 * first, until p keeps at most keep bytes. */
static void pool_trim(struct CUmemPoolHandle_st *p, size_t keep)
{
	size_t kept = 0;
	for (struct pool_block *b = p->free; b; b = b->next)
		kept += b->r->bytes;
	for (struct pool_block **pb = &p->free; *pb && kept > keep;) {
		struct pool_block *b = *pb;
		if (dev_event_query(b->ev) != 0) {
			pb = &b->next;
			continue;
		}
		*pb = b->next;
		kept -= b->r->bytes;
		block_release(b);
	}
}

/* Under g.lock: every pool's completed blocks (the default pool and those
 * created), to make room for an allocation. */
static void pools_trim_all(void)
{
	pool_trim(&g_default_pool, 0);
	for (size_t i = 0; i < g.hs_cap; i++)
		if (g.hs[i].key > 1 && g.hs[i].kind == H_POOL)
			pool_trim((struct CUmemPoolHandle_st *)g.hs[i].key, 0);
}

/* Reuses a block the pool keeps (bytes <= its size <= 2 bytes), first fit:
 * on the stream that freed it at once, on another after the free's event (a
 * stream dependency, as the driver's pools insert). Otherwise new memory,
 * after releasing completed blocks when the device is full. */
static CUresult alloc_async(CUdeviceptr *dptr, size_t bytes, CUmemoryPool hp, int cur, CUstream h,
                            int ptds)
{
	NEED_INIT();
	if (!dptr || !bytes)
		return CUDA_ERROR_INVALID_VALUE;
	struct thread_state *ts = thread_state();
	if (!ts)
		return CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_lock(&g.lock);
	struct CUmemPoolHandle_st *pool =
	    cur ? (g.cur_pool ? g.cur_pool : &g_default_pool) : pool_get(hp);
	struct CUstream_st *s = NULL;
	CUresult rc = pool ? cu_err(after_fork()) : CUDA_ERROR_INVALID_VALUE;
	if (rc == CUDA_SUCCESS)
		rc = stream_resolve(h, ptds, ts, &s);
	struct pool_block **pb = &pool->free;
	while (rc == CUDA_SUCCESS && *pb &&
	       !((*pb)->r->bytes >= bytes && (*pb)->r->bytes / 2 <= bytes))
		pb = &(*pb)->next;
	if (rc == CUDA_SUCCESS && *pb) {
		struct pool_block *b = *pb;
		struct op wait = {.kind = OP_WAIT, .ev = b->ev};
		int e = b->s == s ? 0 : queue_locked(s, &wait);
		if (e == 0) {
			*pb = b->next;
			b->r->pool_freed = 0;
			*dptr = b->r->start;
			warn("dev_event_destroy", dev_event_destroy(b->ev)); /* the wait keeps it */
			free(b);
		}
		pthread_mutex_unlock(&g.lock);
		return cu_err(e);
	}
	void *p = NULL;
	int e = rc == CUDA_SUCCESS ? 0 : -EINVAL;
	int dev = cur_dev();
	if (e == 0 && !used_take(dev, bytes)) {
		pools_trim_all();
		e = used_take(dev, bytes) ? 0 : -ENOMEM;
	}
	if (e == 0) {
		e = dev_mem_alloc(g.dev, 0, bytes, &p);
		if (e == 0 && (e = range_add((uintptr_t)p, bytes, R_ALLOC)) < 0)
			warn("dev_mem_free", dev_mem_free(g.dev, 0, p));
		if (e < 0)
			used_give(dev, bytes);
	}
	if (e == 0) {
		range_find((uintptr_t)p)->pool = pool;
		range_find((uintptr_t)p)->dev = dev;
	}
	pthread_mutex_unlock(&g.lock);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (e == 0)
		*dptr = (CUdeviceptr)(uintptr_t)p;
	return cu_err(e);
}

/* The pool keeps the block, with an event recorded on the freeing stream; a
 * cuMemAlloc allocation (or one of a destroyed pool) is freed after the
 * device is idle, as cuMemFree. */
static CUresult free_async(CUdeviceptr dptr, CUstream h, int ptds)
{
	NEED_INIT();
	struct thread_state *ts = thread_state();
	if (!ts)
		return CUDA_ERROR_OUT_OF_MEMORY;
	struct pool_block *b = calloc(1, sizeof(*b));
	if (!b)
		return CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_lock(&g.lock);
	struct range *r = range_find((uintptr_t)dptr);
	CUresult rc = r && r->kind == R_ALLOC && r->start == dptr && !r->pool_freed
	                  ? cu_err(after_fork())
	                  : CUDA_ERROR_INVALID_VALUE;
	int plain = rc == CUDA_SUCCESS && !r->pool;
	struct CUstream_st *s = NULL;
	if (rc == CUDA_SUCCESS && !plain)
		rc = stream_resolve(h, ptds, ts, &s);
	if (rc == CUDA_SUCCESS && !plain) {
		int e = dev_event_create(g.dev, &b->ev);
		struct op rec = {.kind = OP_RECORD, .ev = b->ev};
		if (e == 0 && (e = queue_locked(s, &rec)) < 0)
			warn("dev_event_destroy", dev_event_destroy(b->ev));
		if (e == 0) {
			b->r = r;
			b->s = s;
			r->pool_freed = 1;
			struct pool_block **pb = &r->pool->free;
			while (*pb)
				pb = &(*pb)->next;
			*pb = b;
			b = NULL;
		}
		rc = cu_err(e);
	}
	pthread_mutex_unlock(&g.lock);
	free(b);
	if (rc == CUDA_SUCCESS && plain)
		rc = mem_free(dptr, R_ALLOC);
	return rc;
}

EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
	return alloc_async(dptr, bytesize, NULL, 1, hStream, 0);
}

EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
	return alloc_async(dptr, bytesize, NULL, 1, hStream, 1);
}

EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                        CUstream hStream)
{
	return alloc_async(dptr, bytesize, pool, 0, hStream, 0);
}

EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                             CUstream hStream)
{
	return alloc_async(dptr, bytesize, pool, 0, hStream, 1);
}

EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
	return free_async(dptr, hStream, 0);
}

EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream)
{
	return free_async(dptr, hStream, 1);
}

/* Device pools only; handle types none or POSIX file descriptors. */
EXPORT CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props)
{
	NEED_INIT();
	if (!pool || !props || props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
	    (props->handleTypes & ~(unsigned)CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
		return CUDA_ERROR_INVALID_VALUE;
	if (location_host(&props->location) != 0)
		return props->location.type == CU_MEM_LOCATION_TYPE_DEVICE
		           ? CUDA_ERROR_INVALID_DEVICE
		           : CUDA_ERROR_NOT_SUPPORTED;
	struct CUmemPoolHandle_st *p = calloc(1, sizeof(*p));
	if (!p)
		return CUDA_ERROR_OUT_OF_MEMORY;
	p->props = *props;
	pthread_mutex_lock(&g.lock);
	int e = hs_add(p, H_POOL);
	pthread_mutex_unlock(&g.lock);
	if (e < 0) {
		free(p);
		return cu_err(e);
	}
	*pool = p;
	return CUDA_SUCCESS;
}

/* Waits for the device, releases the kept blocks. Live allocations stay valid
 * and leave the pool (freeing one later frees it at once). */
EXPORT CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
	NEED_INIT();
	CUresult rc = ctx_sync();
	if (rc)
		return rc;
	pthread_mutex_lock(&g.lock);
	struct CUmemPoolHandle_st *p = pool == &g_default_pool ? NULL : pool_get(pool);
	if (p) {
		pool_trim(p, 0);
		hs_del(p);
		for (size_t i = 0; i < g.nrg; i++)
			if (g.rg[i]->pool == p)
				g.rg[i]->pool = NULL;
		if (g.cur_pool == p)
			g.cur_pool = NULL;
	}
	pthread_mutex_unlock(&g.lock);
	int ok = p != NULL;
	free(p);
	return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep)
{
	NEED_INIT();
	pthread_mutex_lock(&g.lock);
	struct CUmemPoolHandle_st *p = pool_get(pool);
	if (p)
		pool_trim(p, minBytesToKeep);
	pthread_mutex_unlock(&g.lock);
	return p ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool, CUdevice dev)
{
	NEED_INIT();
	if (!pool)
		return CUDA_ERROR_INVALID_VALUE;
	if (!dev_valid(dev))
		return CUDA_ERROR_INVALID_DEVICE;
	*pool = &g_default_pool;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev)
{
	NEED_INIT();
	if (!pool)
		return CUDA_ERROR_INVALID_VALUE;
	if (!dev_valid(dev))
		return CUDA_ERROR_INVALID_DEVICE;
	pthread_mutex_lock(&g.lock);
	*pool = g.cur_pool ? g.cur_pool : &g_default_pool;
	pthread_mutex_unlock(&g.lock);
	return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool)
{
	NEED_INIT();
	if (!dev_valid(dev))
		return CUDA_ERROR_INVALID_DEVICE;
	pthread_mutex_lock(&g.lock);
	struct CUmemPoolHandle_st *p = pool_get(pool);
	if (p)
		g.cur_pool = p == &g_default_pool ? NULL : p;
	pthread_mutex_unlock(&g.lock);
	return p ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* A file descriptor (of /dev/null: nothing another process can open) for a
 * pool created with that handle type. */
EXPORT CUresult cuMemPoolExportToShareableHandle(void *handle_out, CUmemoryPool pool,
                                                 CUmemAllocationHandleType type,
                                                 unsigned long long flags)
{
	NEED_INIT();
	if (!handle_out || flags || type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&g.lock);
	struct CUmemPoolHandle_st *p = pool_get(pool);
	int ok = p && (p->props.handleTypes & type);
	int fd = ok ? open("/dev/null", O_RDONLY | O_CLOEXEC) : -1;
	if (fd >= 0)
		p->exported = 1;
	pthread_mutex_unlock(&g.lock);
	if (!ok)
		return CUDA_ERROR_INVALID_VALUE;
	if (fd < 0)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*(int *)handle_out = fd;
	return CUDA_SUCCESS;
}

/* ---- entry points by name ------------------------------------------------------------ */

EXPORT CUresult cuGetExportTable(const void **ppExportTable, const CUuuid *pExportTableId)
{
	return CUDA_ERROR_NOT_SUPPORTED;
}

static CUresult get_proc(const char *symbol, void **pfn, int version, cuuint64_t flags,
                         CUdriverProcAddressQueryResult *status);

EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                    cuuint64_t flags, CUdriverProcAddressQueryResult *symbolStatus)
{
	return get_proc(symbol, pfn, cudaVersion, flags, symbolStatus);
}

EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
	return get_proc(symbol, pfn, cudaVersion, flags, NULL);
}

/* Every export by base name, the CUDA version that introduced it and whether it is
 * the per-thread-default-stream variant, as the driver's own table. */
#define PROCS(X)                                                                          \
	X("cuInit", 2000, 0, cuInit)                                                      \
	X("cuDriverGetVersion", 2020, 0, cuDriverGetVersion)                              \
	X("cuDeviceGet", 2000, 0, cuDeviceGet)                                            \
	X("cuDeviceGetCount", 2000, 0, cuDeviceGetCount)                                  \
	X("cuDeviceGetName", 2000, 0, cuDeviceGetName)                                    \
	X("cuDeviceTotalMem", 2000, 0, cuDeviceTotalMem)                                  \
	X("cuDeviceTotalMem", 3020, 0, cuDeviceTotalMem_v2)                               \
	X("cuDeviceGetAttribute", 2000, 0, cuDeviceGetAttribute)                          \
	X("cuDevicePrimaryCtxRetain", 7000, 0, cuDevicePrimaryCtxRetain)                  \
	X("cuDevicePrimaryCtxRelease", 7000, 0, cuDevicePrimaryCtxRelease)                \
	X("cuDevicePrimaryCtxRelease", 11000, 0, cuDevicePrimaryCtxRelease_v2)            \
	X("cuCtxGetCurrent", 4000, 0, cuCtxGetCurrent)                                    \
	X("cuCtxSetCurrent", 4000, 0, cuCtxSetCurrent)                                    \
	X("cuCtxPushCurrent", 2000, 0, cuCtxPushCurrent)                                  \
	X("cuCtxPushCurrent", 4000, 0, cuCtxPushCurrent_v2)                               \
	X("cuCtxPopCurrent", 2000, 0, cuCtxPopCurrent)                                    \
	X("cuCtxPopCurrent", 4000, 0, cuCtxPopCurrent_v2)                                 \
	X("cuCtxGetDevice", 2000, 0, cuCtxGetDevice)                                      \
	X("cuCtxSynchronize", 2000, 0, cuCtxSynchronize)                                  \
	X("cuCtxEnablePeerAccess", 4000, 0, cuCtxEnablePeerAccess)                        \
	X("cuDeviceCanAccessPeer", 4000, 0, cuDeviceCanAccessPeer)                        \
	X("cuGetErrorString", 6000, 0, cuGetErrorString)                                  \
	X("cuGetErrorName", 6000, 0, cuGetErrorName)                                      \
	X("cuMemAlloc", 2000, 0, cuMemAlloc)                                              \
	X("cuMemAlloc", 3020, 0, cuMemAlloc_v2)                                           \
	X("cuMemAllocPitch", 2000, 0, cuMemAllocPitch)                                    \
	X("cuMemAllocPitch", 3020, 0, cuMemAllocPitch_v2)                                 \
	X("cuMemFree", 2000, 0, cuMemFree)                                                \
	X("cuMemFree", 3020, 0, cuMemFree_v2)                                             \
	X("cuMemGetInfo", 2000, 0, cuMemGetInfo)                                          \
	X("cuMemGetInfo", 3020, 0, cuMemGetInfo_v2)                                       \
	X("cuMemGetAddressRange", 2000, 0, cuMemGetAddressRange)                          \
	X("cuMemGetAddressRange", 3020, 0, cuMemGetAddressRange_v2)                       \
	X("cuMemHostAlloc", 2020, 0, cuMemHostAlloc)                                      \
	X("cuMemAllocHost", 2000, 0, cuMemAllocHost)                                      \
	X("cuMemAllocHost", 3020, 0, cuMemAllocHost_v2)                                   \
	X("cuMemFreeHost", 2000, 0, cuMemFreeHost)                                        \
	X("cuMemHostGetDevicePointer", 2020, 0, cuMemHostGetDevicePointer)                \
	X("cuMemHostGetDevicePointer", 3020, 0, cuMemHostGetDevicePointer_v2)             \
	X("cuMemAllocManaged", 6000, 0, cuMemAllocManaged)                                \
	X("cuMemPrefetchAsync", 8000, 0, cuMemPrefetchAsync)                              \
	X("cuMemPrefetchAsync", 8000, 1, cuMemPrefetchAsync_ptsz)                         \
	X("cuMemPrefetchAsync", 12020, 0, cuMemPrefetchAsync_v2)                          \
	X("cuMemPrefetchAsync", 12020, 1, cuMemPrefetchAsync_v2_ptsz)                     \
	X("cuPointerGetAttribute", 4000, 0, cuPointerGetAttribute)                        \
	X("cuIpcGetMemHandle", 4010, 0, cuIpcGetMemHandle)                                \
	X("cuMemcpy", 4000, 0, cuMemcpy)                                                  \
	X("cuMemcpy", 7000, 1, cuMemcpy_ptds)                                             \
	X("cuMemcpyAsync", 4000, 0, cuMemcpyAsync)                                        \
	X("cuMemcpyAsync", 7000, 1, cuMemcpyAsync_ptsz)                                   \
	X("cuMemcpyHtoD", 2000, 0, cuMemcpyHtoD)                                          \
	X("cuMemcpyHtoD", 3020, 0, cuMemcpyHtoD_v2)                                       \
	X("cuMemcpyHtoD", 7000, 1, cuMemcpyHtoD_v2_ptds)                                  \
	X("cuMemcpyDtoH", 2000, 0, cuMemcpyDtoH)                                          \
	X("cuMemcpyDtoH", 3020, 0, cuMemcpyDtoH_v2)                                       \
	X("cuMemcpyDtoH", 7000, 1, cuMemcpyDtoH_v2_ptds)                                  \
	X("cuMemcpyDtoD", 2000, 0, cuMemcpyDtoD)                                          \
	X("cuMemcpyDtoD", 3020, 0, cuMemcpyDtoD_v2)                                       \
	X("cuMemcpyDtoD", 7000, 1, cuMemcpyDtoD_v2_ptds)                                  \
	X("cuMemcpyHtoDAsync", 2000, 0, cuMemcpyHtoDAsync)                                \
	X("cuMemcpyHtoDAsync", 3020, 0, cuMemcpyHtoDAsync_v2)                             \
	X("cuMemcpyHtoDAsync", 7000, 1, cuMemcpyHtoDAsync_v2_ptsz)                        \
	X("cuMemcpyDtoHAsync", 2000, 0, cuMemcpyDtoHAsync)                                \
	X("cuMemcpyDtoHAsync", 3020, 0, cuMemcpyDtoHAsync_v2)                             \
	X("cuMemcpyDtoHAsync", 7000, 1, cuMemcpyDtoHAsync_v2_ptsz)                        \
	X("cuMemcpyDtoDAsync", 3000, 0, cuMemcpyDtoDAsync)                                \
	X("cuMemcpyDtoDAsync", 3020, 0, cuMemcpyDtoDAsync_v2)                             \
	X("cuMemcpyDtoDAsync", 7000, 1, cuMemcpyDtoDAsync_v2_ptsz)                        \
	X("cuMemsetD8", 2000, 0, cuMemsetD8)                                              \
	X("cuMemsetD8", 3020, 0, cuMemsetD8_v2)                                           \
	X("cuMemsetD8", 7000, 1, cuMemsetD8_v2_ptds)                                      \
	X("cuMemsetD16", 2000, 0, cuMemsetD16)                                            \
	X("cuMemsetD16", 3020, 0, cuMemsetD16_v2)                                         \
	X("cuMemsetD16", 7000, 1, cuMemsetD16_v2_ptds)                                    \
	X("cuMemsetD32", 2000, 0, cuMemsetD32)                                            \
	X("cuMemsetD32", 3020, 0, cuMemsetD32_v2)                                         \
	X("cuMemsetD32", 7000, 1, cuMemsetD32_v2_ptds)                                    \
	X("cuMemsetD8Async", 3020, 0, cuMemsetD8Async)                                    \
	X("cuMemsetD8Async", 7000, 1, cuMemsetD8Async_ptsz)                               \
	X("cuMemsetD16Async", 3020, 0, cuMemsetD16Async)                                  \
	X("cuMemsetD16Async", 7000, 1, cuMemsetD16Async_ptsz)                             \
	X("cuMemsetD32Async", 3020, 0, cuMemsetD32Async)                                  \
	X("cuMemsetD32Async", 7000, 1, cuMemsetD32Async_ptsz)                             \
	X("cuMemcpy2D", 3020, 0, cuMemcpy2D_v2)                                           \
	X("cuMemcpy2D", 7000, 1, cuMemcpy2D_v2_ptds)                                      \
	X("cuMemcpy2DUnaligned", 3020, 0, cuMemcpy2DUnaligned_v2)                         \
	X("cuMemcpy2DUnaligned", 7000, 1, cuMemcpy2DUnaligned_v2_ptds)                    \
	X("cuMemcpy2DAsync", 3020, 0, cuMemcpy2DAsync_v2)                                 \
	X("cuMemcpy2DAsync", 7000, 1, cuMemcpy2DAsync_v2_ptsz)                            \
	X("cuMemcpy3D", 3020, 0, cuMemcpy3D_v2)                                           \
	X("cuMemcpy3D", 7000, 1, cuMemcpy3D_v2_ptds)                                      \
	X("cuMemcpy3DAsync", 3020, 0, cuMemcpy3DAsync_v2)                                 \
	X("cuMemcpy3DAsync", 7000, 1, cuMemcpy3DAsync_v2_ptsz)                            \
	X("cuMemcpy3DPeer", 4000, 0, cuMemcpy3DPeer)                                      \
	X("cuMemcpy3DPeer", 7000, 1, cuMemcpy3DPeer_ptds)                                 \
	X("cuMemcpy3DPeerAsync", 4000, 0, cuMemcpy3DPeerAsync)                            \
	X("cuMemcpy3DPeerAsync", 7000, 1, cuMemcpy3DPeerAsync_ptsz)                       \
	X("cuMemcpyPeer", 4000, 0, cuMemcpyPeer)                                          \
	X("cuMemcpyPeer", 7000, 1, cuMemcpyPeer_ptds)                                     \
	X("cuMemcpyPeerAsync", 4000, 0, cuMemcpyPeerAsync)                                \
	X("cuMemcpyPeerAsync", 7000, 1, cuMemcpyPeerAsync_ptsz)                           \
	X("cuMemAllocAsync", 11020, 0, cuMemAllocAsync)                                   \
	X("cuMemAllocAsync", 11020, 1, cuMemAllocAsync_ptsz)                              \
	X("cuMemFreeAsync", 11020, 0, cuMemFreeAsync)                                     \
	X("cuMemFreeAsync", 11020, 1, cuMemFreeAsync_ptsz)                                \
	X("cuMemAllocFromPoolAsync", 11020, 0, cuMemAllocFromPoolAsync)                   \
	X("cuMemAllocFromPoolAsync", 11020, 1, cuMemAllocFromPoolAsync_ptsz)              \
	X("cuMemPoolCreate", 11020, 0, cuMemPoolCreate)                                   \
	X("cuMemPoolDestroy", 11020, 0, cuMemPoolDestroy)                                 \
	X("cuMemPoolTrimTo", 11020, 0, cuMemPoolTrimTo)                                   \
	X("cuMemPoolExportToShareableHandle", 11020, 0, cuMemPoolExportToShareableHandle) \
	X("cuDeviceGetDefaultMemPool", 11020, 0, cuDeviceGetDefaultMemPool)               \
	X("cuDeviceGetMemPool", 11020, 0, cuDeviceGetMemPool)                             \
	X("cuDeviceSetMemPool", 11020, 0, cuDeviceSetMemPool)                             \
	X("cuStreamCreate", 2000, 0, cuStreamCreate)                                      \
	X("cuStreamDestroy", 2000, 0, cuStreamDestroy)                                    \
	X("cuStreamDestroy", 4000, 0, cuStreamDestroy_v2)                                 \
	X("cuStreamSynchronize", 2000, 0, cuStreamSynchronize)                            \
	X("cuStreamSynchronize", 7000, 1, cuStreamSynchronize_ptsz)                       \
	X("cuStreamQuery", 2000, 0, cuStreamQuery)                                        \
	X("cuStreamQuery", 7000, 1, cuStreamQuery_ptsz)                                   \
	X("cuStreamWaitEvent", 3020, 0, cuStreamWaitEvent)                                \
	X("cuStreamWaitEvent", 7000, 1, cuStreamWaitEvent_ptsz)                           \
	X("cuEventCreate", 2000, 0, cuEventCreate)                                        \
	X("cuEventDestroy", 2000, 0, cuEventDestroy)                                      \
	X("cuEventDestroy", 4000, 0, cuEventDestroy_v2)                                   \
	X("cuEventRecord", 2000, 0, cuEventRecord)                                        \
	X("cuEventRecord", 7000, 1, cuEventRecord_ptsz)                                   \
	X("cuEventQuery", 2000, 0, cuEventQuery)                                          \
	X("cuEventSynchronize", 2000, 0, cuEventSynchronize)                              \
	X("cuEventElapsedTime", 2000, 0, cuEventElapsedTime)                              \
	X("cuEventElapsedTime", 12080, 0, cuEventElapsedTime_v2)                          \
	X("cuLaunchHostFunc", 10000, 0, cuLaunchHostFunc)                                 \
	X("cuLaunchHostFunc", 10000, 1, cuLaunchHostFunc_ptsz)                            \
	X("cuModuleLoadData", 2000, 0, cuModuleLoadData)                                  \
	X("cuModuleUnload", 2000, 0, cuModuleUnload)                                      \
	X("cuModuleGetFunction", 2000, 0, cuModuleGetFunction)                            \
	X("cuFuncGetParamInfo", 12040, 0, cuFuncGetParamInfo)                             \
	X("cuFuncGetName", 12030, 0, cuFuncGetName)                                       \
	X("cuLaunchKernel", 4000, 0, cuLaunchKernel)                                      \
	X("cuLaunchKernel", 7000, 1, cuLaunchKernel_ptsz)                                 \
	X("cuLaunchCooperativeKernel", 9000, 0, cuLaunchCooperativeKernel)                \
	X("cuLaunchCooperativeKernel", 9000, 1, cuLaunchCooperativeKernel_ptsz)           \
	X("cuLaunchKernelEx", 11060, 0, cuLaunchKernelEx)                                 \
	X("cuLaunchKernelEx", 11060, 1, cuLaunchKernelEx_ptsz)                            \
	X("cuMemGetAllocationGranularity", 10020, 0, cuMemGetAllocationGranularity)       \
	X("cuMemAddressReserve", 10020, 0, cuMemAddressReserve)                           \
	X("cuMemAddressFree", 10020, 0, cuMemAddressFree)                                 \
	X("cuMemCreate", 10020, 0, cuMemCreate)                                           \
	X("cuMemRelease", 10020, 0, cuMemRelease)                                         \
	X("cuMemMap", 10020, 0, cuMemMap)                                                 \
	X("cuMemUnmap", 10020, 0, cuMemUnmap)                                             \
	X("cuMemSetAccess", 10020, 0, cuMemSetAccess)                                     \
	X("cuMemRetainAllocationHandle", 11000, 0, cuMemRetainAllocationHandle)           \
	X("cuMemGetAllocationPropertiesFromHandle", 10020, 0,                             \
	  cuMemGetAllocationPropertiesFromHandle)                                         \
	X("cuGetProcAddress", 11030, 0, cuGetProcAddress)                                 \
	X("cuGetProcAddress", 12000, 0, cuGetProcAddress_v2)                              \
	X("cuGetExportTable", 3000, 0, cuGetExportTable)

/* Hidden aliases: the table's addresses are this library's own functions, not
 * whatever an LD_PRELOAD shim interposes under the same names (a shim that asks
 * the driver for its functions must not get its own wrappers back). */
#define LOCAL_ALIAS(name, version, ptds, fn) \
	extern __typeof__(fn) local_##fn __attribute__((alias(#fn), visibility("hidden")));
PROCS(LOCAL_ALIAS)

struct proc {
	const char *name;
	int version, ptds;
	void *fn;
};

static const struct proc procs[] = {
#define PROC_ENTRY(name, version, ptds, fn) {name, version, ptds, (void *)local_##fn},
    PROCS(PROC_ENTRY)};

static CUresult get_proc(const char *symbol, void **pfn, int version, cuuint64_t flags,
                         CUdriverProcAddressQueryResult *status)
{
	if (!symbol || !pfn ||
	    (flags & ~(cuuint64_t)(CU_GET_PROC_ADDRESS_LEGACY_STREAM |
	                           CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)))
		return CUDA_ERROR_INVALID_VALUE;
	int want_ptds = !!(flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM), known = 0;
	const struct proc *best[2] = {NULL, NULL}; /* legacy, per-thread */
	for (size_t i = 0; i < sizeof(procs) / sizeof(procs[0]); i++) {
		const struct proc *p = &procs[i];
		if (strcmp(p->name, symbol) != 0)
			continue;
		known = 1;
		if (p->version <= version &&
		    (!best[p->ptds] || p->version > best[p->ptds]->version))
			best[p->ptds] = p;
	}
	/* per-thread when asked for and available at that version, else the plain one */
	const struct proc *p = want_ptds && best[1] ? best[1] : best[0];
	*pfn = p ? p->fn : NULL;
	if (status)
		*status = p       ? CU_GET_PROC_ADDRESS_SUCCESS
		          : known ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
		                  : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
	return p ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

/* ---- fakecu.h ------------------------------------------------------------------------ */

EXPORT int fakecu_register_kernel(const char *name, fakecu_kernel_fn fn, int nparams,
                                  const size_t *sizes)
{
	if (!name || !*name || !fn || nparams < 0 || (nparams && !sizes))
		return -1;
	struct CUfunc_st *f = calloc(1, sizeof(*f));
	size_t n = nparams ? (size_t)nparams : 1;
	if (!f || !(f->name = strdup(name)) || !(f->size = calloc(n, sizeof(size_t))) ||
	    !(f->off = calloc(n, sizeof(size_t))))
		goto fail;
	f->fn = fn;
	f->nparams = nparams;
	size_t at = 0;
	for (int i = 0; i < nparams; i++) {
		size_t s = sizes[i], align = 1;
		if (!s || s > KARGS_MAX)
			goto fail;
		while (align < s && align < 8)
			align *= 2;
		at = (at + align - 1) / align * align;
		f->size[i] = s;
		f->off[i] = at;
		at += s;
	}
	f->total = at;
	if (KARGS_HDR + at > KARGS_MAX)
		goto fail;
	pthread_mutex_lock(&g.lock);
	int rc = kernel_find(name) ? -1 : 0;
	if (rc == 0 && g.nkern == g.cap_kern) {
		size_t cap = g.cap_kern ? 2 * g.cap_kern : 16;
		struct CUfunc_st **t = realloc(g.kern, cap * sizeof(*t));
		if (t) {
			g.kern = t;
			g.cap_kern = cap;
		} else {
			rc = -1;
		}
	}
	if (rc == 0 && hs_add(f, H_FUNC) < 0)
		rc = -1;
	if (rc == 0)
		g.kern[g.nkern++] = f;
	pthread_mutex_unlock(&g.lock);
	if (rc == 0)
		return 0;
fail:
	if (f) {
		free(f->name);
		free(f->size);
		free(f->off);
	}
	free(f);
	return -1;
}

EXPORT uint64_t fakecu_copied(enum fakecu_copy kind)
{
	if ((unsigned)kind >= FAKECU_COPY_KINDS)
		return 0;
	return __atomic_load_n(&g.copied[kind], __ATOMIC_RELAXED);
}

EXPORT uint64_t fakecu_launches(void)
{
	return __atomic_load_n(&g.launches, __ATOMIC_RELAXED);
}

EXPORT uint64_t fakecu_device_used(void)
{
	return fakecu_device_used_on(0);
}

EXPORT uint64_t fakecu_device_peak(void)
{
	return fakecu_device_peak_on(0);
}

EXPORT uint64_t fakecu_device_used_on(int dev)
{
	return dev >= 0 && dev < MAX_DEV ? __atomic_load_n(&g.used[dev], __ATOMIC_RELAXED) : 0;
}

EXPORT uint64_t fakecu_device_peak_on(int dev)
{
	return dev >= 0 && dev < MAX_DEV ? __atomic_load_n(&g.peak[dev], __ATOMIC_RELAXED) : 0;
}

EXPORT uint64_t fakecu_prefetched(void)
{
	return __atomic_load_n(&g.prefetched, __ATOMIC_RELAXED);
}

EXPORT uint64_t fakecu_prefetched_on(int dev)
{
	return dev >= 0 && dev < MAX_DEV ? __atomic_load_n(&g.prefetched_on[dev], __ATOMIC_RELAXED)
	                                 : 0;
}
