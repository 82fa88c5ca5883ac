/* device/host.c — the host backend: N emulated GPUs in host memory.
 *
 * Device memory is host memory with a capacity per device (enforced in
 * device.c). Physical chunks are ranges of one memfd per device, so a chunk's
 * bytes survive being unmapped and mapped again elsewhere; a reserved range that
 * has no chunk mapped is PROT_NONE, so touching non-resident memory faults at
 * once, as a GPU's MMU would. Each stream is a worker thread running its ops in
 * order: copies are memcpy (optionally throttled to the profile's link
 * bandwidths), kernels call the CPU function (on a device the profile makes
 * slower, key speed, the stream then sleeps until 1/speed of the time passed). Each record of an event makes a
 * capture (a reference-counted completion flag) that the record op completes;
 * the event points at its latest capture, and a stream wait holds the capture
 * current at the time of the call, so re-recording the event never releases a
 * wait queued earlier (as with CUDA). Captures complete under one mutex and
 * condition variable.
 */
#include "device/internal.h"

#include "common/log.h"
#include "common/stats.h"

#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define HOST_GRANULARITY     (64u << 10)
#define HOST_DEFAULT_DEVICES 2
#define HOST_DEFAULT_MEM     (1ull << 30)
#define HOST_ARGS_INLINE     256

/* A free range of a device's memory file. */
struct host_range {
	uint64_t off, len;
};

struct host_dev {
	int fd;             /* memfd holding every chunk of this device */
	uint64_t file_size; /* twice the capacity: chunks never need compaction */
	struct host_range *free;
	size_t nfree, cap_free;
};

#define HOST_CHUNK_FILE (1ull << 40) /* host chunks' memory file: sparse, no capacity */

/* Link reservations for throttling: the time each link is busy until. */
enum { LINK_H2D, LINK_D2H, LINK_P2P_OUT, LINK_KINDS };

/* One record of an event: complete once the work queued before the record is.
 * Referenced by its event (while it is the latest record), by the record op and
 * by every wait op queued while it was the latest; freed at the last reference. */
struct host_capture {
	unsigned refs; /* under ev_lock */
	int done;
	int err_dev; /* >= 0: work it covers was dropped because this device failed */
	double time;
	struct host_capture *next_free;
};

struct host_ctx {
	struct host_dev dev[DEV_MAX];
	struct host_dev hostmem; /* host chunks (DEV_HOST) */
	pthread_mutex_t lock;    /* free lists, link reservations */
	pthread_mutex_t ev_lock;
	pthread_cond_t ev_cond;         /* any capture completed */
	struct host_capture *cap_spare; /* free captures, under ev_lock */
	int throttle;
	double link_busy[DEV_MAX][LINK_KINDS];
	double host_busy[2]; /* shared host link: [0] into devices, [1] out of them */
	/* fault injection: a failed device drops its work (dev_fail, SPILL_HOST_FAIL
	 * "DEV:N": DEV fails when its Nth kernel is about to run) */
	_Atomic int failed[DEV_MAX];
	int fail_dev;
	long fail_at;
	_Atomic long kernels[DEV_MAX];
	/* adversarial timing (SPILL_HOST_JITTER "DEV:US[:SEED]"): a kernel on
	 * jitter_dev (HOST_JITTER_ALL: any device) starts 0..jitter_us late */
	int jitter_dev;
	long jitter_us;
	uint64_t jitter_seed;
	_Atomic uint64_t nstreams; /* streams created: each gets its own draw sequence */
	/* pinned host memory now (dev_host_alloc, committed parts of growing
	 * regions, host chunks) and its limit (SPILL_HOST_PIN_LIMIT, 0: none);
	 * under lock */
	uint64_t pinned, pin_limit;
};

enum { HOST_JITTER_NONE = -1, HOST_JITTER_ALL = -2 };

enum host_op_kind { OP_COPY, OP_MEMSET, OP_KERNEL, OP_CALLBACK, OP_RECORD, OP_WAIT };

struct host_op {
	enum host_op_kind kind;
	struct host_op *next;
	union {
		struct {
			void *dst;
			const void *src;
			size_t bytes;
			int src_dev, dst_dev;
			int value;
		} mem;
		struct {
			void (*cpu)(const void *);
			void *args; /* inline or heap */
			size_t size;
		} kern;
		struct {
			void (*fn)(void *);
			void *arg;
		} cb;
		struct host_capture *cap; /* OP_RECORD completes it, OP_WAIT waits for it */
	} u;
	_Alignas(16) char inline_args[HOST_ARGS_INLINE];
};

struct host_stream {
	struct dev_stream *s;
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t work, idle;
	struct host_op *head, *tail, *spare;
	uint64_t submitted, completed;
	int stop;
	int dropped_dev; /* an op since the last record was dropped: its failed device, else -1 */
	uint64_t rng;    /* SPILL_HOST_JITTER's draws (xorshift64*), this stream's own */
};

struct host_event {
	struct host_capture *cur; /* the latest record; NULL = never recorded */
};

static struct host_ctx *hctx(const struct dev_ctx *ctx)
{
	return ctx->impl;
}

/* ---- open / close ------------------------------------------------------------- */

/* Parses SPILL_HOST_JITTER, "DEV:US[:SEED]" (DEV a device below n, or *; US
 * >= 1; SEED any unsigned integer, 1 when absent). Returns 0 or -EINVAL. */
