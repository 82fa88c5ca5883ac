/* vmm/config.c — struct vmm_config from the parameter table (struct sp_params).
 *
 * Pure: reads the already-parsed SPILL_* values, never the environment. The
 * disk tier fills its own part (vmm_disk_config_from_params).
 */
#include "vmm/internal.h"

#include <string.h>
#include <unistd.h>

int vmm_config_from_params(const struct sp_params *p, struct vmm_config *cfg)
{
	struct vmm_config c;
	memset(&c, 0, sizeof(c));
	SP_CHECK(vmm_policy_parse(p->vmm_policy, &c.policy));
	c.ndevices = (int)p->devices;
	c.device_mem = p->vmm_device_mem;
	c.stable_mem = p->vmm_stable_mem;
	c.host_mem = p->host_mem;
	c.host_grow = p->host_grow;
	if (!c.host_mem) {
		long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
		c.host_mem =
		    pages > 0 && psz > 0 ? (uint64_t)pages * (uint64_t)psz / 4 : (1ull << 30);
	}
	c.use_disk = p->disk_path && p->disk_path[0];
	if (c.use_disk)
		vmm_disk_config_from_params(p, &c.disk);
	if (p->vmm_max_objects <= 0 || p->vmm_max_objects > (1l << 24))
		return sp_error(-EINVAL, "SPILL_VMM_MAX_OBJECTS=%ld is not in 1..16777216",
		                p->vmm_max_objects);
	c.max_objects = (unsigned)p->vmm_max_objects;
	c.trace_cap = (unsigned)p->vmm_trace;
	c.align = 256;
	c.size_class_bits = 2;
	c.stats_at_close = p->stats;
	c.host_waits = !p->vmm_ordered_reuse;
	c.link_copies = (int)p->vmm_link_copies;
	c.trace_file = p->vmm_trace_file;
	*cfg = c;
	return 0;
}
