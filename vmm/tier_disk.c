/* vmm/tier_disk.c — the disk tier (vmm/disk.h) on io_uring: the real drives
 * (vmm/disk.c dispatches here, or to tier_disk_sim.c on the model backend).
 *
 * Layout: one unnamed file (O_TMPFILE, or a named file unlinked at once) per tier
 * under the directory, opened O_DIRECT. Extents are 4 KiB-aligned ranges of it,
 * given out first-fit from a sorted list of free ranges; an extent's range is
 * preallocated (fallocate) on its first write and its space punched out on free.
 * I/O: a request (ticket) is split into `block`-byte chunks; each chunk owns one
 * of 2 x `queue_depth` registered, 4 KiB-aligned bounce buffers (at most
 * queue_depth in the kernel, the spares let copies overlap I/O) and is issued with
 * write_fixed/read_fixed on the registered file. One I/O thread per tier does all
 * of it: it starts chunks while buffers are free, copies user data in and out of
 * the bounce buffers (without the lock), resubmits short I/Os and completes
 * tickets. Callers only queue requests and wake the thread with a NOP.
 * Invariants: every field is under d->lock, except the CQ side of the ring (the
 * I/O thread only) and bounce buffers owned by an in-flight chunk. A request is
 * freed only once it is done and released. The caller's source buffer is only
 * read; a failed write leaves it untouched and the extent's old bytes undefined.
 */
#include "vmm/disk_impl.h"

#include "common/log.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/uio.h>
#include <unistd.h>

#if SPILL_HAVE_URING
#include <liburing.h>
#endif

#define DISK_ALIGN VMM_DISK_ALIGN

void vmm_disk_config_from_params(const struct sp_params *p, struct vmm_disk_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->path = p->disk_path;
	cfg->capacity = p->disk_mem;
	cfg->queue_depth = p->io_queue_depth > 0 ? (unsigned)p->io_queue_depth : 0;
	cfg->block = (size_t)p->io_block;
	cfg->fault = p->disk_fault;
}

#if !SPILL_HAVE_URING

int disk_uring_open(const struct vmm_disk_config *cfg, struct disk_uring **out)
{
	SP_UNUSED(cfg);
	SP_UNUSED(out);
	return sp_error(-ENOTSUP, "disk tier: built without liburing (apt-get install "
	                          "liburing-dev and rebuild)");
}
void disk_uring_close(struct disk_uring *d)
{
	SP_UNUSED(d);
}
int disk_uring_alloc(struct disk_uring *d, size_t bytes, uint64_t *extent)
{
	return sp_error(-ENOTSUP, "disk tier: built without liburing");
}
int disk_uring_free(struct disk_uring *d, uint64_t extent)
{
	return sp_error(-ENOTSUP, "disk tier: built without liburing");
}
int disk_uring_busy(struct disk_uring *d, uint64_t extent)
{
	return sp_error(-ENOTSUP, "disk tier: built without liburing");
}
int disk_uring_write_async(struct disk_uring *d, uint64_t extent, const void *src, size_t bytes,
                           uint64_t *ticket)
{
	return sp_error(-ENOTSUP, "disk tier: built without liburing");
}
int disk_uring_read_async(struct disk_uring *d, uint64_t extent, void *dst, size_t bytes,
                          uint64_t *ticket)
{
	return sp_error(-ENOTSUP, "disk tier: built without liburing");
}
int disk_uring_poll(struct disk_uring *d, uint64_t ticket)
{
	return sp_error(-ENOTSUP, "disk tier: built without liburing");
}
int disk_uring_wait(struct disk_uring *d, uint64_t ticket)
{
	return sp_error(-ENOTSUP, "disk tier: built without liburing");
}
void disk_uring_ticket_release(struct disk_uring *d, uint64_t ticket)
{
}
void disk_uring_stats(const struct disk_uring *d, struct vmm_disk_stats_snapshot *out)
{
	memset(out, 0, sizeof(*out));
}

#else /* SPILL_HAVE_URING */

#define DISK_MAX_FAULTS 8
#define DISK_WAKE_TAG   UINT64_MAX
#define DISK_NONE       UINT32_MAX

enum disk_op { DISK_READ, DISK_WRITE };

/* One rule of the fault knob: the Nth (and later if `and_later`) op fails. */
struct disk_fault_rule {
	enum disk_op op;
	uint64_t nth;
	bool and_later;
	int err; /* positive errno */
};

struct disk_extent {
	uint64_t off, size; /* in the file; size rounded up to DISK_ALIGN */
	uint32_t gen;       /* bumped at each free: stale handles are refused */
	uint32_t inflight;  /* requests not done on this extent */
	uint32_t next_free; /* free-slot list */
	bool used, prealloc;
};

enum disk_req_state { REQ_FREE, REQ_ACTIVE, REQ_DONE };

struct disk_req {
	enum disk_req_state state;
	enum disk_op op;
	bool queued;   /* in the pending FIFO (not fully issued yet) */
	bool released; /* the caller forgot it: free when done */
	bool injected; /* fault injection set err */
	uint32_t gen;
	uint32_t extent;   /* index into d->ext */
	uint32_t next;     /* pending FIFO link, or free-slot list */
	uint8_t *user;     /* caller's buffer */
	size_t bytes;      /* caller's bytes */
	size_t io_bytes;   /* bytes rounded up to DISK_ALIGN */
	size_t issued;     /* bytes handed to chunks so far */
	uint64_t file_off; /* extent's offset in the file */
	unsigned inflight; /* chunks in flight */
	int err;           /* first error (negative errno), 0 if none */
	int fault_err;     /* injected error for the first chunk (positive errno) */
	uint64_t fail_off; /* file offset of the failed chunk */
};

struct disk_chunk {
	uint32_t req;   /* DISK_NONE when the slot is free */
	size_t req_off; /* offset of the chunk in the request */
	size_t len;     /* bytes of I/O (multiple of DISK_ALIGN) */
	size_t done;    /* bytes completed (short I/O resumes from here) */
	uint32_t next_free;
};