static int parse_jitter(struct host_ctx *h, const char *spec, int n)
{
	h->jitter_dev = HOST_JITTER_NONE;
	if (!spec || !*spec)
		return 0;
	const char *f = spec;
	char *end = (char *)f;
	long d = -1, us = 0;
	unsigned long long seed = 1;
	if (*f == '*') {
		d = HOST_JITTER_ALL;
		end = (char *)f + 1;
	} else if (*f >= '0' && *f <= '9') {
		d = strtol(f, &end, 10);
		if (d >= n)
			d = -1;
	}
	if (d != -1 && end[0] == ':' && end[1] >= '0' && end[1] <= '9')
		us = strtol(end + 1, &end, 10);
	if (us >= 1 && end[0] == ':') {
		if (end[1] >= '0' && end[1] <= '9')
			seed = strtoull(end + 1, &end, 10);
		else
			us = 0;
	}
	if (*end || d == -1 || us < 1 || us > 1000000)
		return sp_error(-EINVAL,
		                "SPILL_HOST_JITTER: '%s' is not DEV:US[:SEED] (DEV a device "
		                "0..%d or *, US 1..1000000 microseconds)",
		                spec, n - 1);
	h->jitter_dev = (int)d;
	h->jitter_us = us;
	h->jitter_seed = seed;
	return 0;
}

/* Sleeps before a kernel of stream st when SPILL_HOST_JITTER covers its device:
 * a uniform draw in [0, jitter_us] us from the stream's own sequence. */
static void jitter(struct host_ctx *h, struct host_stream *st)
{
	int dev = st->s->dev;
	if (h->jitter_dev == HOST_JITTER_NONE || dev < 0 ||
	    (h->jitter_dev != HOST_JITTER_ALL && h->jitter_dev != dev))
		return;
	st->rng ^= st->rng >> 12, st->rng ^= st->rng << 25, st->rng ^= st->rng >> 27;
	uint64_t r = (st->rng * 0x2545F4914F6CDD1Dull) >> 11;
	long us = (long)(r % (uint64_t)(h->jitter_us + 1));
	struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {
	}
}

static int host_open(struct dev_ctx *ctx, const struct dev_config *cfg)
{
	int n = cfg->ndevices ? cfg->ndevices : HOST_DEFAULT_DEVICES;
	uint64_t cap = cfg->device_mem ? cfg->device_mem : HOST_DEFAULT_MEM;
	if (cap % HOST_GRANULARITY)
		cap += HOST_GRANULARITY - cap % HOST_GRANULARITY;
	struct host_ctx *h = calloc(1, sizeof(*h));
	if (!h)
		return sp_error(-ENOMEM, "host backend: out of memory");
	pthread_mutex_init(&h->lock, NULL);
	pthread_mutex_init(&h->ev_lock, NULL);
	pthread_cond_init(&h->ev_cond, NULL);
	h->throttle = cfg->link_throttle;
	h->pin_limit = cfg->host_pin_limit;
	h->fail_dev = -1;
	if (cfg->host_fail && *cfg->host_fail) {
		const char *f = cfg->host_fail;
		char *end = (char *)f;
		long d = -1, at = 0;
		if (*f >= '0' && *f <= '9')
			d = strtol(f, &end, 10);
		if (d >= 0 && end[0] == ':' && end[1] >= '0' && end[1] <= '9')
			at = strtol(end + 1, &end, 10);
		if (*end || d < 0 || d >= n || at < 1) {
			pthread_cond_destroy(&h->ev_cond);
			pthread_mutex_destroy(&h->ev_lock);
			pthread_mutex_destroy(&h->lock);
			free(h);
			return sp_error(
			    -EINVAL, "SPILL_HOST_FAIL: '%s' is not DEV:N (a device 0..%d, N >= 1)",
			    cfg->host_fail, n - 1);
		}
		h->fail_dev = (int)d;
		h->fail_at = at;
	}
	int jrc = parse_jitter(h, cfg->host_jitter, n);
	if (jrc) {
		pthread_cond_destroy(&h->ev_cond);
		pthread_mutex_destroy(&h->ev_lock);
		pthread_mutex_destroy(&h->lock);
		free(h);
		return jrc;
	}
	ctx->impl = h;
	ctx->ndev = n;
	/* Emulated GPUs reach each other with a memcpy: peer copies always work, at
	 * the profile's peer bandwidth or, for a one-GPU profile, its H2D one. */
	if (ctx->prof.p2p_bw <= 0)
		ctx->prof.p2p_bw = ctx->prof.h2d_bw;
	dev_info_from_profile(ctx, cap, HOST_GRANULARITY);
	for (int d = 0; d < n; d++) {
		snprintf(ctx->info[d].name, sizeof(ctx->info[d].name), "emulated %.54s",
		         ctx->prof.device_name);
		h->dev[d].fd = -1;
	}
	h->hostmem.fd = -1;
	for (int d = 0; d <= n; d++) {
		struct host_dev *hd = d < n ? &h->dev[d] : &h->hostmem;
		char name[32];
		snprintf(name, sizeof(name), d < n ? "spill-dev%d" : "spill-host", d);
		hd->fd = memfd_create(name, MFD_CLOEXEC);
		hd->file_size = d < n ? 2 * cap : HOST_CHUNK_FILE;
		hd->cap_free = 64;
		hd->free = malloc(hd->cap_free * sizeof(*hd->free));
		if (hd->fd < 0 || !hd->free || ftruncate(hd->fd, (off_t)hd->file_size) < 0) {
			int e = errno ? errno : ENOMEM;
			ctx->ops->close(ctx);
			return sp_error(-e, "host backend: %s memory file: %s", name, strerror(e));
		}
		hd->free[0] = (struct host_range){0, hd->file_size};
		hd->nfree = 1;
	}
	ctx->host_gran = HOST_GRANULARITY;
	ctx->host_commit_gran = 4096; /* growing host regions commit whole pages */
	return 0;
}

