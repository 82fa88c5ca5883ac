/* vmm/disk.c — the disk tier's one entry point (vmm/disk.h): a tier is either
 * real (tier_disk.c, io_uring on files) or, on the model backend, simulated
 * (tier_disk_sim.c: the profile's drives in virtual time). The vmm core calls
 * the same functions either way, so its policies run unchanged in what-if
 * studies.
 */
#include "vmm/disk_impl.h"

#include <stdlib.h>
#include <string.h>

struct vmm_disk {
	struct disk_uring *u; /* exactly one of the two */
	struct disk_sim *s;
};

int vmm_disk_open(const struct vmm_disk_config *cfg, struct vmm_disk **out)
{
	SP_CHECK_ARG(cfg && out, "vmm_disk_open: NULL %s", cfg ? "out" : "config");
	struct vmm_disk *d = calloc(1, sizeof(*d));
	if (!d)
		return sp_error(-ENOMEM, "vmm_disk_open: out of memory");
	int rc = cfg->sim ? disk_sim_open(cfg, &d->s) : disk_uring_open(cfg, &d->u);
	if (rc < 0) {
		free(d);
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
	else
		disk_uring_close(d->u);
	free(d);
}

int vmm_disk_alloc(struct vmm_disk *d, size_t bytes, uint64_t *extent)
{
	SP_CHECK_ARG(d && extent, "vmm_disk_alloc: NULL argument");
	return d->s ? disk_sim_alloc(d->s, bytes, extent) : disk_uring_alloc(d->u, bytes, extent);
}

int vmm_disk_free(struct vmm_disk *d, uint64_t extent)
{
	SP_CHECK_ARG(d, "vmm_disk_free: NULL disk");
	return d->s ? disk_sim_free(d->s, extent) : disk_uring_free(d->u, extent);
}

int vmm_disk_write_async(struct vmm_disk *d, uint64_t extent, const void *src, size_t bytes,
                         uint64_t *ticket)
{
	SP_CHECK_ARG(d, "vmm_disk_write_async: NULL disk");
	return d->s ? disk_sim_io_async(d->s, extent, bytes, 1, ticket)
	            : disk_uring_write_async(d->u, extent, src, bytes, ticket);
}

int vmm_disk_read_async(struct vmm_disk *d, uint64_t extent, void *dst, size_t bytes,
                        uint64_t *ticket)
{
	SP_CHECK_ARG(d, "vmm_disk_read_async: NULL disk");
	return d->s ? disk_sim_io_async(d->s, extent, bytes, 0, ticket)
	            : disk_uring_read_async(d->u, extent, dst, bytes, ticket);
}

int vmm_disk_poll(struct vmm_disk *d, uint64_t ticket)
{
	SP_CHECK_ARG(d, "vmm_disk_poll: NULL disk");
	return d->s ? disk_sim_poll(d->s, ticket) : disk_uring_poll(d->u, ticket);
}

int vmm_disk_wait(struct vmm_disk *d, uint64_t ticket)
{
	SP_CHECK_ARG(d, "vmm_disk_wait: NULL disk");
	return d->s ? disk_sim_wait(d->s, ticket) : disk_uring_wait(d->u, ticket);
}

void vmm_disk_ticket_release(struct vmm_disk *d, uint64_t ticket)
{
	if (!d)
		return;
	if (d->s)
		disk_sim_ticket_release(d->s, ticket);
	else
		disk_uring_ticket_release(d->u, ticket);
}

void vmm_disk_stats(const struct vmm_disk *d, struct vmm_disk_stats_snapshot *out)
{
	memset(out, 0, sizeof(*out));
	if (!d)
		return;
	if (d->s)
		disk_sim_stats(d->s, out);
	else
		disk_uring_stats(d->u, out);
}
