/* vmm/tier_disk_sim.c — the disk tier on the model backend: the profile's
 * drives (`disks`, each at `disk` bandwidth, reads and writes sharing it) in
 * virtual time, so `spill sim --disk` plans and times what a real tier would
 * do, with the vmm's own policies deciding what goes down.
 *
 * Extents are only counted against the capacity (SPILL_DISK_MEM, else the free
 * space of the directory, which must exist: nothing is created). A transfer is
 * striped in VMM_DISK_ALIGN units over every drive, one host stream per drive,
 * each part a dev_disk_io_async; its ticket completes when every part has (an
 * event per drive). No byte moves: the vmm's host pointers on this backend are
 * address space only. Thread-safety: one lock, as the real tier.
 */
#include "vmm/disk_impl.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

struct sim_ticket {
	int live, nev; /* events recorded, one per drive with a part */
	struct dev_event *ev[VMM_DISK_DRIVES_MAX];
	uint32_t gen, next_free, ext; /* ext: the extent's slot */
};

struct sim_extent {
	uint64_t size; /* whole pages */
	uint32_t gen, next_free;
	int live;
};

struct disk_sim {
	pthread_mutex_t lock;
	struct dev_ctx *ctx;
	int ndrives;
	struct dev_stream *st[VMM_DISK_DRIVES_MAX];
	uint64_t capacity, used;
	struct sim_extent *ext;
	uint32_t next, cap, free_ext;
	struct sim_ticket *tk;
	uint32_t ntk, free_tk;
	uint64_t bytes_written, bytes_read, writes, reads;
	uint64_t drive_written[VMM_DISK_DRIVES_MAX], drive_read[VMM_DISK_DRIVES_MAX];
};

#define SIM_NONE UINT32_MAX

/* Handles are generation << 32 | slot + 1, as the real tier's: a stale one
 * (freed, released, reused slot) is refused. */
static uint64_t sim_handle(uint32_t gen, uint32_t slot)
{
	return (uint64_t)gen << 32 | (slot + 1);
}

static uint64_t align_up(uint64_t b)
{
	return (b + VMM_DISK_ALIGN - 1) / VMM_DISK_ALIGN * VMM_DISK_ALIGN;
}

int disk_sim_open(const struct vmm_disk_config *cfg, struct disk_sim **out)
{
	SP_CHECK_ARG(cfg->path && *cfg->path, "vmm_disk_open: no directory (set SPILL_DISK_PATH)");
	SP_CHECK_ARG(!cfg->fault || !*cfg->fault,
	             "SPILL_DISK_FAULT: fault injection needs a real disk tier (this one is "
	             "simulated on the model backend)");
	struct stat sb;
	if (stat(cfg->path, &sb) < 0)
		return sp_error(-errno,
		                "disk tier '%s': %s (a simulated tier creates nothing: "
		                "make the directory first)",
		                cfg->path, strerror(errno));
	if (!S_ISDIR(sb.st_mode))
		return sp_error(-ENOTDIR, "disk tier '%s': not a directory", cfg->path);
	uint64_t capacity = cfg->capacity;
	if (!capacity) {
		struct statvfs fs;
		if (statvfs(cfg->path, &fs) < 0)
			return sp_error(-errno, "disk tier '%s': statvfs: %s", cfg->path,
			                strerror(errno));
		capacity = (uint64_t)fs.f_bavail * fs.f_frsize;
	}
	struct disk_sim *d = calloc(1, sizeof(*d));
	if (!d)
		return sp_error(-ENOMEM, "vmm_disk_open: out of memory");
	pthread_mutex_init(&d->lock, NULL);
	d->ctx = cfg->sim;
	d->capacity = capacity;
	d->free_ext = d->free_tk = SIM_NONE;
	d->ndrives = dev_disk_count(cfg->sim);
	if (d->ndrives > VMM_DISK_DRIVES_MAX)
		d->ndrives = VMM_DISK_DRIVES_MAX;
	int rc = 0;
	for (int i = 0; i < d->ndrives && !rc; i++)
		rc = dev_stream_create(cfg->sim, DEV_HOST, &d->st[i]);
	if (rc < 0) {
		disk_sim_close(d);
		return rc;
	}
	*out = d;
	return 0;
}

void disk_sim_close(struct disk_sim *d)
{
	if (!d)
		return;
	for (int i = 0; i < d->ndrives; i++)
		if (d->st[i] && dev_stream_destroy(d->st[i]) < 0) {
		} /* waits for the drive's transfers */
	for (uint32_t i = 0; i < d->ntk; i++)
		for (int k = 0; k < VMM_DISK_DRIVES_MAX; k++)
			if (d->tk[i].ev[k] && dev_event_destroy(d->tk[i].ev[k]) < 0) {
			}
	free(d->tk);
	free(d->ext);
	pthread_mutex_destroy(&d->lock);
	free(d);
}