/* The memory file of a chunk's place. */
static struct host_dev *chunk_file(struct host_ctx *h, int dev)
{
	return dev == DEV_HOST ? &h->hostmem : &h->dev[dev];
}

static void host_close(struct dev_ctx *ctx)
{
	struct host_ctx *h = hctx(ctx);
	if (!h)
		return;
	for (int d = 0; d < DEV_MAX; d++) {
		if (h->dev[d].fd >= 0 && d < ctx->ndev)
			close(h->dev[d].fd);
		free(h->dev[d].free);
	}
	if (h->hostmem.fd >= 0)
		close(h->hostmem.fd);
	free(h->hostmem.free);
	while (h->cap_spare) { /* streams are gone: every capture is back here */
		struct host_capture *c = h->cap_spare;
		h->cap_spare = c->next_free;
		free(c);
	}
	pthread_cond_destroy(&h->ev_cond);
	pthread_mutex_destroy(&h->ev_lock);
	pthread_mutex_destroy(&h->lock);
	free(h);
	ctx->impl = NULL;
}

/* ---- memory -------------------------------------------------------------------- */

static size_t page_round(size_t b)
{
	size_t pg = 4096;
	return (b + pg - 1) / pg * pg;
}

static int map_anon(size_t bytes, int prot, const char *what, void **out)
{
	int flags = MAP_PRIVATE | MAP_ANONYMOUS | (prot == PROT_NONE ? MAP_NORESERVE : 0);
	void *p = mmap(NULL, page_round(bytes), prot, flags, -1, 0);
	if (p == MAP_FAILED)
		return sp_error(-ENOMEM, "host backend: cannot map %zu bytes of %s: %s", bytes,
		                what, strerror(errno));
	*out = p;
	return 0;
}

static int unmap(void *p, size_t bytes)
{
	if (munmap(p, page_round(bytes)) < 0)
		return sp_error(-errno, "host backend: munmap %p: %s", p, strerror(errno));
	return 0;
}

static int host_mem_alloc(struct dev_ctx *ctx, int dev, size_t bytes, void **out)
{
	return map_anon(bytes, PROT_READ | PROT_WRITE, "device memory", out);
}

static int host_mem_free(struct dev_ctx *ctx, int dev, void *ptr, size_t bytes)
{
	return unmap(ptr, bytes);
}

/* Pinned host memory counts against SPILL_HOST_PIN_LIMIT: -ENOMEM past it, as
 * cudaHostAlloc or cuMemCreate fail when the OS or driver has no more to pin. */
static int pin_take(struct dev_ctx *ctx, size_t bytes, const char *what)
{
	struct host_ctx *h = hctx(ctx);
	int rc = 0;
	pthread_mutex_lock(&h->lock);
	if (h->pin_limit && (h->pinned > h->pin_limit || bytes > h->pin_limit - h->pinned)) {
		char a[32], b[32], c[32];
		rc = sp_error(-ENOMEM,
		              "host backend: cannot pin %s more for %s: %s are pinned and "
		              "SPILL_HOST_PIN_LIMIT is %s",
		              sp_format_size(bytes, a, sizeof(a)), what,
		              sp_format_size(h->pinned, b, sizeof(b)),
		              sp_format_size(h->pin_limit, c, sizeof(c)));
	} else {
		h->pinned += bytes;
	}
	pthread_mutex_unlock(&h->lock);
	return rc;
}

static void pin_put(struct dev_ctx *ctx, size_t bytes)
{
	struct host_ctx *h = hctx(ctx);
	pthread_mutex_lock(&h->lock);
	h->pinned -= bytes;
	pthread_mutex_unlock(&h->lock);
}

static int host_host_alloc(struct dev_ctx *ctx, size_t bytes, void **out)
{
	SP_CHECK(pin_take(ctx, bytes, "pinned host memory"));
	int rc = map_anon(bytes, PROT_READ | PROT_WRITE, "pinned host memory", out);
	if (rc < 0)
		pin_put(ctx, bytes);
	return rc;
}

static int host_host_free(struct dev_ctx *ctx, void *ptr, size_t bytes)
{
	int rc = unmap(ptr, bytes);
	if (rc == 0)
		pin_put(ctx, bytes);
	return rc;
}

/* A growing host region: address space nothing backs (PROT_NONE, no commit
 * charge), so touching a part not committed faults. */
static int host_host_reserve(struct dev_ctx *ctx, size_t bytes, void **out, int *pinned_all)
{
	*pinned_all = 0;
	return map_anon(bytes, PROT_NONE, "a growing host region", out);
}

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif

/* The kernel's estimate of memory available without swapping (MemAvailable),
 * in bytes; 0 when unknown. */
static uint64_t mem_available(void)
{
	FILE *f = fopen("/proc/meminfo", "r");
	char line[128];
	unsigned long long kb = 0;
	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1)
			break;
	if (f)
		fclose(f);
	return (uint64_t)kb << 10;
}

