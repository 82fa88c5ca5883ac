/* tests/vmm/test_config.c — struct vmm_config from SPILL_* parameters: defaults
 * (the host pool pinned in grains up to 256M), explicit values, and bad values
 * refused with the variable named. */
#include "tests/test.h"
#include "vmm/vmm.h"

#include <string.h>

int main(void)
{
	struct sp_params p;
	struct vmm_config c;
	sp_params_defaults(&p);
	CHECK_OK(vmm_config_from_params(&p, &c));
	CHECK(c.policy == VMM_POLICY_AUTO);
	CHECK(c.host_mem > 0); /* 0 = a quarter of physical memory */
	CHECK(!c.use_disk);
	CHECK(c.max_objects == 65536 && c.trace_cap == 4096 && c.align == 256);
	CHECK(c.host_waits == 0);           /* stream-ordered reuse by default */
	CHECK(c.host_grow == 256ull << 20); /* the host pool is pinned as it fills */
	CHECK_OK(sp_params_set(&p, "SPILL_VMM_POLICY", "lru"));
	CHECK_OK(sp_params_set(&p, "SPILL_HOST_MEM", "64M"));
	CHECK_OK(sp_params_set(&p, "SPILL_HOST_GROW", "0"));
	CHECK_OK(sp_params_set(&p, "SPILL_VMM_DEVICE_MEM", "1G"));
	CHECK_OK(sp_params_set(&p, "SPILL_VMM_STABLE_MEM", "256M"));
	CHECK_OK(sp_params_set(&p, "SPILL_DISK_PATH", "/tmp/spill-disk"));
	CHECK_OK(sp_params_set(&p, "SPILL_DISK_MEM", "2G"));
	CHECK_OK(sp_params_set(&p, "SPILL_STATS", "1"));
	CHECK_OK(sp_params_set(&p, "SPILL_VMM_ORDERED_REUSE", "0"));
	CHECK_OK(vmm_config_from_params(&p, &c));
	CHECK(c.host_waits == 1);
	CHECK(c.policy == VMM_POLICY_LRU);
	CHECK(c.host_mem == 64ull << 20 && c.device_mem == 1ull << 30);
	CHECK(c.host_grow == 0); /* pinned whole at open */
	CHECK(c.stable_mem == 256ull << 20);
	CHECK(c.use_disk && strcmp(c.disk.path, "/tmp/spill-disk") == 0);
	CHECK(c.disk.capacity == 2ull << 30);
	CHECK(c.stats_at_close == 1);
	CHECK(sp_params_set(&p, "SPILL_VMM_POLICY", "fifo") == -EINVAL);
	CHECK(strstr(sp_last_error(), "SPILL_VMM_POLICY"));
	CHECK(sp_params_set(&p, "SPILL_HOST_GROW", "lots") == -EINVAL);
	CHECK(strstr(sp_last_error(), "SPILL_HOST_GROW"));
	CHECK_OK(sp_params_set(&p, "SPILL_VMM_MAX_OBJECTS", "0"));
	CHECK(vmm_config_from_params(&p, &c) == -EINVAL);
	CHECK(strstr(sp_last_error(), "SPILL_VMM_MAX_OBJECTS"));
	TEST_PASS();
}
