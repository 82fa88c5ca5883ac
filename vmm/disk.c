/* vmm/disk.c — the disk tier's one entry point (vmm/disk.h): on the model
 * backend a simulated tier (tier_disk_sim.c: the profile's drives in virtual
 * time); elsewhere one io_uring tier (tier_disk.c) per drive, a directory each
 * (SPILL_DISK_PATH "dir1,dir2,..."), with every object striped over all of
 * them. The vmm core calls the same functions either way.
 *
 * Striping: an extent of B bytes is n contiguous parts of VMM_DISK_ALIGN units
 * (the first B/4K mod n parts one unit more), part j on drive (first + j) mod n,
 * where `first` rotates from one extent to the next: a transfer is n large
 * sequential requests, one per drive's ring, and small extents spread over the
 * drives too, so they fill evenly. A ticket completes when every part has; its
 * result is the first part's error (in object order). Capacity (SPILL_DISK_MEM)
 * is split evenly, in whole pages. Fault rules (SPILL_DISK_FAULT) apply to
 * every drive, or to drive K alone with a "K/" prefix ("1/write:2:EIO"). Free
 * refuses (-EBUSY, freeing nothing) while any part has I/O in flight. With
 * several drives a request counts once in the stats, when it is seen complete
 * (poll, wait, release, or a stats call for one released in flight), as a
 * write or read when every part succeeded, else as an error.
 * Handles (extents, tickets) are generation << 32 | slot + 1: a stale one is
 * refused. Thread-safety: a lock over the tables; the drives have their own.
 */
#include "vmm/disk_impl.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/log.h"

#define DRIVES VMM_DISK_DRIVES_MAX

struct stripe { /* an extent or a ticket: one part per drive (0: none) */
	uint64_t part[DRIVES];
	uint64_t bytes;     /* extent: its size (whole pages) */
	uint64_t req_bytes; /* ticket: the request's bytes */
	unsigned mask;      /* ticket: drives with a part */
	uint32_t gen, next_free;
	int live;
	int first;                    /* extent: the drive of its first part */
	int write, released, counted; /* ticket */
};

struct stripes {
	struct stripe *a;
	uint32_t n, free;
};

struct vmm_disk {
	struct disk_sim *s; /* the model backend's, or NULL */
	struct disk_uring *u[DRIVES];
	int n;
	pthread_mutex_t lock;
	struct stripes ext, tk;
	/* requests seen complete (once each): succeeded, and failed */
	uint64_t writes, reads, bytes_written, bytes_read, errors;
	int next_first; /* the drive the next extent starts on */
};

#define NONE UINT32_MAX

static int stripe_new(struct stripes *t, uint32_t *slot)
{
	if (t->free == NONE) {
		uint32_t nn = t->n ? 2 * t->n : 64;
		struct stripe *na = realloc(t->a, (size_t)nn * sizeof(*na));
		if (!na)
			return sp_error(-ENOMEM, "disk tier: %u stripes", nn);
		memset(na + t->n, 0, (size_t)(nn - t->n) * sizeof(*na));
		for (uint32_t i = nn; i-- > t->n;) {
			na[i].next_free = t->free;
			t->free = i;
		}
		t->a = na;
		t->n = nn;
	}
	*slot = t->free;
	struct stripe *s = &t->a[*slot];
	t->free = s->next_free;
	uint32_t gen = s->gen + 1;
	memset(s, 0, sizeof(*s));
	s->gen = gen;
	s->live = 1;
	return 0;
}

static void stripe_put(struct stripes *t, uint32_t slot)
{
	t->a[slot].live = 0;
	t->a[slot].next_free = t->free;
	t->free = slot;
}

static uint64_t handle(const struct stripes *t, uint32_t slot)
{
	return (uint64_t)t->a[slot].gen << 32 | (slot + 1);
}

static struct stripe *stripe_at(struct stripes *t, uint64_t h)
{
	uint32_t slot = (uint32_t)h - 1;
	if ((uint32_t)h == 0 || slot >= t->n || !t->a[slot].live || t->a[slot].gen != h >> 32)
		return NULL;
	return &t->a[slot];
}

/* Part j (object order) of an extent of `units` pages over n drives: its
 * bytes, and its offset in the object in *offset (see top). */
static uint64_t part_of(uint64_t units, int n, int j, uint64_t *offset)
{
	uint64_t base = units / (uint64_t)n, extra = units % (uint64_t)n;
	uint64_t before = base * (uint64_t)j + ((uint64_t)j < extra ? (uint64_t)j : extra);
	*offset = before * VMM_DISK_ALIGN;
	return (base + ((uint64_t)j < extra)) * VMM_DISK_ALIGN;
}