/* Pinning is emulated as residency: the part becomes read-write and its pages
 * are faulted in now (as cudaHostAlloc and cuMemCreate touch every page), so
 * a commit costs what pinning costs in time and RSS, and never later. Memory
 * the machine does not have is refused (-ENOMEM) before it is touched, as a
 * driver refuses to pin it, rather than left to the OOM killer: a commit must
 * leave an eighth of the available memory (at most 1 GiB) free. */
static int host_host_commit(struct dev_ctx *ctx, void *va, size_t bytes)
{
	uint64_t avail = mem_available(), keep = avail / 8 < (1ull << 30) ? avail / 8 : 1ull << 30;
	if (avail && bytes > avail - keep) {
		char a[32], b[32];
		return sp_error(-ENOMEM,
		                "host backend: cannot pin %s: the machine has %s available "
		                "(MemAvailable)",
		                sp_format_size(bytes, a, sizeof(a)),
		                sp_format_size(avail, b, sizeof(b)));
	}
	SP_CHECK(pin_take(ctx, bytes, "a growing host region"));
	int rc = 0;
	if (mprotect(va, bytes, PROT_READ | PROT_WRITE) < 0) {
		rc = sp_error(-errno, "host backend: cannot commit %zu bytes at %p: %s", bytes, va,
		              strerror(errno));
	} else if (madvise(va, bytes, MADV_POPULATE_WRITE) < 0) {
		int e = errno;
		if (e == EINVAL) { /* a kernel before 5.14: touch each page */
			for (size_t o = 0; o < bytes; o += 4096)
				((volatile char *)va)[o] = 0;
		} else {
			rc = sp_error(-ENOMEM, "host backend: cannot fault in %zu bytes at %p: %s",
			              bytes, va, strerror(e));
			if (mmap(va, bytes, PROT_NONE,
			         MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1,
			         0) == MAP_FAILED)
				SP_WARN(DEV, "host backend: cannot undo a commit at %p", va);
		}
	}
	if (rc < 0)
		pin_put(ctx, bytes);
	return rc;
}

static int host_host_uncommit(struct dev_ctx *ctx, void *va, size_t bytes)
{
	/* back to inaccessible address space; the pages go */
	void *p = mmap(va, bytes, PROT_NONE,
	               MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED)
		return sp_error(-ENOMEM, "host backend: cannot uncommit %zu bytes at %p: %s", bytes,
		                va, strerror(errno));
	pin_put(ctx, bytes);
	return 0;
}

static int host_host_release(struct dev_ctx *ctx, void *va, size_t bytes)
{
	return unmap(va, bytes);
}

static int host_va_reserve(struct dev_ctx *ctx, int dev, size_t bytes, void **out)
{
	/* Over-reserve by one granule and trim, so the range is granule-aligned. */
	size_t g = HOST_GRANULARITY;
	void *raw = NULL;
	SP_CHECK(map_anon(bytes + g, PROT_NONE, "address space", &raw));
	uintptr_t a = ((uintptr_t)raw + g - 1) & ~(uintptr_t)(g - 1);
	size_t head = a - (uintptr_t)raw, tail = g - head;
	if (head)
		munmap(raw, head);
	if (tail)
		munmap((char *)a + bytes, tail);
	*out = (void *)a;
	return 0;
}

static int host_va_release(struct dev_ctx *ctx, void *va, size_t bytes)
{
	return unmap(va, bytes);
}

static int host_phys_create(struct dev_ctx *ctx, struct dev_phys *ph)
{
	struct host_ctx *h = hctx(ctx);
	struct host_dev *hd = chunk_file(h, ph->dev);
	if (ph->dev == DEV_HOST)
		SP_CHECK(pin_take(ctx, ph->bytes, "a host chunk"));
	pthread_mutex_lock(&h->lock);
	size_t i = 0;
	while (i < hd->nfree && hd->free[i].len < ph->bytes)
		i++;
	int rc = 0;
	if (i == hd->nfree) {
		rc = sp_error(-ENOMEM,
		              "host backend: device %d: no free range of %zu bytes in its "
		              "memory file (fragmented)",
		              ph->dev, ph->bytes);
	} else {
		ph->off = hd->free[i].off;
		hd->free[i].off += ph->bytes;
		hd->free[i].len -= ph->bytes;
		if (!hd->free[i].len) {
			memmove(&hd->free[i], &hd->free[i + 1],
			        (hd->nfree - i - 1) * sizeof(*hd->free));
			hd->nfree--;
		}
	}
	pthread_mutex_unlock(&h->lock);
	if (rc < 0 && ph->dev == DEV_HOST)
		pin_put(ctx, ph->bytes);
	return rc;
}