struct disk_copy {
	uint8_t *dst;
	const uint8_t *src;
	size_t n;
};

struct disk_range {
	uint64_t off, len;
};

struct disk_uring {
	pthread_mutex_t lock;
	pthread_cond_t done_cv; /* broadcast when a request completes */
	pthread_t thread;
	bool thread_started, stopping, wake_posted, direct, fixed_bufs, fixed_file;
	struct io_uring ring;
	bool ring_inited;
	int fd;
	char *dir;
	unsigned qd;
	size_t block;
	uint8_t *bounce; /* nslots * block bytes, DISK_ALIGN aligned (mmap) */
	size_t bounce_bytes;
	void *bounce_map; /* the mapping bounce lies in (2 MiB aligned inside) */
	size_t bounce_map_bytes;
	struct disk_chunk *chunks;
	unsigned nslots; /* bounce buffers: 2 x qd, so copies overlap with I/O */
	uint32_t free_chunk;
	unsigned chunks_busy; /* slots in use (in flight or being copied) */
	unsigned ios;         /* chunk I/Os in flight in the kernel, <= qd */
	/* Scratch of the I/O thread, ncqes entries each. */
	struct io_uring_cqe **cqes;
	unsigned ncqes;
	uint64_t *scratch_tags;
	int *scratch_res;
	uint32_t *scratch_slots;
	struct disk_copy *scratch_copies;

	struct disk_req *reqs;
	uint32_t nreqs, cap_reqs, free_req;
	uint32_t pend_head, pend_tail;

	struct disk_extent *ext;
	uint32_t next_ext, cap_ext, free_ext;
	struct disk_range *holes; /* free ranges below file_end, sorted by offset */
	uint32_t nholes, cap_holes;
	uint32_t nlive; /* extents allocated */
	uint64_t file_end;

	struct disk_fault_rule faults[DISK_MAX_FAULTS];
	unsigned nfaults;
	uint64_t nwrites_started, nreads_started;

	uint64_t capacity, used;
	uint64_t bytes_written, bytes_read, writes, reads, errors, short_ios;
	unsigned active; /* requests not done */
};

/* ---- handles ------------------------------------------------------------------ */

static uint64_t disk_handle(uint32_t idx, uint32_t gen)
{
	return ((uint64_t)gen << 32) | (idx + 1u);
}

static struct disk_extent *disk_extent_get(struct disk_uring *d, uint64_t h)
{
	uint64_t idx = (h & 0xffffffffu);
	if (idx == 0 || idx > d->next_ext)
		return NULL;
	struct disk_extent *e = &d->ext[idx - 1];
	if (!e->used || e->gen != (uint32_t)(h >> 32))
		return NULL;
	return e;
}

static struct disk_req *disk_req_get(struct disk_uring *d, uint64_t h)
{
	uint64_t idx = (h & 0xffffffffu);
	if (idx == 0 || idx > d->nreqs)
		return NULL;
	struct disk_req *r = &d->reqs[idx - 1];
	if (r->state == REQ_FREE || r->released || r->gen != (uint32_t)(h >> 32))
		return NULL;
	return r;
}

static int disk_grow(void **arr, uint32_t *cap, size_t elem, const char *what)
{
	uint32_t ncap = *cap ? *cap * 2 : 64;
	if (ncap <= *cap)
		return sp_error(-ENOMEM, "disk tier: too many %s (%u)", what, *cap);
	void *p = realloc(*arr, (size_t)ncap * elem);
	if (!p)
		return sp_error(-ENOMEM, "disk tier: out of memory growing %s to %u", what, ncap);
	*arr = p;
	*cap = ncap;
	return 0;
}

/* ---- fault knob ------------------------------------------------------------------ */

static int disk_fault_parse(struct disk_uring *d, const char *spec)
{
	if (!spec || !*spec)
		return 0;
	char buf[256];
	if (strlen(spec) >= sizeof(buf))
		return sp_error(-EINVAL, "disk fault spec too long (%zu chars, max %zu)",
		                strlen(spec), sizeof(buf) - 1);
	strcpy(buf, spec);
	char *save = NULL;
	for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		if (d->nfaults == DISK_MAX_FAULTS)
			return sp_error(-EINVAL, "disk fault spec '%s': more than %d rules", spec,
			                DISK_MAX_FAULTS);
		struct disk_fault_rule *r = &d->faults[d->nfaults];
		char *c1 = strchr(tok, ':');
		char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
		if (!c1 || !c2)
			goto bad;
		*c1 = *c2 = '\0';
		if (!strcmp(tok, "write"))
			r->op = DISK_WRITE;
		else if (!strcmp(tok, "read"))
			r->op = DISK_READ;
		else
			goto bad;
		char *end = NULL;
		errno = 0;
		unsigned long long n = strtoull(c1 + 1, &end, 10);
		if (errno || end == c1 + 1 || n == 0)
			goto bad;
		r->nth = n;
		r->and_later = false;
		if (*end == '+') {
			r->and_later = true;
			end++;
		}
		if (*end)
			goto bad;
		const char *e = c2 + 1;
		if (!strcmp(e, "ENOSPC"))
			r->err = ENOSPC;
		else if (!strcmp(e, "EIO"))
			r->err = EIO;
		else if (!strcmp(e, "EFBIG"))
			r->err = EFBIG;
		else
			goto bad;
		d->nfaults++;
	}
	return 0;
bad:
	return sp_error(-EINVAL,
	                "disk fault spec '%s': expected comma-separated op:N[+]:ERR with op "
	                "read|write, N >= 1, ERR ENOSPC|EIO|EFBIG (e.g. write:3:ENOSPC)",
	                spec);
}

static int disk_fault_match(const struct disk_uring *d, enum disk_op op, uint64_t seq)
{
	for (unsigned i = 0; i < d->nfaults; i++) {
		const struct disk_fault_rule *r = &d->faults[i];
		if (r->op == op && (seq == r->nth || (r->and_later && seq > r->nth)))
			return r->err;
	}
	return 0;
}