int disk_sim_alloc(struct disk_sim *d, size_t bytes, uint64_t *extent)
{
	SP_CHECK_ARG(bytes > 0, "vmm_disk_alloc: zero bytes");
	SP_CHECK_ARG((uint64_t)bytes <= UINT64_MAX / 2, "vmm_disk_alloc: %zu bytes is absurd",
	             bytes);
	uint64_t size = align_up(bytes);
	int rc = 0;
	pthread_mutex_lock(&d->lock);
	if (d->used + size > d->capacity) {
		rc = sp_error(-ENOSPC,
		              "disk tier: %" PRIu64 " bytes do not fit (%" PRIu64 " of %" PRIu64
		              " used)",
		              size, d->used, d->capacity);
	} else if (d->free_ext == SIM_NONE && d->next == d->cap) {
		uint32_t nc = d->cap ? 2 * d->cap : 256;
		struct sim_extent *ne = realloc(d->ext, (size_t)nc * sizeof(*ne));
		if (!ne)
			rc = sp_error(-ENOMEM, "disk tier: %u extents", nc);
		else
			d->ext = ne, d->cap = nc;
	}
	if (rc == 0) {
		uint32_t i;
		if (d->free_ext != SIM_NONE) {
			i = d->free_ext;
			d->free_ext = d->ext[i].next_free;
		} else {
			i = d->next++;
			d->ext[i].gen = 0;
		}
		d->ext[i].gen++;
		d->ext[i].size = size;
		d->ext[i].live = 1;
		d->used += size;
		*extent = sim_handle(d->ext[i].gen, i);
	}
	pthread_mutex_unlock(&d->lock);
	return rc;
}

/* The live extent of a handle, or NULL. Under the lock. */
static struct sim_extent *extent_at(struct disk_sim *d, uint64_t h)
{
	uint32_t i = (uint32_t)h - 1;
	if ((uint32_t)h == 0 || i >= d->next || !d->ext[i].live || d->ext[i].gen != h >> 32)
		return NULL;
	return &d->ext[i];
}

/* Any live ticket on extent slot i still in flight (virtual time)? */
static int extent_busy(struct disk_sim *d, uint32_t i)
{
	for (uint32_t j = 0; j < d->ntk; j++) {
		struct sim_ticket *t = &d->tk[j];
		if (!t->live || t->ext != i)
			continue;
		for (int k = 0; k < t->nev; k++)
			if (dev_event_peek(t->ev[k]) == -EAGAIN)
				return 1;
	}
	return 0;
}

int disk_sim_free(struct disk_sim *d, uint64_t extent)
{
	int rc = 0;
	pthread_mutex_lock(&d->lock);
	struct sim_extent *e = extent_at(d, extent);
	if (!e) {
		rc = sp_error(-EINVAL, "vmm_disk_free: unknown extent %#" PRIx64, extent);
	} else if (extent_busy(d, (uint32_t)extent - 1)) {
		rc = sp_error(-EBUSY, "vmm_disk_free: extent %#" PRIx64 " has I/O in flight",
		              extent);
	} else {
		d->used -= e->size;
		e->live = 0;
		e->next_free = d->free_ext;
		d->free_ext = (uint32_t)extent - 1;
	}
	pthread_mutex_unlock(&d->lock);
	return rc;
}

/* A free ticket slot (index), its events created. Under the lock. */
static int ticket_get(struct disk_sim *d, uint32_t *out)
{
	if (d->free_tk == SIM_NONE) {
		uint32_t nn = d->ntk ? 2 * d->ntk : 64;
		struct sim_ticket *nt = realloc(d->tk, (size_t)nn * sizeof(*nt));
		if (!nt)
			return sp_error(-ENOMEM, "disk tier: %u tickets", nn);
		memset(nt + d->ntk, 0, (size_t)(nn - d->ntk) * sizeof(*nt));
		d->tk = nt;
		for (uint32_t i = nn; i-- > d->ntk;) {
			nt[i].next_free = d->free_tk;
			d->free_tk = i;
		}
		d->ntk = nn;
	}
	uint32_t i = d->free_tk;
	struct sim_ticket *t = &d->tk[i];
	for (int k = 0; k < d->ndrives; k++)
		if (!t->ev[k])
			SP_CHECK(dev_event_create(d->ctx, &t->ev[k]));
	d->free_tk = t->next_free;
	t->live = 1;
	t->nev = 0;
	t->gen++;
	*out = i;
	return 0;
}