static int host_phys_destroy(struct dev_ctx *ctx, struct dev_phys *ph)
{
	struct host_ctx *h = hctx(ctx);
	struct host_dev *hd = chunk_file(h, ph->dev);
	/* Give the pages back; the range reads as zeros if handed out again. */
	if (fallocate(hd->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)ph->off,
	              (off_t)ph->bytes) < 0)
		SP_WARN(DEV, "host backend: cannot release a chunk's pages: %s", strerror(errno));
	pthread_mutex_lock(&h->lock);
	size_t i = 0;
	while (i < hd->nfree && hd->free[i].off < ph->off)
		i++;
	int merge_prev = i > 0 && hd->free[i - 1].off + hd->free[i - 1].len == ph->off;
	int merge_next = i < hd->nfree && ph->off + ph->bytes == hd->free[i].off;
	int rc = 0;
	if (merge_prev && merge_next) {
		hd->free[i - 1].len += ph->bytes + hd->free[i].len;
		memmove(&hd->free[i], &hd->free[i + 1], (hd->nfree - i - 1) * sizeof(*hd->free));
		hd->nfree--;
	} else if (merge_prev) {
		hd->free[i - 1].len += ph->bytes;
	} else if (merge_next) {
		hd->free[i].off = ph->off;
		hd->free[i].len += ph->bytes;
	} else {
		if (hd->nfree == hd->cap_free) {
			struct host_range *t = realloc(hd->free, 2 * hd->cap_free * sizeof(*t));
			if (!t)
				rc = sp_error(-ENOMEM, "host backend: free list: out of memory");
			else {
				hd->free = t;
				hd->cap_free *= 2;
			}
		}
		if (rc == 0) {
			memmove(&hd->free[i + 1], &hd->free[i],
			        (hd->nfree - i) * sizeof(*hd->free));
			hd->free[i] = (struct host_range){ph->off, ph->bytes};
			hd->nfree++;
		}
	}
	pthread_mutex_unlock(&h->lock);
	if (rc == 0 && ph->dev == DEV_HOST)
		pin_put(ctx, ph->bytes);
	return rc;
}

static int host_va_map(struct dev_ctx *ctx, int dev, void *va, size_t bytes, struct dev_phys *ph,
                       size_t off)
{
	struct host_ctx *h = hctx(ctx);
	void *p = mmap(va, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
	               chunk_file(h, ph->dev)->fd, (off_t)(ph->off + off));
	if (p == MAP_FAILED)
		return sp_error(-ENOMEM, "host backend: cannot map %zu bytes at %p: %s", bytes, va,
		                strerror(errno));
	return 0;
}

static int host_va_unmap(struct dev_ctx *ctx, int dev, void *va, size_t bytes)
{
	/* Back to an inaccessible reservation: a later touch faults. */
	void *p = mmap(va, bytes, PROT_NONE,
	               MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED)
		return sp_error(-ENOMEM, "host backend: cannot unmap %zu bytes at %p: %s", bytes,
		                va, strerror(errno));
	return 0;
}

/* ---- streams ------------------------------------------------------------------- */

static int failed_error(int dev)
{
	return sp_error(-EIO,
	                "host backend: emulated device %d has failed (fault injected); "
	                "work that touched it was dropped",
	                dev);
}

static struct host_stream *hs(const struct dev_stream *s)
{
	return s->impl;
}

static void sleep_until(double t)
{
	double now = sp_now_s();
	if (t <= now)
		return;
	double d = t - now;
	struct timespec ts = {(time_t)d, (long)((d - floor(d)) * 1e9)};
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {
	}
}

/* With throttling, a copy ends no earlier than its links allow: each link (the
 * device's own and the shared host link) serves copies one after another at
 * its bandwidth, so concurrent copies over a shared link add up, as on a bus. */
static double throttle_end(struct dev_ctx *ctx, int src, int dst, size_t bytes)
{
	struct host_ctx *h = hctx(ctx);
	double now = sp_now_s(), end = now;
	pthread_mutex_lock(&h->lock);
	double *own = NULL, *shared = NULL, bw = 0;
	if (src == DEV_HOST) {
		own = &h->link_busy[dst][LINK_H2D];
		shared = &h->host_busy[0];
		bw = ctx->prof.h2d_bw;
	} else if (dst == DEV_HOST) {
		own = &h->link_busy[src][LINK_D2H];
		shared = &h->host_busy[1];
		bw = ctx->prof.d2h_bw;
	} else if (src != dst) {
		own = &h->link_busy[src][LINK_P2P_OUT];
		bw = dev_link_bw(ctx, src, dst);
	}
	if (own && bw > 0) {
		double t0 = *own > now ? *own : now;
		*own = end = t0 + (double)bytes / bw;
		if (shared) {
			double s0 = *shared > now ? *shared : now;
			*shared = s0 + (double)bytes / ctx->prof.host_bw;
			if (*shared > end)
				end = *shared;
		}
	}
	pthread_mutex_unlock(&h->lock);
	return end;
}

/* Drops one reference to a capture; under ev_lock. */
static void cap_put(struct host_ctx *h, struct host_capture *c)
{
	if (c && --c->refs == 0) {
		c->next_free = h->cap_spare;
		h->cap_spare = c;
	}
}

static void cap_complete(struct host_ctx *h, struct host_capture *c, int err_dev)
{
	pthread_mutex_lock(&h->ev_lock);
	c->done = 1;
	c->err_dev = err_dev;
	c->time = sp_now_s();
	cap_put(h, c);
	pthread_cond_broadcast(&h->ev_cond);
	pthread_mutex_unlock(&h->ev_lock);
}

/* Blocks until c completes, then drops the reference the caller held. */
static void cap_wait_put(struct host_ctx *h, struct host_capture *c)
{
	pthread_mutex_lock(&h->ev_lock);
	while (!c->done)
		pthread_cond_wait(&h->ev_cond, &h->ev_lock);
	cap_put(h, c);
	pthread_mutex_unlock(&h->ev_lock);
}

static int host_failed(struct host_ctx *h, int dev)
{
	return dev >= 0 && dev < DEV_MAX && h->failed[dev];
}