/* ---- files ----------------------------------------------------------------------- */

/* The tier's directory must exist: a typo in SPILL_DISK_PATH must never
 * create a tree somewhere (the root filesystem) and fill it. */
static int disk_check_dir(const char *path)
{
	struct stat st;
	if (stat(path, &st))
		return sp_error(-errno,
		                "disk tier '%s': %s (spill never creates it, so that a typo cannot "
		                "fill another filesystem: make it first)",
		                path, strerror(errno));
	if (!S_ISDIR(st.st_mode))
		return sp_error(-ENOTDIR, "disk tier '%s': not a directory", path);
	if (access(path, W_OK | X_OK))
		return sp_error(-errno, "disk tier '%s': not writable: %s", path, strerror(errno));
	return 0;
}

/* Opens an unnamed file in dir: O_TMPFILE, else a named file unlinked at once.
 * Returns the fd or -errno (no message). */
static int disk_open_file(const char *dir, int flags)
{
	int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC | flags, 0600);
	if (fd >= 0)
		return fd;
	if (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL && errno != ENOENT)
		return -errno;
	char name[PATH_MAX];
	if (snprintf(name, sizeof(name), "%s/spill-disk-XXXXXX", dir) >= (int)sizeof(name))
		return -ENAMETOOLONG;
	fd = mkostemp(name, O_CLOEXEC | flags);
	if (fd < 0)
		return -errno;
	unlink(name);
	return fd;
}

/* ---- extents ----------------------------------------------------------------- */

static uint64_t disk_range_take(struct disk_uring *d, uint64_t size)
{
	for (uint32_t i = 0; i < d->nholes; i++) {
		struct disk_range *h = &d->holes[i];
		if (h->len < size)
			continue;
		uint64_t off = h->off;
		h->off += size;
		h->len -= size;
		if (h->len == 0) {
			memmove(h, h + 1, (size_t)(d->nholes - i - 1) * sizeof(*h));
			d->nholes--;
		}
		return off;
	}
	uint64_t off = d->file_end;
	d->file_end += size;
	return off;
}

/* Returns a range to the free list; needs room for one more hole (reserved by
 * the caller). Coalesces with neighbours and trims the end of the file. */
static void disk_range_put(struct disk_uring *d, uint64_t off, uint64_t len)
{
	uint32_t i = 0;
	while (i < d->nholes && d->holes[i].off < off)
		i++;
	memmove(&d->holes[i + 1], &d->holes[i], (size_t)(d->nholes - i) * sizeof(d->holes[0]));
	d->holes[i] = (struct disk_range){off, len};
	d->nholes++;
	if (i + 1 < d->nholes && d->holes[i].off + d->holes[i].len == d->holes[i + 1].off) {
		d->holes[i].len += d->holes[i + 1].len;
		memmove(&d->holes[i + 1], &d->holes[i + 2],
		        (size_t)(d->nholes - i - 2) * sizeof(d->holes[0]));
		d->nholes--;
	}
	if (i > 0 && d->holes[i - 1].off + d->holes[i - 1].len == d->holes[i].off) {
		d->holes[i - 1].len += d->holes[i].len;
		memmove(&d->holes[i], &d->holes[i + 1],
		        (size_t)(d->nholes - i - 1) * sizeof(d->holes[0]));
		d->nholes--;
	}
	if (d->nholes && d->holes[d->nholes - 1].off + d->holes[d->nholes - 1].len == d->file_end) {
		d->file_end = d->holes[d->nholes - 1].off;
		d->nholes--;
	}
}

int disk_uring_alloc(struct disk_uring *d, size_t bytes, uint64_t *extent)
{
	SP_CHECK_ARG(d && extent, "vmm_disk_alloc: NULL %s", d ? "extent" : "disk");
	SP_CHECK_ARG(bytes > 0, "vmm_disk_alloc: zero bytes");
	SP_CHECK_ARG(bytes <= UINT64_MAX / 2, "vmm_disk_alloc: %zu bytes is absurd", bytes);
	uint64_t size = ((uint64_t)bytes + DISK_ALIGN - 1) & ~(uint64_t)(DISK_ALIGN - 1);
	int rc = 0;
	pthread_mutex_lock(&d->lock);
	if (d->used + size > d->capacity) {
		char a[32], b[32], c[32];
		rc = sp_error(
		    -ENOSPC, "disk tier full: extent of %s does not fit, %s of %s used (%s)",
		    sp_format_size(size, a, sizeof(a)), sp_format_size(d->used, b, sizeof(b)),
		    sp_format_size(d->capacity, c, sizeof(c)), d->dir);
		goto out;
	}
	/* Free ranges never outnumber live extents + 1: reserve room for that bound
	 * now, so freeing never allocates. */
	if (d->nlive + 2 > d->cap_holes &&
	    (rc = disk_grow((void **)&d->holes, &d->cap_holes, sizeof(*d->holes), "holes")))
		goto out;
	uint32_t idx;
	if (d->free_ext != DISK_NONE) {
		idx = d->free_ext;
		d->free_ext = d->ext[idx].next_free;
	} else {
		if (d->next_ext == d->cap_ext &&
		    (rc = disk_grow((void **)&d->ext, &d->cap_ext, sizeof(*d->ext), "extents")))
			goto out;
		idx = d->next_ext++;
		d->ext[idx].gen = 1;
	}
	struct disk_extent *e = &d->ext[idx];
	e->off = disk_range_take(d, size);
	e->size = size;
	e->inflight = 0;
	e->used = true;
	e->prealloc = false;
	d->used += size;
	d->nlive++;
	*extent = disk_handle(idx, e->gen);
	SP_TRACE(IO, "disk alloc extent %#" PRIx64 ": %" PRIu64 " bytes at %" PRIu64, *extent, size,
	         e->off);
out:
	pthread_mutex_unlock(&d->lock);
	return rc;
}

