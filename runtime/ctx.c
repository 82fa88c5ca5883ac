/* runtime/ctx.c — opening a runtime context: configuration from the SPILL_*
 * table, the device backend, the vmm over it, one compute stream per device
 * and a CPU stream, and the CPU kernels' thread count (SPILL_THREADS, which
 * only this top level applies: modules take it as a value).
 */
#include "runtime/internal.h"

#include "common/log.h"

#include <stdlib.h>
#include <string.h>

struct rt_exec_config rt_exec_defaults(void)
{
	return (struct rt_exec_config){.lookahead = 3,
	                               .window = 2,
	                               .late_binding = 1,
	                               .eager_writeback = 0,
	                               .discard = 1,
	                               .hints = 1,
	                               .place_hints = 1};
}

int rt_config_from_params(const struct sp_params *p, struct rt_config *cfg)
{
	SP_CHECK_ARG(p && cfg, "rt_config_from_params: NULL argument");
	struct rt_config c;
	memset(&c, 0, sizeof(c));
	SP_CHECK(dev_config_from_params(p, &c.dev));
	SP_CHECK(vmm_config_from_params(p, &c.vmm));
	c.exec = rt_exec_defaults();
	if (p->prefetch < 0 || p->prefetch > 64)
		return sp_error(-EINVAL, "SPILL_PREFETCH: %ld is not in 0..64", p->prefetch);
	if (p->window < 1 || p->window > 64)
		return sp_error(-EINVAL, "SPILL_WINDOW: %ld is not in 1..64", p->window);
	c.exec.lookahead = (int)p->prefetch;
	c.exec.window = (int)p->window;
	c.exec.late_binding = p->late_binding;
	c.exec.eager_writeback = p->eager_writeback;
	c.threads = (int)p->threads;
	if (p->plan_trials < 0 || p->plan_trials > 64)
		return sp_error(-EINVAL, "SPILL_PLAN_TRIALS: %ld is not in 0..64", p->plan_trials);
	c.plan_trials = (int)p->plan_trials;
	*cfg = c;
	return 0;
}

void rt_close(struct rt_ctx *rt)
{
	if (!rt)
		return;
	for (int d = 0; d < rt->ndev; d++) {
		if (rt->compute[d] && dev_stream_destroy(rt->compute[d]) < 0)
			SP_WARN(RT, "close: %s", sp_last_error());
		if (rt->comm[d] && dev_stream_destroy(rt->comm[d]) < 0)
			SP_WARN(RT, "close: %s", sp_last_error());
	}
	if (rt->cpu && dev_stream_destroy(rt->cpu) < 0)
		SP_WARN(RT, "close: %s", sp_last_error());
	rt_collectives_close(rt);
	vmm_close(rt->vmm);
	dev_close(rt->dev);
	free(rt);
}

int rt_open(const struct rt_config *cfg, struct rt_ctx **out)
{
	SP_CHECK_ARG(cfg && out, "rt_open: NULL argument");
	SP_CHECK_ARG(cfg->exec.window >= 1, "rt_open: window %d must be >= 1", cfg->exec.window);
	SP_CHECK_ARG(cfg->exec.lookahead >= 0, "rt_open: lookahead %d must be >= 0",
	             cfg->exec.lookahead);
	int rc = 0;
	struct rt_ctx *rt = calloc(1, sizeof(*rt));
	if (!rt)
		return sp_error(-ENOMEM, "rt_open: out of memory");
	rt->cfg = *cfg;
	SP_CHECK_GOTO(kn_cpu_set_threads(cfg->threads), rc, fail);
	SP_CHECK_GOTO(dev_open(&cfg->dev, &rt->dev), rc, fail);
	SP_CHECK_GOTO(vmm_open(rt->dev, &cfg->vmm, &rt->vmm), rc, fail);
	rt->ndev = cfg->vmm.ndevices ? cfg->vmm.ndevices : dev_count(rt->dev);
	rt->data = dev_backend(rt->dev) != DEV_BACKEND_MODEL;
	for (int d = 0; d < rt->ndev; d++) {
		SP_CHECK_GOTO(dev_stream_create(rt->dev, d, &rt->compute[d]), rc, fail);
		SP_CHECK_GOTO(dev_stream_create(rt->dev, d, &rt->comm[d]), rc, fail);
	}
	SP_CHECK_GOTO(dev_stream_create(rt->dev, DEV_HOST, &rt->cpu), rc, fail);
	SP_INFO(RT, "runtime: backend %s, %d device(s), %d CPU kernel thread(s)",
	        dev_backend_name(dev_backend(rt->dev)), rt->ndev, kn_cpu_threads());
	*out = rt;
	return 0;
fail:
	rt_close(rt);
	return rc;
}