static void host_mark_failed(struct dev_ctx *ctx, int dev)
{
	struct host_ctx *h = hctx(ctx);
	if (!h->failed[dev]) {
		h->failed[dev] = 1;
		SP_WARN(DEV,
		        "host backend: emulated device %d failed (fault injected): its work "
		        "is dropped from now on",
		        dev);
	}
}

/* The device whose failure drops op, or -1 to run it: everything queued on a
 * failed device's streams, and copies from or to its memory anywhere. Waits
 * still wait, so what follows them keeps its order. */
static int op_dropped_by(struct host_stream *st, struct host_op *op)
{
	struct dev_ctx *ctx = st->s->ctx;
	struct host_ctx *h = hctx(ctx);
	int dev = st->s->dev;
	if (op->kind == OP_WAIT || op->kind == OP_RECORD)
		return -1;
	if (op->kind == OP_KERNEL && dev >= 0 && dev == h->fail_dev &&
	    ++h->kernels[dev] >= h->fail_at)
		host_mark_failed(ctx, dev);
	if (host_failed(h, dev))
		return dev;
	if (op->kind == OP_COPY) {
		if (host_failed(h, op->u.mem.src_dev))
			return op->u.mem.src_dev;
		if (host_failed(h, op->u.mem.dst_dev))
			return op->u.mem.dst_dev;
	}
	return -1;
}

static void run_op(struct host_stream *st, struct host_op *op)
{
	struct dev_ctx *ctx = st->s->ctx;
	struct host_ctx *h = hctx(ctx);
	int drop = op_dropped_by(st, op);
	if (drop >= 0) {
		st->dropped_dev = drop;
		if (op->kind == OP_COPY) { /* counted at submission: it never happened */
			int sd = op->u.mem.src_dev, dd = op->u.mem.dst_dev;
			enum dev_copy_kind k = sd == DEV_HOST   ? DEV_COPY_H2D
			                       : dd == DEV_HOST ? DEV_COPY_D2H
			                       : sd == dd       ? DEV_COPY_D2D
			                                        : DEV_COPY_P2P;
			__atomic_sub_fetch(&ctx->copied[k], op->u.mem.bytes, __ATOMIC_RELAXED);
		}
		if (op->kind == OP_KERNEL && op->u.kern.args != op->inline_args)
			free(op->u.kern.args);
		return;
	}
	switch (op->kind) {
	case OP_COPY: {
		double end = h->throttle ? throttle_end(ctx, op->u.mem.src_dev, op->u.mem.dst_dev,
		                                        op->u.mem.bytes)
		                         : 0;
		memmove(op->u.mem.dst, op->u.mem.src, op->u.mem.bytes);
		if (h->throttle)
			sleep_until(end);
		break;
	}
	case OP_MEMSET: memset(op->u.mem.dst, op->u.mem.value, op->u.mem.bytes); break;
	case OP_KERNEL: {
		/* a device slower than the profile's (key speed) takes 1/speed as
		 * long: the kernel runs, then the stream sleeps the difference */
		double speed = st->s->dev >= 0 ? ctx->info[st->s->dev].speed : 1;
		double t0 = speed < 1 && speed > 0 ? sp_now_s() : 0;
		jitter(h, st);
		op->u.kern.cpu(op->u.kern.args);
		if (t0 > 0)
			sleep_until(t0 + (sp_now_s() - t0) / speed);
		break;
	}
	case OP_CALLBACK: op->u.cb.fn(op->u.cb.arg); break;
	case OP_RECORD: {
		/* an event covers all earlier work of its stream: on a failed device it
		 * fails; elsewhere it fails when a copy it covers was dropped */
		int err_dev = host_failed(h, st->s->dev) ? st->s->dev : st->dropped_dev;
		st->dropped_dev = -1;
		cap_complete(h, op->u.cap, err_dev);
		break;
	}
	case OP_WAIT: cap_wait_put(h, op->u.cap); break;
	}
	if (op->kind == OP_KERNEL && op->u.kern.args != op->inline_args)
		free(op->u.kern.args);
}

static void *worker(void *arg)
{
	struct host_stream *st = arg;
	pthread_mutex_lock(&st->lock);
	for (;;) {
		while (!st->head && !st->stop)
			pthread_cond_wait(&st->work, &st->lock);
		if (!st->head)
			break;
		struct host_op *op = st->head;
		pthread_mutex_unlock(&st->lock);
		run_op(st, op);
		pthread_mutex_lock(&st->lock);
		st->head = op->next;
		if (!st->head)
			st->tail = NULL;
		op->next = st->spare;
		st->spare = op;
		st->completed++;
		if (st->completed == st->submitted)
			pthread_cond_broadcast(&st->idle);
	}
	pthread_mutex_unlock(&st->lock);
	return NULL;
}

static int host_stream_create(struct dev_stream *s)
{
	struct host_stream *st = calloc(1, sizeof(*st));
	if (!st)
		return sp_error(-ENOMEM, "host backend: stream: out of memory");
	st->s = s;
	st->dropped_dev = -1;
	struct host_ctx *h = hctx(s->ctx);
	uint64_t k = ++h->nstreams; /* never 0: xorshift's fixed point */
	st->rng = (h->jitter_seed ^ 0x9E3779B97F4A7C15ull * k) | 1;
	pthread_mutex_init(&st->lock, NULL);
	pthread_cond_init(&st->work, NULL);
	pthread_cond_init(&st->idle, NULL);
	int e = pthread_create(&st->thread, NULL, worker, st);
	if (e) {
		pthread_cond_destroy(&st->idle);
		pthread_cond_destroy(&st->work);
		pthread_mutex_destroy(&st->lock);
		free(st);
		return sp_error(-e, "host backend: cannot start a stream thread: %s", strerror(e));
	}
	s->impl = st;
	return 0;
}