int disk_uring_busy(struct disk_uring *d, uint64_t extent)
{
	pthread_mutex_lock(&d->lock);
	struct disk_extent *e = disk_extent_get(d, extent);
	int rc = !e ? sp_error(-EINVAL, "vmm_disk_free: unknown extent %#" PRIx64, extent)
	            : e->inflight > 0;
	pthread_mutex_unlock(&d->lock);
	return rc;
}

int disk_uring_free(struct disk_uring *d, uint64_t extent)
{
	SP_CHECK_ARG(d, "vmm_disk_free: NULL disk");
	int rc = 0;
	pthread_mutex_lock(&d->lock);
	struct disk_extent *e = disk_extent_get(d, extent);
	if (!e) {
		rc = sp_error(-EINVAL,
		              "vmm_disk_free: unknown extent %#" PRIx64
		              " (never allocated or already freed)",
		              extent);
		goto out;
	}
	if (e->inflight) {
		rc = sp_error(-EBUSY, "vmm_disk_free: extent %#" PRIx64 " has %u I/O in flight",
		              extent, e->inflight);
		goto out;
	}
	if (e->prealloc &&
	    fallocate(d->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)e->off,
	              (off_t)e->size) != 0 &&
	    errno != EOPNOTSUPP)
		SP_WARN(IO, "disk tier: cannot punch %" PRIu64 " bytes at %" PRIu64 ": %s", e->size,
		        e->off, strerror(errno));
	disk_range_put(d, e->off, e->size);
	d->used -= e->size;
	d->nlive--;
	e->used = false;
	e->gen++;
	if (e->gen == 0)
		e->gen = 1;
	uint32_t idx = (uint32_t)(e - d->ext);
	e->next_free = d->free_ext;
	d->free_ext = idx;
out:
	pthread_mutex_unlock(&d->lock);
	return rc;
}

/* ---- the I/O thread ---------------------------------------------------------- */

static void disk_complete(struct disk_uring *d, struct disk_req *r)
{
	r->state = REQ_DONE;
	d->ext[r->extent].inflight--;
	d->active--;
	if (r->err) {
		d->errors++;
		SP_INFO(IO, "disk tier: %s of %zu bytes at file offset %" PRIu64 " failed: %s%s",
		        r->op == DISK_WRITE ? "write" : "read", r->bytes, r->fail_off,
		        strerror(-r->err), r->injected ? " (injected fault)" : "");
	} else if (r->op == DISK_WRITE) {
		d->writes++;
		d->bytes_written += r->bytes;
	} else {
		d->reads++;
		d->bytes_read += r->bytes;
	}
	if (r->released) {
		uint32_t idx = (uint32_t)(r - d->reqs);
		r->state = REQ_FREE;
		r->next = d->free_req;
		d->free_req = idx;
	}
	pthread_cond_broadcast(&d->done_cv);
}

static void disk_pend_pop(struct disk_uring *d)
{
	struct disk_req *r = &d->reqs[d->pend_head];
	r->queued = false;
	d->pend_head = r->next;
	if (d->pend_head == DISK_NONE)
		d->pend_tail = DISK_NONE;
}

static int disk_submit(struct disk_uring *d)
{
	for (;;) {
		int ret = io_uring_submit(&d->ring);
		if (ret >= 0)
			return 0;
		if (ret == -EINTR || ret == -EAGAIN)
			continue;
		/* -EBUSY: the CQ is full; the SQEs stay queued and go with the next submit
		 * after the I/O thread reaps. */
		if (ret != -EBUSY)
			SP_WARN(IO, "disk tier: io_uring_submit: %s", strerror(-ret));
		return ret;
	}
}

static struct io_uring_sqe *disk_sqe(struct disk_uring *d)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&d->ring);
	if (!sqe) {
		(void)disk_submit(d);
		sqe = io_uring_get_sqe(&d->ring);
	}
	return sqe;
}

/* Queues the (rest of the) chunk's I/O. Lock held. */
static void disk_chunk_prep(struct disk_uring *d, uint32_t slot)
{
	struct disk_chunk *c = &d->chunks[slot];
	struct disk_req *r = &d->reqs[c->req];
	struct io_uring_sqe *sqe = disk_sqe(d);
	/* The ring has more entries than chunks + 1 wake NOP: never NULL. */
	SP_ASSERT(sqe);
	uint8_t *buf = d->bounce + (size_t)slot * d->block + c->done;
	unsigned len = (unsigned)(c->len - c->done);
	uint64_t off = r->file_off + c->req_off + c->done;
	int fd = d->fixed_file ? 0 : d->fd;
	if (r->op == DISK_WRITE) {
		if (d->fixed_bufs)
			io_uring_prep_write_fixed(sqe, fd, buf, len, off, (int)slot);
		else
			io_uring_prep_write(sqe, fd, buf, len, off);
	} else {
		if (d->fixed_bufs)
			io_uring_prep_read_fixed(sqe, fd, buf, len, off, (int)slot);
		else
			io_uring_prep_read(sqe, fd, buf, len, off);
	}
	if (d->fixed_file)
		io_uring_sqe_set_flags(sqe, IOSQE_FIXED_FILE);
	io_uring_sqe_set_data64(sqe, slot);
}

/* Starts chunks while a bounce buffer is free and fewer than queue_depth I/Os
 * are in flight. Lock held on entry and exit; it is dropped while write data is
 * copied into a bounce buffer (reads queued before the copy are submitted
 * first, so the drive is not kept waiting). */