/* The k-th directory of a comma-separated list into buf (k < 0: none);
 * returns the count, or -ENAMETOOLONG when the k-th does not fit buf. */
static int split_paths(const char *list, int k, char *buf, size_t n)
{
	int i = 0;
	const char *p = list;
	for (;;) {
		size_t len = strcspn(p, ",");
		if (i == k && buf) {
			if (len >= n)
				return sp_error(
				    -ENAMETOOLONG,
				    "SPILL_DISK_PATH: a directory of %zu characters (at "
				    "most %zu)",
				    len, n - 1);
			memcpy(buf, p, len);
			buf[len] = 0;
		}
		i++;
		if (!p[len])
			return i;
		p += len + 1;
	}
}

/* Drive k's fault rules from the spec: rules without a prefix, and "k/" ones;
 * every prefix must name one of the n drives and carry a rule. */
static int drive_faults(const char *spec, int k, int n, char *buf, size_t size)
{
	buf[0] = 0;
	if (!spec || !*spec)
		return 0;
	char tmp[256];
	if (strlen(spec) >= sizeof(tmp))
		return sp_error(-EINVAL, "SPILL_DISK_FAULT: '%s' is too long", spec);
	strcpy(tmp, spec);
	char *save = NULL;
	for (char *tok = strtok_r(tmp, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		char *slash = strchr(tok, '/');
		const char *rule = tok;
		if (slash) {
			char *end;
			long d = strtol(tok, &end, 10);
			if (end == tok || end != slash || d < 0 || d >= n || !slash[1])
				return sp_error(
				    -EINVAL,
				    "SPILL_DISK_FAULT: '%s': a drive prefix is K/RULE with "
				    "K a drive 0..%d",
				    spec, n - 1);
			if (d != k)
				continue;
			rule = slash + 1;
		}
		size_t used = strlen(buf);
		snprintf(buf + used, size - used, "%s%s", used ? "," : "", rule);
	}
	return 0;
}

int vmm_disk_open(const struct vmm_disk_config *cfg, struct vmm_disk **out)
{
	SP_CHECK_ARG(cfg && out, "vmm_disk_open: NULL %s", cfg ? "out" : "config");
	SP_CHECK_ARG(cfg->path && *cfg->path, "vmm_disk_open: no directory (set SPILL_DISK_PATH)");
	int n = split_paths(cfg->path, -1, NULL, 0);
	SP_CHECK_ARG(n <= DRIVES, "SPILL_DISK_PATH: %d directories, at most %d drives", n, DRIVES);
	uint64_t share = cfg->capacity / (uint64_t)n / VMM_DISK_ALIGN * VMM_DISK_ALIGN;
	SP_CHECK_ARG(!cfg->capacity || share > 0,
	             "SPILL_DISK_MEM: %llu bytes is less than a page (4 KiB) for each of %d "
	             "drive(s)",
	             (unsigned long long)cfg->capacity, n);
	struct vmm_disk *d = calloc(1, sizeof(*d));
	if (!d)
		return sp_error(-ENOMEM, "vmm_disk_open: out of memory");
	pthread_mutex_init(&d->lock, NULL);
	d->ext.free = d->tk.free = NONE;
	int rc = 0;
	struct stat seen[DRIVES];
	int statted[DRIVES] = {0};
	for (int k = 0; k < n && !rc; k++) {
		char dir[4096], faults[256];
		rc = split_paths(cfg->path, k, dir, sizeof(dir));
		if (rc < 0)
			break;
		rc = 0;
		if (!*dir) {
			rc = sp_error(-EINVAL, "SPILL_DISK_PATH: '%s': an empty directory name",
			              cfg->path);
			break;
		}
		/* one directory twice would count its space twice; two on one
		 * filesystem share its bandwidth and its free space */
		statted[k] = stat(dir, &seen[k]) == 0;
		for (int j = 0; j < k && statted[k] && !rc; j++) {
			if (!statted[j])
				continue;
			if (seen[j].st_dev == seen[k].st_dev && seen[j].st_ino == seen[k].st_ino)
				rc = sp_error(-EINVAL,
				              "SPILL_DISK_PATH: '%s' is listed twice (drives %d "
				              "and %d)",
				              dir, j, k);
			else if (seen[j].st_dev == seen[k].st_dev)
				SP_WARN(IO,
				        "disk tier: drives %d and %d (%s) are on one "
				        "filesystem: they share its bandwidth%s",
				        j, k, dir,
				        cfg->capacity ? ""
				                      : ", and its free space counts for each");
		}
		if (rc)
			break;
		struct vmm_disk_config one = *cfg;
		one.path = dir;
		if (cfg->sim) { /* the drives are the profile's; each directory must exist */
			struct disk_sim *s = NULL;
			rc = disk_sim_open(&one, &s);
			if (rc == 0 && k == 0)
				d->s = s;
			else if (rc == 0)
				disk_sim_close(s);
			continue;
		}
		rc = drive_faults(cfg->fault, k, n, faults, sizeof(faults));
		one.fault = faults;
		one.capacity = share;
		if (!rc)
			rc = disk_uring_open(&one, &d->u[k]);
		if (!rc)
			d->n = k + 1;
	}
	if (rc < 0) {
		vmm_disk_close(d);
		return rc;
	}
	*out = d;
	return 0;
}

void vmm_disk_close(struct vmm_disk *d)
{
	if (!d)
		return;
	if (d->s)
		disk_sim_close(d->s);
	for (int k = 0; k < d->n; k++)
		disk_uring_close(d->u[k]);
	free(d->ext.a);
	free(d->tk.a);
	pthread_mutex_destroy(&d->lock);
	free(d);
}

/* A ticket's result once every part is done: 0, the first part's error, or
 * -EAGAIN while a part is in flight. Counts the request in the stats the first
 * time it is seen complete. Under the lock. */
static int settle(struct vmm_disk *d, struct stripe *t)
{
	int err = 0;
	for (int k = 0; k < d->n; k++) {
		if (!(t->mask & (1u << k)))
			continue;
		int r = disk_uring_poll(d->u[k], t->part[k]);
		if (r == -EAGAIN)
			return -EAGAIN;
		if (r < 0 && !err)
			err = r;
	}
	if (!t->counted) {
		t->counted = 1;
		if (err)
			d->errors++;
		else if (t->write)
			d->writes++, d->bytes_written += t->req_bytes;
		else
			d->reads++, d->bytes_read += t->req_bytes;
	}
	return err;
}

/* Tickets the caller released while in flight: counted and forgotten once done. */
static void reap(struct vmm_disk *d)
{
	for (uint32_t i = 0; i < d->tk.n; i++) {
		struct stripe *t = &d->tk.a[i];
		if (!t->live || !t->released || settle(d, t) == -EAGAIN)
			continue;
		for (int k = 0; k < d->n; k++)
			if (t->mask & (1u << k))
				disk_uring_ticket_release(d->u[k], t->part[k]);
		stripe_put(&d->tk, i);
	}
}

int vmm_disk_alloc(struct vmm_disk *d, size_t bytes, uint64_t *extent)
{
	SP_CHECK_ARG(d && extent, "vmm_disk_alloc: NULL argument");
	if (d->s)
		return disk_sim_alloc(d->s, bytes, extent);
	SP_CHECK_ARG(bytes > 0, "vmm_disk_alloc: zero bytes");
	SP_CHECK_ARG((uint64_t)bytes <= UINT64_MAX / 2, "vmm_disk_alloc: %zu bytes is absurd",
	             bytes);
	uint64_t part[DRIVES] = {0};
	int rc = 0;
	/* whole pages: a request may fill the last one, as on one drive */
	uint64_t units = ((uint64_t)bytes + VMM_DISK_ALIGN - 1) / VMM_DISK_ALIGN;
	pthread_mutex_lock(&d->lock);
	int first = d->next_first;
	d->next_first = (first + 1) % d->n;
	pthread_mutex_unlock(&d->lock);
	for (int j = 0; j < d->n && !rc; j++) {
		uint64_t off, b = part_of(units, d->n, j, &off);
		int k = (first + j) % d->n;
		if (b)
			rc = disk_uring_alloc(d->u[k], b, &part[k]);
	}
	uint32_t slot = 0;
	pthread_mutex_lock(&d->lock);
	if (!rc)
		rc = stripe_new(&d->ext, &slot);
	if (!rc) {
		memcpy(d->ext.a[slot].part, part, sizeof(part));
		d->ext.a[slot].bytes = units * VMM_DISK_ALIGN;
		d->ext.a[slot].first = first;
		*extent = handle(&d->ext, slot);
	}
	pthread_mutex_unlock(&d->lock);
	if (rc < 0) /* the parts taken go back */
		for (int k = 0; k < d->n; k++)
			if (part[k] && disk_uring_free(d->u[k], part[k]) < 0) {
			}
	return rc;
}

int vmm_disk_free(struct vmm_disk *d, uint64_t extent)
{
	SP_CHECK_ARG(d, "vmm_disk_free: NULL disk");
	if (d->s)
		return disk_sim_free(d->s, extent);
	/* nothing is freed while any part has I/O in flight */
	pthread_mutex_lock(&d->lock);
	struct stripe *e = stripe_at(&d->ext, extent);
	int rc = e ? 0 : sp_error(-EINVAL, "vmm_disk_free: unknown extent %#" PRIx64, extent);
	for (int k = 0; e && k < d->n && !rc; k++)
		if (e->part[k] && disk_uring_busy(d->u[k], e->part[k]) > 0)
			rc = sp_error(
			    -EBUSY, "vmm_disk_free: extent %#" PRIx64 " has I/O in flight", extent);
	for (int k = 0; e && rc != -EBUSY && k < d->n; k++)
		if (e->part[k]) {
			int r = disk_uring_free(d->u[k], e->part[k]);
			if (!rc)
				rc = r;
		}
	if (e && rc != -EBUSY)
		stripe_put(&d->ext, (uint32_t)extent - 1);
	pthread_mutex_unlock(&d->lock);
	return rc;
}

/* Starts one part per drive; on a failure, what started is waited for and the
 * error returned (no ticket). */
static int striped_io(struct vmm_disk *d, uint64_t extent, void *buf, size_t bytes, int write,
                      uint64_t *ticket)
{
	const char *fn = write ? "vmm_disk_write_async" : "vmm_disk_read_async";
	SP_CHECK_ARG(ticket && buf, "%s: NULL argument", fn);
	SP_CHECK_ARG(bytes > 0, "%s: zero bytes", fn);
	uint64_t part[DRIVES], ebytes = 0;
	int first = 0;
	pthread_mutex_lock(&d->lock);
	reap(d);
	struct stripe *e = stripe_at(&d->ext, extent);
	int ok = e && bytes <= e->bytes;
	if (e)
		ebytes = e->bytes, first = e->first;
	if (ok)
		memcpy(part, e->part, sizeof(part));
	pthread_mutex_unlock(&d->lock);
	if (!e)
		return sp_error(-EINVAL, "%s: unknown extent %#" PRIx64, fn, extent);
	if (!ok)
		return sp_error(-EINVAL, "%s: %zu bytes exceed extent %#" PRIx64 " of %" PRIu64, fn,
		                bytes, extent, ebytes);
	uint64_t tk[DRIVES] = {0};
	int rc = 0;
	unsigned started = 0;
	for (int j = 0; j < d->n && !rc; j++) {
		/* the extent's layout, cut at the request's end */
		uint64_t off, b = part_of(ebytes / VMM_DISK_ALIGN, d->n, j, &off);
		int k = (first + j) % d->n;
		b = off >= bytes ? 0 : b < bytes - off ? b : bytes - off;
		if (!b)
			continue;
		rc = write ? disk_uring_write_async(d->u[k], part[k], (const char *)buf + off, b,
		                                    &tk[k])
		           : disk_uring_read_async(d->u[k], part[k], (char *)buf + off, b, &tk[k]);
		if (!rc)
			started |= 1u << k;
	}
	uint32_t slot = 0;
	pthread_mutex_lock(&d->lock);
	if (!rc)
		rc = stripe_new(&d->tk, &slot);
	if (!rc) {
		struct stripe *t = &d->tk.a[slot];
		memcpy(t->part, tk, sizeof(tk));
		t->mask = started;
		t->write = write;
		t->req_bytes = bytes;
		*ticket = handle(&d->tk, slot);
	}
	pthread_mutex_unlock(&d->lock);
	if (rc < 0) /* the buffer must not be touched once we return */
		for (int k = 0; k < d->n; k++)
			if (started & (1u << k)) {
				if (disk_uring_wait(d->u[k], tk[k]) < 0) {
				}
				disk_uring_ticket_release(d->u[k], tk[k]);
			}
	return rc;
}

int vmm_disk_write_async(struct vmm_disk *d, uint64_t extent, const void *src, size_t bytes,
                         uint64_t *ticket)
{
	SP_CHECK_ARG(d, "vmm_disk_write_async: NULL disk");
	if (d->s)
		return disk_sim_io_async(d->s, extent, bytes, 1, ticket);
	return striped_io(d, extent, (void *)(uintptr_t)src, bytes, 1, ticket);
}

int vmm_disk_read_async(struct vmm_disk *d, uint64_t extent, void *dst, size_t bytes,
                        uint64_t *ticket)
{
	SP_CHECK_ARG(d, "vmm_disk_read_async: NULL disk");
	if (d->s)
		return disk_sim_io_async(d->s, extent, bytes, 0, ticket);
	return striped_io(d, extent, dst, bytes, 0, ticket);
}

int vmm_disk_poll(struct vmm_disk *d, uint64_t ticket)
{
	SP_CHECK_ARG(d, "vmm_disk_poll: NULL disk");
	if (d->s)
		return disk_sim_poll(d->s, ticket);
	pthread_mutex_lock(&d->lock);
	struct stripe *t = stripe_at(&d->tk, ticket);
	int rc = !t || t->released
	             ? sp_error(-EINVAL, "vmm_disk_poll: unknown ticket %#" PRIx64, ticket)
	             : settle(d, t);
	pthread_mutex_unlock(&d->lock);
	return rc;
}

int vmm_disk_wait(struct vmm_disk *d, uint64_t ticket)
{
	SP_CHECK_ARG(d, "vmm_disk_wait: NULL disk");
	if (d->s)
		return disk_sim_wait(d->s, ticket);
	uint64_t tk[DRIVES];
	unsigned mask = 0;
	pthread_mutex_lock(&d->lock);
	struct stripe *t = stripe_at(&d->tk, ticket);
	int rc = !t || t->released
	             ? sp_error(-EINVAL, "vmm_disk_wait: unknown ticket %#" PRIx64, ticket)
	             : 0;
	if (!rc)
		memcpy(tk, t->part, sizeof(tk)), mask = t->mask;
	pthread_mutex_unlock(&d->lock);
	if (rc)
		return rc;
	for (int k = 0; k < d->n; k++) /* unlocked: the caller owns the ticket */
		if (mask & (1u << k) && disk_uring_wait(d->u[k], tk[k]) < 0) {
		} /* the result comes from settle */
	pthread_mutex_lock(&d->lock);
	t = stripe_at(&d->tk, ticket);
	rc = t ? settle(d, t)
	       : sp_error(-EINVAL,
	                  "vmm_disk_wait: ticket %#" PRIx64 " released "
	                  "meanwhile",
	                  ticket);
	pthread_mutex_unlock(&d->lock);
	return rc;
}

void vmm_disk_ticket_release(struct vmm_disk *d, uint64_t ticket)
{
	if (!d)
		return;
	if (d->s) {
		disk_sim_ticket_release(d->s, ticket);
		return;
	}
	pthread_mutex_lock(&d->lock);
	struct stripe *t = stripe_at(&d->tk, ticket);
	if (t && !t->released) {
		t->released = 1; /* forgotten once done: now, or by a later reap */
		reap(d);
	}
	pthread_mutex_unlock(&d->lock);
}

void vmm_disk_stats(const struct vmm_disk *cd, struct vmm_disk_stats_snapshot *out)
{
	memset(out, 0, sizeof(*out));
	if (!cd)
		return;
	if (cd->s) {
		disk_sim_stats(cd->s, out);
		return;
	}
	struct vmm_disk *d = (struct vmm_disk *)(uintptr_t)cd; /* the lock is not state */
	out->ndrives = d->n;
	for (int k = 0; k < d->n; k++) {
		struct vmm_disk_stats_snapshot one;
		memset(&one, 0, sizeof(one));
		disk_uring_stats(d->u[k], &one);
		out->bytes_written += one.bytes_written;
		out->bytes_read += one.bytes_read;
		out->capacity += one.capacity;
		out->used += one.used;
		out->writes += one.writes;
		out->reads += one.reads;
		out->errors += one.errors;
		out->drive_written[k] = one.bytes_written;
		out->drive_read[k] = one.bytes_read;
	}
	if (d->n > 1) { /* requests, not parts: each counted once, seen complete */
		pthread_mutex_lock(&d->lock);
		for (uint32_t i = 0; i < d->tk.n; i++)
			if (d->tk.a[i].live && !d->tk.a[i].counted)
				(void)settle(d, &d->tk.a[i]);
		reap(d);
		out->writes = d->writes;
		out->reads = d->reads;
		out->bytes_written = d->bytes_written;
		out->bytes_read = d->bytes_read;
		out->errors = d->errors;
		pthread_mutex_unlock(&d->lock);
	}
}