static int host_stream_sync(struct dev_stream *s)
{
	struct host_stream *st = hs(s);
	pthread_mutex_lock(&st->lock);
	while (st->completed != st->submitted)
		pthread_cond_wait(&st->idle, &st->lock);
	pthread_mutex_unlock(&st->lock);
	if (host_failed(hctx(s->ctx), s->dev))
		return failed_error(s->dev);
	return 0;
}

static int host_stream_destroy(struct dev_stream *s)
{
	struct host_stream *st = hs(s);
	pthread_mutex_lock(&st->lock);
	st->stop = 1;
	pthread_cond_signal(&st->work);
	pthread_mutex_unlock(&st->lock);
	pthread_join(st->thread, NULL);
	while (st->spare) {
		struct host_op *op = st->spare;
		st->spare = op->next;
		free(op);
	}
	pthread_cond_destroy(&st->idle);
	pthread_cond_destroy(&st->work);
	pthread_mutex_destroy(&st->lock);
	free(st);
	return 0;
}

static int op_get(struct host_stream *st, struct host_op **out)
{
	pthread_mutex_lock(&st->lock);
	struct host_op *op = st->spare;
	if (op)
		st->spare = op->next;
	pthread_mutex_unlock(&st->lock);
	if (!op && !(op = malloc(sizeof(*op))))
		return sp_error(-ENOMEM, "host backend: stream op: out of memory");
	*out = op;
	return 0;
}

static void op_submit(struct host_stream *st, struct host_op *op)
{
	op->next = NULL;
	pthread_mutex_lock(&st->lock);
	if (st->tail)
		st->tail->next = op;
	else
		st->head = op;
	st->tail = op;
	st->submitted++;
	pthread_cond_signal(&st->work);
	pthread_mutex_unlock(&st->lock);
}

/* ---- events -------------------------------------------------------------------- */

static int host_event_create(struct dev_event *e)
{
	struct host_event *he = calloc(1, sizeof(*he));
	if (!he)
		return sp_error(-ENOMEM, "host backend: event: out of memory");
	e->impl = he;
	return 0;
}

/* The event's latest capture with a reference for the caller, or NULL when it
 * was never recorded. */
static struct host_capture *cap_current(struct host_ctx *h, struct host_event *he)
{
	pthread_mutex_lock(&h->ev_lock);
	struct host_capture *c = he->cur;
	if (c)
		c->refs++;
	pthread_mutex_unlock(&h->ev_lock);
	return c;
}

static int host_event_sync(struct dev_event *e)
{
	struct host_ctx *h = hctx(e->ctx);
	struct host_capture *c = cap_current(h, e->impl);
	if (!c)
		return 0;
	pthread_mutex_lock(&h->ev_lock);
	while (!c->done)
		pthread_cond_wait(&h->ev_cond, &h->ev_lock);
	int err_dev = c->err_dev;
	cap_put(h, c);
	pthread_mutex_unlock(&h->ev_lock);
	return err_dev >= 0 ? failed_error(err_dev) : 0;
}

static int host_event_wait_any(struct dev_event *const *ev, int n, int *idx)
{
	struct host_ctx *h = hctx(ev[0]->ctx);
	pthread_mutex_lock(&h->ev_lock);
	for (;;) {
		for (int i = 0; i < n; i++) {
			struct host_event *he = ev[i]->impl;
			if (!he->cur || he->cur->done) {
				*idx = i;
				pthread_mutex_unlock(&h->ev_lock);
				return 0;
			}
		}
		pthread_cond_wait(&h->ev_cond, &h->ev_lock);
	}
}

static int host_event_destroy(struct dev_event *e)
{
	/* Records and waits still queued hold their captures: nothing to wait for. */
	struct host_ctx *h = hctx(e->ctx);
	struct host_event *he = e->impl;
	pthread_mutex_lock(&h->ev_lock);
	cap_put(h, he->cur);
	pthread_mutex_unlock(&h->ev_lock);
	free(he);
	return 0;
}

static int host_event_record(struct dev_event *e, struct dev_stream *s)
{
	struct host_ctx *h = hctx(e->ctx);
	struct host_event *he = e->impl;
	struct host_op *op;
	SP_CHECK(op_get(hs(s), &op));
	pthread_mutex_lock(&h->ev_lock);
	struct host_capture *c = h->cap_spare;
	if (c)
		h->cap_spare = c->next_free;
	else if (!(c = malloc(sizeof(*c)))) {
		pthread_mutex_unlock(&h->ev_lock);
		free(op);
		return sp_error(-ENOMEM, "host backend: event record: out of memory");
	}
	*c = (struct host_capture){.refs = 2, .err_dev = -1}; /* the event and the record op */
	cap_put(h, he->cur);
	he->cur = c;
	pthread_mutex_unlock(&h->ev_lock);
	op->kind = OP_RECORD;
	op->u.cap = c;
	op_submit(hs(s), op);
	return 0;
}