static void disk_issue(struct disk_uring *d)
{
	bool unsubmitted = false;
	while (d->pend_head != DISK_NONE) {
		uint32_t ri = d->pend_head;
		struct disk_req *r = &d->reqs[ri];
		if (r->err || r->issued >= r->io_bytes) {
			disk_pend_pop(d);
			if (r->inflight == 0)
				disk_complete(d, r);
			continue;
		}
		if (d->free_chunk == DISK_NONE || d->ios >= d->qd)
			break;
		uint32_t slot = d->free_chunk;
		struct disk_chunk *c = &d->chunks[slot];
		d->free_chunk = c->next_free;
		d->chunks_busy++;
		c->req = ri;
		c->req_off = r->issued;
		c->len = r->io_bytes - r->issued < d->block ? r->io_bytes - r->issued : d->block;
		c->done = 0;
		r->issued += c->len;
		r->inflight++;
		d->ios++;
		if (r->op == DISK_WRITE) {
			/* The chunk (and so its request) stays alive while it is in
			 * flight; only reqs[] may move while the lock is dropped. */
			size_t copy = c->req_off >= r->bytes           ? 0
			              : r->bytes - c->req_off < c->len ? r->bytes - c->req_off
			                                               : c->len;
			uint8_t *dst = d->bounce + (size_t)slot * d->block;
			const uint8_t *src = r->user + c->req_off;
			size_t pad = c->len - copy;
			if (unsubmitted) {
				(void)disk_submit(d);
				unsubmitted = false;
			}
			pthread_mutex_unlock(&d->lock);
			memcpy(dst, src, copy);
			memset(dst + copy, 0, pad);
			pthread_mutex_lock(&d->lock);
		}
		disk_chunk_prep(d, slot);
		unsubmitted = true;
	}
	if (unsubmitted)
		(void)disk_submit(d);
}

static void disk_chunk_release(struct disk_uring *d, uint32_t slot)
{
	struct disk_chunk *c = &d->chunks[slot];
	struct disk_req *r = &d->reqs[c->req];
	c->req = DISK_NONE;
	c->next_free = d->free_chunk;
	d->free_chunk = slot;
	d->chunks_busy--;
	r->inflight--;
	if (r->inflight == 0 && !r->queued && (r->err || r->issued >= r->io_bytes))
		disk_complete(d, r);
}

/* Handles one completion. Returns true when the chunk finished a read whose bytes
 * must be copied out (the caller copies, then releases the chunk). Lock held. */
static bool disk_cqe_handle(struct disk_uring *d, uint64_t tag, int res)
{
	if (tag == DISK_WAKE_TAG) {
		d->wake_posted = false;
		return false;
	}
	uint32_t slot = (uint32_t)tag;
	struct disk_chunk *c = &d->chunks[slot];
	struct disk_req *r = &d->reqs[c->req];
	if (r->fault_err && c->req_off == 0 && c->done == 0) {
		res = -r->fault_err;
		r->injected = true;
	}
	if (res == -EAGAIN || res == -EINTR) {
		disk_chunk_prep(d, slot);
		(void)disk_submit(d);
		return false;
	}
	if (res == 0 && r->op == DISK_WRITE)
		res = -EIO; /* a write that makes no progress would loop forever */
	if (res < 0) {
		d->ios--;
		if (!r->err) {
			r->err = res;
			r->fail_off = r->file_off + c->req_off + c->done;
		}
		disk_chunk_release(d, slot);
		return false;
	}
	if (res == 0) {
		/* Read at end of file: bytes never written read as zeros. */
		memset(d->bounce + (size_t)slot * d->block + c->done, 0, c->len - c->done);
		c->done = c->len;
	} else {
		c->done += (size_t)res;
	}
	if (c->done < c->len) {
		d->short_ios++;
		disk_chunk_prep(d, slot);
		(void)disk_submit(d);
		return false;
	}
	d->ios--;
	if (r->op == DISK_READ && !r->err)
		return true;
	disk_chunk_release(d, slot);
	return false;
}

static void *disk_thread_main(void *arg)
{
	struct disk_uring *d = arg;
	uint32_t *copies = d->scratch_slots;
	struct disk_copy *cp = d->scratch_copies;
	uint64_t *tags = d->scratch_tags;
	int *res = d->scratch_res;
	pthread_mutex_lock(&d->lock);
	for (;;) {
		disk_issue(d);
		if (d->stopping && d->active == 0 && d->chunks_busy == 0 && !d->wake_posted)
			break;
		if (io_uring_sq_ready(&d->ring))
			(void)disk_submit(d); /* an earlier submit failed: retry before sleeping */
		pthread_mutex_unlock(&d->lock);
		struct io_uring_cqe *cqe = NULL;
		int ret = io_uring_wait_cqe(&d->ring, &cqe);
		unsigned n = 0;
		if (ret == 0) {
			unsigned got = io_uring_peek_batch_cqe(&d->ring, d->cqes, d->ncqes);
			for (unsigned i = 0; i < got; i++) {
				tags[n] = io_uring_cqe_get_data64(d->cqes[i]);
				res[n] = d->cqes[i]->res;
				n++;
			}
			io_uring_cq_advance(&d->ring, got);
		} else if (ret != -EINTR && ret != -EAGAIN) {
			SP_WARN(IO, "disk tier: io_uring_wait_cqe: %s", strerror(-ret));
		}
		pthread_mutex_lock(&d->lock);
		unsigned ncopy = 0;
		for (unsigned i = 0; i < n; i++) {
			if (disk_cqe_handle(d, tags[i], res[i])) {
				uint32_t slot = (uint32_t)tags[i];
				struct disk_chunk *c = &d->chunks[slot];
				struct disk_req *r = &d->reqs[c->req];
				size_t len = c->req_off >= r->bytes ? 0
				             : r->bytes - c->req_off < c->len
				                 ? r->bytes - c->req_off
				                 : c->len;
				cp[ncopy].dst = r->user + c->req_off;
				cp[ncopy].src = d->bounce + (size_t)slot * d->block;
				cp[ncopy].n = len;
				copies[ncopy++] = slot;
			}
		}
		if (ncopy) {
			/* Refill the queue from the spare buffers first, then copy out. */
			disk_issue(d);
			pthread_mutex_unlock(&d->lock);
			for (unsigned i = 0; i < ncopy; i++)
				memcpy(cp[i].dst, cp[i].src, cp[i].n);
			pthread_mutex_lock(&d->lock);
			for (unsigned i = 0; i < ncopy; i++)
				disk_chunk_release(d, copies[i]);
		}
	}
	pthread_mutex_unlock(&d->lock);
	return NULL;
}

