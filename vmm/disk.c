/* vmm/disk.c — the disk tier's one entry point (vmm/disk.h): on the model
 * backend a simulated tier (tier_disk_sim.c: the profile's drives in virtual
 * time); elsewhere one io_uring tier (tier_disk.c) per drive, a directory each
 * (SPILL_DISK_PATH "dir1,dir2,..."), with every object striped over all of
 * them. The vmm core calls the same functions either way.
 *
 * Striping: an extent of B bytes is one sub-extent per drive, drive k holding
 * the k-th of n contiguous parts of VMM_DISK_ALIGN units (the first B/4K mod n
 * drives one unit more), so a transfer is n large sequential requests, one per
 * drive's ring, and the drives fill evenly. A ticket completes when every part
 * has; its result is the first part's error (in drive order). Capacity
 * (SPILL_DISK_MEM) is split evenly. Fault rules (SPILL_DISK_FAULT) apply to
 * every drive, or to drive K alone with a "K/" prefix ("1/write:2:EIO").
 * Handles (extents, tickets) are generation << 32 | slot + 1: a stale one is
 * refused. Thread-safety: a lock over the tables; the drives have their own.
 */
#include "vmm/disk_impl.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define DRIVES VMM_DISK_DRIVES_MAX

struct stripe { /* an extent or a ticket: one part per drive (0: none) */
	uint64_t part[DRIVES];
	uint64_t bytes;     /* extent: its size; ticket: drive mask, bit 31 a write */
	uint64_t req_bytes; /* ticket: the request's bytes */
	uint32_t gen, next_free;
	int live;
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
	/* striped requests that succeeded (counted once, not per drive), and bytes */
	uint64_t writes, reads, bytes_written, bytes_read;
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
	memset(s->part, 0, sizeof(s->part));
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

/* Bytes of drive k's part of an object of `bytes` over n drives (see top). */
static uint64_t part_bytes(uint64_t bytes, int n, int k, uint64_t *offset)
{
	uint64_t units = (bytes + VMM_DISK_ALIGN - 1) / VMM_DISK_ALIGN, off = 0;
	for (int j = 0; j <= k; j++) {
		uint64_t u = units / (uint64_t)n + ((uint64_t)j < units % (uint64_t)n);
		uint64_t b = u * VMM_DISK_ALIGN;
		if (off + b > bytes)
			b = off < bytes ? bytes - off : 0;
		if (j == k) {
			*offset = off;
			return b;
		}
		off += b;
	}
	return 0;
}

/* The k-th directory of a comma-separated list into buf; returns the count. */
static int split_paths(const char *list, int k, char *buf, size_t n)
{
	int i = 0;
	const char *p = list;
	for (;;) {
		size_t len = strcspn(p, ",");
		if (i == k && buf) {
			snprintf(buf, n, "%.*s", (int)len, p);
		}
		i++;
		if (!p[len])
			return i;
		p += len + 1;
	}
}

/* Drive k's fault rules from the spec: rules without a prefix, and "k/" ones. */
static int drive_faults(const char *spec, int k, char *buf, size_t n)
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
			if (end != slash || d < 0 || d >= DRIVES)
				return sp_error(
				    -EINVAL,
				    "SPILL_DISK_FAULT: '%s': a drive prefix is K/ with K "
				    "a drive 0..%d",
				    spec, DRIVES - 1);
			if (d != k)
				continue;
			rule = slash + 1;
		}
		size_t used = strlen(buf);
		snprintf(buf + used, n - used, "%s%s", used ? "," : "", rule);
	}
	return 0;
}