static int host_event_query(struct dev_event *e)
{
	struct host_ctx *h = hctx(e->ctx);
	struct host_event *he = e->impl;
	pthread_mutex_lock(&h->ev_lock);
	int rc = he->cur && !he->cur->done ? -EAGAIN : 0;
	int err_dev = rc == 0 && he->cur ? he->cur->err_dev : -1;
	pthread_mutex_unlock(&h->ev_lock);
	return err_dev >= 0 ? failed_error(err_dev) : rc;
}

static int host_stream_wait_event(struct dev_stream *s, struct dev_event *e)
{
	struct host_ctx *h = hctx(e->ctx);
	struct host_capture *c = cap_current(h, e->impl);
	if (!c)
		return 0; /* never recorded: nothing to wait for */
	struct host_op *op;
	int rc = op_get(hs(s), &op);
	if (rc < 0) {
		pthread_mutex_lock(&h->ev_lock);
		cap_put(h, c);
		pthread_mutex_unlock(&h->ev_lock);
		return rc;
	}
	op->kind = OP_WAIT;
	op->u.cap = c; /* the capture of this moment: a later record does not touch it */
	op_submit(hs(s), op);
	return 0;
}

static int host_event_time(struct dev_event *e, double *out_s)
{
	struct host_ctx *h = hctx(e->ctx);
	struct host_event *he = e->impl;
	pthread_mutex_lock(&h->ev_lock);
	int rc = he->cur && !he->cur->done ? -EAGAIN : 0;
	if (rc == 0)
		*out_s = he->cur ? he->cur->time : 0;
	pthread_mutex_unlock(&h->ev_lock);
	return rc;
}

static int host_fail(struct dev_ctx *ctx, int dev)
{
	host_mark_failed(ctx, dev);
	return 0;
}

static int host_is_failed(const struct dev_ctx *ctx, int dev)
{
	return host_failed(hctx(ctx), dev);
}

static double host_now(const struct dev_ctx *ctx)
{
	return sp_now_s();
}

/* ---- async operations -------------------------------------------------------------- */

static int host_memcpy_async(struct dev_stream *s, void *dst, int dst_dev, const void *src,
                             int src_dev, size_t bytes, enum dev_copy_kind kind)
{
	struct host_op *op;
	SP_CHECK(op_get(hs(s), &op));
	op->kind = OP_COPY;
	op->u.mem.dst = dst;
	op->u.mem.src = src;
	op->u.mem.bytes = bytes;
	op->u.mem.src_dev = src_dev;
	op->u.mem.dst_dev = dst_dev;
	op_submit(hs(s), op);
	return 0;
}

static int host_memset_async(struct dev_stream *s, void *dst, int dst_dev, int value, size_t bytes)
{
	struct host_op *op;
	SP_CHECK(op_get(hs(s), &op));
	op->kind = OP_MEMSET;
	op->u.mem.dst = dst;
	op->u.mem.value = value;
	op->u.mem.bytes = bytes;
	op_submit(hs(s), op);
	return 0;
}

static int host_launch(struct dev_stream *s, const struct dev_kernel *k, const void *args,
                       size_t args_size, struct dev_cost cost)
{
	if (!k->cpu)
		return sp_error(-ENOTSUP,
		                "dev_launch: kernel %s has no CPU implementation (host "
		                "backend)",
		                k->name ? k->name : "?");
	struct host_op *op;
	SP_CHECK(op_get(hs(s), &op));
	op->kind = OP_KERNEL;
	op->u.kern.cpu = k->cpu;
	op->u.kern.size = args_size;
	op->u.kern.args = args_size <= HOST_ARGS_INLINE ? op->inline_args : malloc(args_size);
	if (!op->u.kern.args) {
		free(op);
		return sp_error(-ENOMEM, "dev_launch %s: args: out of memory", k->name);
	}
	if (args_size)
		memcpy(op->u.kern.args, args, args_size);
	op_submit(hs(s), op);
	return 0;
}

static int host_host_callback(struct dev_stream *s, void (*fn)(void *), void *arg)
{
	struct host_op *op;
	SP_CHECK(op_get(hs(s), &op));
	op->kind = OP_CALLBACK;
	op->u.cb.fn = fn;
	op->u.cb.arg = arg;
	op_submit(hs(s), op);
	return 0;
}

const struct dev_backend_ops dev_host_ops = {
    .open = host_open,
    .close = host_close,
    .mem_alloc = host_mem_alloc,
    .mem_free = host_mem_free,
    .host_alloc = host_host_alloc,
    .host_free = host_host_free,
    .host_reserve = host_host_reserve,
    .host_commit = host_host_commit,
    .host_uncommit = host_host_uncommit,
    .host_release = host_host_release,
    .va_reserve = host_va_reserve,
    .va_release = host_va_release,
    .phys_create = host_phys_create,
    .phys_destroy = host_phys_destroy,
    .va_map = host_va_map,
    .va_unmap = host_va_unmap,
    .stream_create = host_stream_create,
    .stream_destroy = host_stream_destroy,
    .stream_sync = host_stream_sync,
    .event_create = host_event_create,
    .event_destroy = host_event_destroy,
    .event_record = host_event_record,
    .event_query = host_event_query,
    .event_sync = host_event_sync,
    .event_wait_any = host_event_wait_any,
    .stream_wait_event = host_stream_wait_event,
    .event_time = host_event_time,
    .now = host_now,
    .fail = host_fail,
    .failed = host_is_failed,
    .memcpy_async = host_memcpy_async,
    .memset_async = host_memset_async,
    .launch = host_launch,
    .host_callback = host_host_callback,
};