/* Wakes the I/O thread with a NOP (at most one outstanding). Lock held. */
static void disk_wake(struct disk_uring *d)
{
	if (d->wake_posted)
		return;
	struct io_uring_sqe *sqe = disk_sqe(d);
	SP_ASSERT(sqe);
	io_uring_prep_nop(sqe);
	io_uring_sqe_set_data64(sqe, DISK_WAKE_TAG);
	d->wake_posted = true;
	(void)disk_submit(d);
}

/* ---- open / close -------------------------------------------------------------- */

int disk_uring_open(const struct vmm_disk_config *cfg, struct disk_uring **out)
{
	SP_CHECK_ARG(cfg && out, "vmm_disk_open: NULL %s", cfg ? "out" : "config");
	SP_CHECK_ARG(cfg->path && *cfg->path, "vmm_disk_open: no directory (set SPILL_DISK_PATH)");
	SP_CHECK_ARG(cfg->queue_depth >= 1 && cfg->queue_depth <= 4096,
	             "vmm_disk_open: queue depth %u out of range 1..4096 (SPILL_IO_QUEUE_DEPTH)",
	             cfg->queue_depth);
	SP_CHECK_ARG(cfg->block >= DISK_ALIGN && cfg->block % DISK_ALIGN == 0 &&
	                 cfg->block <= (64u << 20),
	             "vmm_disk_open: block %zu bytes is not a multiple of 4096 in 4K..64M "
	             "(SPILL_IO_BLOCK)",
	             cfg->block);
	SP_CHECK_ARG(2ull * cfg->queue_depth * cfg->block <= (1ull << 30),
	             "vmm_disk_open: 2 x queue depth %u x block %zu = %llu bytes of bounce "
	             "buffers, max 1 GiB",
	             cfg->queue_depth, cfg->block, 2ull * cfg->queue_depth * cfg->block);
	int rc = 0;
	struct disk_uring *d = calloc(1, sizeof(*d));
	if (!d)
		return sp_error(-ENOMEM, "vmm_disk_open: out of memory");
	d->fd = -1;
	d->free_chunk = d->free_req = d->free_ext = DISK_NONE;
	d->pend_head = d->pend_tail = DISK_NONE;
	d->qd = cfg->queue_depth;
	d->block = cfg->block;
	pthread_mutex_init(&d->lock, NULL);
	pthread_cond_init(&d->done_cv, NULL);
	SP_CHECK_GOTO(disk_fault_parse(d, cfg->fault), rc, fail);
	if (!(d->dir = strdup(cfg->path))) {
		rc = sp_error(-ENOMEM, "vmm_disk_open: out of memory");
		goto fail;
	}
	SP_CHECK_GOTO(disk_check_dir(d->dir), rc, fail);

	d->direct = true;
	d->fd = disk_open_file(d->dir, O_DIRECT);
	if (d->fd == -EINVAL) {
		/* The filesystem refuses O_DIRECT: fall back to buffered I/O, loudly. */
		d->direct = false;
		d->fd = disk_open_file(d->dir, 0);
		if (d->fd >= 0)
			SP_WARN(IO,
			        "disk tier: %s does not support O_DIRECT; using buffered I/O "
			        "(page cache), throughput and memory use will differ",
			        d->dir);
	}
	if (d->fd < 0) {
		rc = sp_error(d->fd, "disk tier: cannot create a file in %s: %s", d->dir,
		              strerror(-d->fd));
		d->fd = -1;
		goto fail;
	}

	struct statvfs vfs;
	if (fstatvfs(d->fd, &vfs)) {
		rc = sp_error(-errno, "disk tier: statvfs %s: %s", d->dir, strerror(errno));
		goto fail;
	}
	uint64_t free_bytes = (uint64_t)vfs.f_bavail * vfs.f_frsize;
	d->capacity = cfg->capacity ? cfg->capacity : free_bytes;
	d->capacity &= ~(uint64_t)(DISK_ALIGN - 1);
	if (cfg->capacity && cfg->capacity > free_bytes)
		SP_INFO(IO, "disk tier: capacity %" PRIu64 " exceeds free space %" PRIu64 " of %s",
		        cfg->capacity, free_bytes, d->dir);

	d->nslots = 2 * d->qd;
	d->bounce_bytes = (size_t)d->nslots * d->block;
	/* Bounce buffers in transparent huge pages, 2 MiB aligned: a block then spans
	 * few physical segments, so the block layer does not split a request that a
	 * 4 KiB-page buffer would (virtio-blk allows ~254 segments: < 1 MiB). */
	size_t huge = 2u << 20;
	d->bounce_map_bytes = d->bounce_bytes + huge;
	void *m = mmap(NULL, d->bounce_map_bytes, PROT_READ | PROT_WRITE,
	               MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED) {
		rc = sp_error(-errno, "disk tier: cannot map %zu bytes of bounce buffers: %s",
		              d->bounce_bytes, strerror(errno));
		goto fail;
	}
	d->bounce_map = m;
	d->bounce = (uint8_t *)(((uintptr_t)m + huge - 1) & ~(uintptr_t)(huge - 1));
	(void)madvise(d->bounce, d->bounce_bytes, MADV_HUGEPAGE); /* a hint: may fail */
	memset(d->bounce, 0, d->bounce_bytes);                    /* populate now */
	d->chunks = calloc(d->nslots, sizeof(*d->chunks));
	if (!d->chunks) {
		rc = sp_error(-ENOMEM, "vmm_disk_open: out of memory");
		goto fail;
	}
	for (unsigned i = d->nslots; i-- > 0;) {
		d->chunks[i].req = DISK_NONE;
		d->chunks[i].next_free = d->free_chunk;
		d->free_chunk = i;
	}

	/* Entries: every chunk plus the wake NOP fit, so get_sqe never fails. */
	int ret = io_uring_queue_init(d->qd + 2, &d->ring, 0);
	if (ret < 0) {
		rc = sp_error(ret, "disk tier: io_uring_queue_init(%u): %s", d->qd + 2,
		              strerror(-ret));
		goto fail;
	}
	d->ring_inited = true;
	d->ncqes = d->ring.cq.ring_entries;
	d->cqes = calloc(d->ncqes, sizeof(*d->cqes));
	d->scratch_tags = calloc(d->ncqes, sizeof(*d->scratch_tags));
	d->scratch_res = calloc(d->ncqes, sizeof(*d->scratch_res));
	d->scratch_slots = calloc(d->ncqes, sizeof(*d->scratch_slots));
	d->scratch_copies = calloc(d->ncqes, sizeof(*d->scratch_copies));
	if (!d->cqes || !d->scratch_tags || !d->scratch_res || !d->scratch_slots ||
	    !d->scratch_copies) {
		rc = sp_error(-ENOMEM, "vmm_disk_open: out of memory");
		goto fail;
	}
	struct iovec *iov = calloc(d->nslots, sizeof(*iov));
	if (!iov) {
		rc = sp_error(-ENOMEM, "vmm_disk_open: out of memory");
		goto fail;
	}
	for (unsigned i = 0; i < d->nslots; i++)
		iov[i] = (struct iovec){d->bounce + (size_t)i * d->block, d->block};
	ret = io_uring_register_buffers(&d->ring, iov, d->nslots);
	free(iov);
	d->fixed_bufs = ret == 0;
	if (ret)
		SP_WARN(IO,
		        "disk tier: cannot register %zu bytes of buffers (%s); using plain "
		        "reads and writes",
		        d->bounce_bytes, strerror(-ret));
	ret = io_uring_register_files(&d->ring, &d->fd, 1);
	d->fixed_file = ret == 0;

	ret = pthread_create(&d->thread, NULL, disk_thread_main, d);
	if (ret) {
		rc = sp_error(-ret, "disk tier: cannot start the I/O thread: %s", strerror(ret));
		goto fail;
	}
	d->thread_started = true;
	SP_INFO(IO, "disk tier at %s: %s, capacity %" PRIu64 ", queue depth %u, block %zu", d->dir,
	        d->direct ? "O_DIRECT" : "buffered", d->capacity, d->qd, d->block);
	*out = d;
	return 0;
fail:
	disk_uring_close(d);
	return rc;
}