int disk_sim_io_async(struct disk_sim *d, uint64_t extent, size_t bytes, int write,
                      uint64_t *ticket)
{
	SP_CHECK_ARG(ticket, "vmm_disk_%s_async: NULL ticket", write ? "write" : "read");
	SP_CHECK_ARG(bytes > 0, "vmm_disk_%s_async: zero bytes", write ? "write" : "read");
	int rc = 0;
	pthread_mutex_lock(&d->lock);
	struct sim_extent *e = extent_at(d, extent);
	if (!e || align_up(bytes) > e->size) {
		rc = sp_error(-EINVAL, "vmm_disk_%s_async: %zu bytes and extent %#" PRIx64,
		              write ? "write" : "read", bytes, extent);
		goto out;
	}
	uint32_t i = 0;
	SP_CHECK_GOTO(ticket_get(d, &i), rc, out);
	struct sim_ticket *t = &d->tk[i];
	t->ext = (uint32_t)extent - 1;
	/* striped: whole VMM_DISK_ALIGN units spread evenly, the extra ones from a
	 * drive that rotates with the extent (as the real tier does) */
	int n = d->ndrives, first = (int)(t->ext % (uint32_t)n);
	uint64_t units = align_up(bytes) / VMM_DISK_ALIGN, left = bytes;
	for (int j = 0; j < n && left && !rc; j++) {
		int k = (first + j) % n;
		uint64_t u = units / (uint64_t)n + ((uint64_t)j < units % (uint64_t)n);
		uint64_t part = u * VMM_DISK_ALIGN < left ? u * VMM_DISK_ALIGN : left;
		if (!part)
			continue;
		left -= part;
		rc = dev_disk_io_async(d->st[k], k, write, part);
		if (rc == 0)
			rc = dev_event_record(t->ev[t->nev], d->st[k]);
		if (rc == 0) {
			t->nev++;
			if (write)
				d->drive_written[k] += part;
			else
				d->drive_read[k] += part;
		}
	}
	if (rc < 0) { /* parts queued complete on their own; the ticket is not given */
		t->live = 0;
		t->next_free = d->free_tk;
		d->free_tk = i;
		goto out;
	}
	if (write) {
		d->bytes_written += bytes;
		d->writes++;
	} else {
		d->bytes_read += bytes;
		d->reads++;
	}
	*ticket = sim_handle(t->gen, i);
out:
	pthread_mutex_unlock(&d->lock);
	return rc;
}

static struct sim_ticket *ticket_at(struct disk_sim *d, uint64_t ticket, const char *fn)
{
	uint32_t i = (uint32_t)ticket - 1;
	if ((uint32_t)ticket == 0 || i >= d->ntk || !d->tk[i].live ||
	    d->tk[i].gen != ticket >> 32) {
		sp_error(-EINVAL, "%s: unknown ticket %#" PRIx64, fn, ticket);
		return NULL;
	}
	return &d->tk[i];
}

int disk_sim_poll(struct disk_sim *d, uint64_t ticket)
{
	pthread_mutex_lock(&d->lock);
	struct sim_ticket *t = ticket_at(d, ticket, "vmm_disk_poll");
	int rc = t ? 0 : -EINVAL;
	for (int k = 0; t && k < t->nev && rc == 0; k++)
		rc = dev_event_peek(t->ev[k]);
	pthread_mutex_unlock(&d->lock);
	return rc;
}

int disk_sim_wait(struct disk_sim *d, uint64_t ticket)
{
	struct dev_event *ev[VMM_DISK_DRIVES_MAX];
	pthread_mutex_lock(&d->lock);
	struct sim_ticket *t = ticket_at(d, ticket, "vmm_disk_wait");
	int n = t ? t->nev : 0, rc = t ? 0 : -EINVAL;
	for (int k = 0; k < n; k++)
		ev[k] = t->ev[k];
	pthread_mutex_unlock(&d->lock);
	/* unlocked: the clock moves, and callbacks it runs may reach the tier; the
	 * caller owns the ticket, so its events stay until it releases it */
	for (int k = 0; k < n && rc == 0; k++)
		rc = dev_event_sync(ev[k]);
	return rc;
}

void disk_sim_ticket_release(struct disk_sim *d, uint64_t ticket)
{
	pthread_mutex_lock(&d->lock);
	uint32_t i = (uint32_t)ticket - 1;
	struct sim_ticket *t = (uint32_t)ticket && i < d->ntk ? &d->tk[i] : NULL;
	if (t && t->live && t->gen == ticket >> 32) {
		t->live = 0;
		t->next_free = d->free_tk;
		d->free_tk = i;
	}
	pthread_mutex_unlock(&d->lock);
}

void disk_sim_stats(const struct disk_sim *cd, struct vmm_disk_stats_snapshot *out)
{
	struct disk_sim *d = (struct disk_sim *)(uintptr_t)cd; /* the lock is not state */
	pthread_mutex_lock(&d->lock);
	out->bytes_written = d->bytes_written;
	out->bytes_read = d->bytes_read;
	out->capacity = d->capacity;
	out->used = d->used;
	out->writes = d->writes;
	out->reads = d->reads;
	out->ndrives = d->ndrives;
	memcpy(out->drive_written, d->drive_written, sizeof(out->drive_written));
	memcpy(out->drive_read, d->drive_read, sizeof(out->drive_read));
	pthread_mutex_unlock(&d->lock);
}