int vmm_disk_open(const struct vmm_disk_config *cfg, struct vmm_disk **out)
{
	SP_CHECK_ARG(cfg && out, "vmm_disk_open: NULL %s", cfg ? "out" : "config");
	SP_CHECK_ARG(cfg->path && *cfg->path, "vmm_disk_open: no directory (set SPILL_DISK_PATH)");
	int n = split_paths(cfg->path, -1, NULL, 0);
	SP_CHECK_ARG(n <= DRIVES, "SPILL_DISK_PATH: %d directories, at most %d drives", n, DRIVES);
	struct vmm_disk *d = calloc(1, sizeof(*d));
	if (!d)
		return sp_error(-ENOMEM, "vmm_disk_open: out of memory");
	pthread_mutex_init(&d->lock, NULL);
	d->ext.free = d->tk.free = NONE;
	int rc = 0;
	if (cfg->sim) { /* the drives are the profile's; the directories must exist */
		for (int k = 0; k < n && !rc; k++) {
			char dir[4096];
			split_paths(cfg->path, k, dir, sizeof(dir));
			struct vmm_disk_config one = *cfg;
			one.path = dir;
			struct disk_sim *s = NULL;
			rc = disk_sim_open(&one, &s);
			if (k == 0)
				d->s = s;
			else
				disk_sim_close(s);
		}
	}
	for (int k = 0; k < n && !cfg->sim && !rc; k++) {
		char dir[4096], faults[256];
		split_paths(cfg->path, k, dir, sizeof(dir));
		if (!*dir) {
			rc = sp_error(-EINVAL, "SPILL_DISK_PATH: '%s': an empty directory name",
			              cfg->path);
			break;
		}
		rc = drive_faults(cfg->fault, k, faults, sizeof(faults));
		struct vmm_disk_config one = *cfg;
		one.path = dir;
		one.fault = faults;
		one.capacity = cfg->capacity / (uint64_t)n;
		if (cfg->capacity && !one.capacity)
			one.capacity = VMM_DISK_ALIGN;
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

int vmm_disk_alloc(struct vmm_disk *d, size_t bytes, uint64_t *extent)
{
	SP_CHECK_ARG(d && extent, "vmm_disk_alloc: NULL argument");
	if (d->s)
		return disk_sim_alloc(d->s, bytes, extent);
	SP_CHECK_ARG(bytes > 0, "vmm_disk_alloc: zero bytes");
	uint64_t part[DRIVES] = {0};
	int rc = 0, k;
	/* the layout is of whole units: a request may fill the last one, as on one drive */
	uint64_t size = ((uint64_t)bytes + VMM_DISK_ALIGN - 1) / VMM_DISK_ALIGN * VMM_DISK_ALIGN;
	for (k = 0; k < d->n && !rc; k++) {
		uint64_t off, b = part_bytes(size, d->n, k, &off);
		if (b)
			rc = disk_uring_alloc(d->u[k], b, &part[k]);
	}
	uint32_t slot = 0;
	pthread_mutex_lock(&d->lock);
	if (!rc)
		rc = stripe_new(&d->ext, &slot);
	if (!rc) {
		memcpy(d->ext.a[slot].part, part, sizeof(part));
		d->ext.a[slot].bytes = size;
		*extent = handle(&d->ext, slot);
	}
	pthread_mutex_unlock(&d->lock);
	if (rc < 0) /* the parts taken go back */
		for (int j = 0; j < d->n; j++)
			if (part[j] && disk_uring_free(d->u[j], part[j]) < 0) {
			}
	return rc;
}

int vmm_disk_free(struct vmm_disk *d, uint64_t extent)
{
	SP_CHECK_ARG(d, "vmm_disk_free: NULL disk");
	if (d->s)
		return disk_sim_free(d->s, extent);
	/* parts with I/O in flight (-EBUSY) stay, and the extent with them, so
	 * that a later free finishes the job */
	pthread_mutex_lock(&d->lock);
	struct stripe *e = stripe_at(&d->ext, extent);
	int rc = e ? 0 : sp_error(-EINVAL, "vmm_disk_free: unknown extent %#" PRIx64, extent);
	int left = 0;
	for (int k = 0; e && k < d->n; k++) {
		if (!e->part[k])
			continue;
		int r = disk_uring_free(d->u[k], e->part[k]);
		if (r == 0)
			e->part[k] = 0;
		else
			left = 1;
		if (!rc)
			rc = r;
	}
	if (e && !left)
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
	pthread_mutex_lock(&d->lock);
	struct stripe *e = stripe_at(&d->ext, extent);
	int ok = e && bytes <= e->bytes;
	if (e)
		ebytes = e->bytes;
	if (ok)
		memcpy(part, e->part, sizeof(part));
	pthread_mutex_unlock(&d->lock);
	if (!e)
		return sp_error(-EINVAL, "%s: unknown extent %#" PRIx64, fn, extent);
	if (!ok)
		return sp_error(-EINVAL, "%s: %zu bytes exceed extent %#" PRIx64 " of %" PRIu64, fn,
		                bytes, extent, ebytes);
	uint64_t tk[DRIVES] = {0};
	int rc = 0, started = 0;
	for (int k = 0; k < d->n && !rc; k++) {
		/* the extent's layout, cut at the request's end */
		uint64_t off, b = part_bytes(ebytes, d->n, k, &off);
		b = off >= bytes ? 0 : b < bytes - off ? b : bytes - off;
		if (!b)
			continue;
		rc = write ? disk_uring_write_async(d->u[k], part[k], (const char *)buf + off, b,
		                                    &tk[k])
		           : disk_uring_read_async(d->u[k], part[k], (char *)buf + off, b, &tk[k]);
		if (!rc)
			started |= 1 << k;
	}
	uint32_t slot = 0;
	pthread_mutex_lock(&d->lock);
	if (!rc)
		rc = stripe_new(&d->tk, &slot);
	if (!rc) {
		memcpy(d->tk.a[slot].part, tk, sizeof(tk));
		/* which drives have a part, and (bit 31) a write */
		d->tk.a[slot].bytes = (unsigned)started | (write ? 1u << 31 : 0);
		d->tk.a[slot].req_bytes = bytes;
		*ticket = handle(&d->tk, slot);
	}
	pthread_mutex_unlock(&d->lock);
	if (rc < 0) /* the buffer must not be touched once we return */
		for (int k = 0; k < d->n; k++)
			if (started & (1 << k)) {
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

/* A ticket's parts, or -EINVAL. */
static int ticket_parts(struct vmm_disk *d, uint64_t ticket, uint64_t *tk, unsigned *mask,
                        const char *fn)
{
	pthread_mutex_lock(&d->lock);
	struct stripe *t = stripe_at(&d->tk, ticket);
	if (t) {
		memcpy(tk, t->part, sizeof(t->part));
		*mask = (unsigned)t->bytes;
	}
	pthread_mutex_unlock(&d->lock);
	return t ? 0 : sp_error(-EINVAL, "%s: unknown ticket %#" PRIx64, fn, ticket);
}

int vmm_disk_poll(struct vmm_disk *d, uint64_t ticket)
{
	SP_CHECK_ARG(d, "vmm_disk_poll: NULL disk");
	if (d->s)
		return disk_sim_poll(d->s, ticket);
	uint64_t tk[DRIVES];
	unsigned mask;
	SP_CHECK(ticket_parts(d, ticket, tk, &mask, "vmm_disk_poll"));
	int err = 0;
	for (int k = 0; k < d->n; k++) {
		if (!(mask & (1u << k)))
			continue;
		int r = disk_uring_poll(d->u[k], tk[k]);
		if (r == -EAGAIN)
			return -EAGAIN; /* an error is reported once every part is done */
		if (r < 0 && !err)
			err = r;
	}
	return err;
}

int vmm_disk_wait(struct vmm_disk *d, uint64_t ticket)
{
	SP_CHECK_ARG(d, "vmm_disk_wait: NULL disk");
	if (d->s)
		return disk_sim_wait(d->s, ticket);
	uint64_t tk[DRIVES];
	unsigned mask;
	SP_CHECK(ticket_parts(d, ticket, tk, &mask, "vmm_disk_wait"));
	int err = 0;
	for (int k = 0; k < d->n; k++)
		if (mask & (1u << k)) {
			int r = disk_uring_wait(d->u[k], tk[k]);
			if (r < 0 && !err)
				err = r;
		}
	return err;
}

void vmm_disk_ticket_release(struct vmm_disk *d, uint64_t ticket)
{
	if (!d)
		return;
	if (d->s) {
		disk_sim_ticket_release(d->s, ticket);
		return;
	}
	uint64_t tk[DRIVES], bytes = 0;
	unsigned mask = 0;
	pthread_mutex_lock(&d->lock);
	struct stripe *t = stripe_at(&d->tk, ticket);
	if (t) {
		memcpy(tk, t->part, sizeof(tk));
		mask = (unsigned)t->bytes;
		bytes = t->req_bytes;
		stripe_put(&d->tk, (uint32_t)ticket - 1);
	}
	pthread_mutex_unlock(&d->lock);
	int ok = t != NULL;
	for (int k = 0; k < d->n; k++)
		if (mask & (1u << k)) {
			ok &= disk_uring_poll(d->u[k], tk[k]) == 0;
			disk_uring_ticket_release(d->u[k], tk[k]);
		}
	if (ok) { /* a striped request that succeeded counts once */
		pthread_mutex_lock(&d->lock);
		if (mask & (1u << 31))
			d->writes++, d->bytes_written += bytes;
		else
			d->reads++, d->bytes_read += bytes;
		pthread_mutex_unlock(&d->lock);
	}
}

void vmm_disk_stats(const struct vmm_disk *d, struct vmm_disk_stats_snapshot *out)
{
	memset(out, 0, sizeof(*out));
	if (!d)
		return;
	if (d->s) {
		disk_sim_stats(d->s, out);
		return;
	}
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
	if (d->n > 1) { /* a striped request counts once (at its release), not per drive,
	                   and only when every part succeeded, as the vmm counts it */
		pthread_mutex_lock((pthread_mutex_t *)&d->lock); /* the lock is not state */
		out->writes = d->writes;
		out->reads = d->reads;
		out->bytes_written = d->bytes_written;
		out->bytes_read = d->bytes_read;
		pthread_mutex_unlock((pthread_mutex_t *)&d->lock);
	}
}