void disk_uring_close(struct disk_uring *d)
{
	if (!d)
		return;
	if (d->thread_started) {
		pthread_mutex_lock(&d->lock);
		d->stopping = true; /* new I/O is refused; the I/O thread drains */
		while (d->active)
			pthread_cond_wait(&d->done_cv, &d->lock);
		disk_wake(d);
		pthread_mutex_unlock(&d->lock);
		pthread_join(d->thread, NULL);
	}
	if (d->ring_inited) {
		/* Unregistering is synchronous, while the ring's teardown is deferred in
		 * the kernel: drop the file reference now so the filesystem can be
		 * unmounted as soon as we return. */
		if (d->fixed_file)
			(void)io_uring_unregister_files(&d->ring);
		if (d->fixed_bufs)
			(void)io_uring_unregister_buffers(&d->ring);
		io_uring_queue_exit(&d->ring);
	}
	if (d->fd >= 0)
		close(d->fd); /* the file is unnamed: closing it removes it */
	if (d->bounce_map)
		munmap(d->bounce_map, d->bounce_map_bytes);
	free(d->cqes);
	free(d->scratch_tags);
	free(d->scratch_res);
	free(d->scratch_slots);
	free(d->scratch_copies);
	free(d->chunks);
	free(d->reqs);
	free(d->ext);
	free(d->holes);
	free(d->dir);
	pthread_cond_destroy(&d->done_cv);
	pthread_mutex_destroy(&d->lock);
	free(d);
}

/* ---- requests ------------------------------------------------------------------ */

static int disk_start(struct disk_uring *d, enum disk_op op, uint64_t extent, void *buf,
                      size_t bytes, uint64_t *ticket)
{
	const char *name = op == DISK_WRITE ? "vmm_disk_write_async" : "vmm_disk_read_async";
	SP_CHECK_ARG(d && ticket, "%s: NULL %s", name, d ? "ticket" : "disk");
	SP_CHECK_ARG(buf, "%s: NULL buffer", name);
	SP_CHECK_ARG(bytes > 0, "%s: zero bytes", name);
	int rc = 0;
	pthread_mutex_lock(&d->lock);
	struct disk_extent *e = disk_extent_get(d, extent);
	if (!e) {
		rc = sp_error(-EINVAL, "%s: unknown extent %#" PRIx64 " (never allocated or freed)",
		              name, extent);
		goto out;
	}
	if (bytes > e->size) {
		rc = sp_error(-EINVAL,
		              "%s: %zu bytes exceed extent %#" PRIx64 " of %" PRIu64
		              " bytes by %" PRIu64,
		              name, bytes, extent, e->size, (uint64_t)bytes - e->size);
		goto out;
	}
	if (d->stopping) {
		rc = sp_error(-ESHUTDOWN, "%s: disk tier is closing", name);
		goto out;
	}
	uint32_t idx;
	if (d->free_req != DISK_NONE) {
		idx = d->free_req;
		d->free_req = d->reqs[idx].next;
	} else {
		if (d->nreqs == d->cap_reqs &&
		    (rc = disk_grow((void **)&d->reqs, &d->cap_reqs, sizeof(*d->reqs), "tickets")))
			goto out;
		idx = d->nreqs++;
		d->reqs[idx].gen = 0;
	}
	struct disk_req *r = &d->reqs[idx];
	uint32_t gen = r->gen + 1 ? r->gen + 1 : 1;
	*r = (struct disk_req){
	    .state = REQ_ACTIVE,
	    .op = op,
	    .gen = gen,
	    .extent = (uint32_t)(e - d->ext),
	    .next = DISK_NONE,
	    .user = buf,
	    .bytes = bytes,
	    .io_bytes = (bytes + DISK_ALIGN - 1) & ~(size_t)(DISK_ALIGN - 1),
	    .file_off = e->off,
	};
	e->inflight++;
	d->active++;
	if (op == DISK_WRITE)
		r->fault_err = disk_fault_match(d, op, ++d->nwrites_started);
	else
		r->fault_err = disk_fault_match(d, op, ++d->nreads_started);
	*ticket = disk_handle(idx, gen);

	if (op == DISK_WRITE && !e->prealloc) {
		/* Reserve the extent's blocks on its first write, so a full filesystem
		 * or a file-size limit shows up here, before any byte moves. */
		if (fallocate(d->fd, 0, (off_t)e->off, (off_t)e->size) == 0 ||
		    errno == EOPNOTSUPP) {
			e->prealloc = true;
		} else {
			r->err = -errno;
			r->fail_off = e->off;
			disk_complete(d, r);
			goto out;
		}
	}
	r->queued = true;
	if (d->pend_tail == DISK_NONE)
		d->pend_head = idx;
	else
		d->reqs[d->pend_tail].next = idx;
	d->pend_tail = idx;
	disk_wake(d);
out:
	pthread_mutex_unlock(&d->lock);
	return rc;
}

int disk_uring_write_async(struct disk_uring *d, uint64_t extent, const void *src, size_t bytes,
                           uint64_t *ticket)
{
	/* The source is only read (copied into bounce buffers). */
	return disk_start(d, DISK_WRITE, extent, (void *)(uintptr_t)src, bytes, ticket);
}

int disk_uring_read_async(struct disk_uring *d, uint64_t extent, void *dst, size_t bytes,
                          uint64_t *ticket)
{
	return disk_start(d, DISK_READ, extent, dst, bytes, ticket);
}

/* The ticket's result with a message for an error. Lock held. */
static int disk_req_result(const struct disk_uring *d, const struct disk_req *r, uint64_t ticket)
{
	if (!r->err)
		return 0;
	const char *hint = r->injected         ? " (injected by SPILL_DISK_FAULT)"
	                   : r->err == -EFBIG  ? " (file size limit, RLIMIT_FSIZE / ulimit -f?)"
	                   : r->err == -ENOSPC ? " (filesystem full)"
	                                       : "";
	return sp_error(r->err,
	                "disk tier %s of %zu bytes (ticket %#" PRIx64 ") at offset %" PRIu64
	                " of a file in %s failed: %s%s; the source data is untouched",
	                r->op == DISK_WRITE ? "write" : "read", r->bytes, ticket, r->fail_off,
	                d->dir, strerror(-r->err), hint);
}

int disk_uring_poll(struct disk_uring *d, uint64_t ticket)
{
	SP_CHECK_ARG(d, "vmm_disk_poll: NULL disk");
	pthread_mutex_lock(&d->lock);
	struct disk_req *r = disk_req_get(d, ticket);
	int rc;
	if (!r)
		rc = sp_error(-EINVAL, "vmm_disk_poll: unknown ticket %#" PRIx64, ticket);
	else if (r->state != REQ_DONE)
		rc = -EAGAIN;
	else
		rc = disk_req_result(d, r, ticket);
	pthread_mutex_unlock(&d->lock);
	return rc;
}

int disk_uring_wait(struct disk_uring *d, uint64_t ticket)
{
	SP_CHECK_ARG(d, "vmm_disk_wait: NULL disk");
	pthread_mutex_lock(&d->lock);
	struct disk_req *r = disk_req_get(d, ticket);
	int rc;
	if (!r) {
		rc = sp_error(-EINVAL, "vmm_disk_wait: unknown ticket %#" PRIx64, ticket);
		goto out;
	}
	while (r && r->state != REQ_DONE) {
		pthread_cond_wait(&d->done_cv, &d->lock);
		r = disk_req_get(d, ticket); /* reqs[] may have moved */
	}
	if (!r)
		rc = sp_error(-EINVAL,
		              "vmm_disk_wait: ticket %#" PRIx64
		              " released by another thread while waited on",
		              ticket);
	else
		rc = disk_req_result(d, r, ticket);
out:
	pthread_mutex_unlock(&d->lock);
	return rc;
}

void disk_uring_ticket_release(struct disk_uring *d, uint64_t ticket)
{
	if (!d)
		return;
	pthread_mutex_lock(&d->lock);
	struct disk_req *r = disk_req_get(d, ticket);
	if (!r) {
		SP_WARN(IO, "vmm_disk_ticket_release: unknown ticket %#" PRIx64, ticket);
	} else if (r->state != REQ_DONE) {
		/* Still in flight: forget it when it completes. */
		r->released = true;
	} else {
		uint32_t idx = (uint32_t)(r - d->reqs);
		r->state = REQ_FREE;
		r->next = d->free_req;
		d->free_req = idx;
	}
	pthread_mutex_unlock(&d->lock);
}

void disk_uring_stats(const struct disk_uring *cd, struct vmm_disk_stats_snapshot *out)
{
	memset(out, 0, sizeof(*out));
	if (!cd)
		return;
	struct disk_uring *d = (struct disk_uring *)(uintptr_t)cd; /* the lock is not state */
	pthread_mutex_lock(&d->lock);
	out->bytes_written = d->bytes_written;
	out->bytes_read = d->bytes_read;
	out->capacity = d->capacity;
	out->used = d->used;
	out->writes = d->writes;
	out->reads = d->reads;
	out->errors = d->errors;
	out->ndrives = 1;
	out->drive_written[0] = d->bytes_written;
	out->drive_read[0] = d->bytes_read;
	pthread_mutex_unlock(&d->lock);
}

#endif /* SPILL_HAVE_URING */
