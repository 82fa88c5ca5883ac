/* runtime/plan.c — choosing a plan for a model on a context: the planner's
 * "auto" over the context's hardware, or a named schedule with the request's
 * (or default) packs, microbatch and group. */
#include "runtime/internal.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

int rt_sched_parse(const char *name, enum tg_sched *out)
{
	for (int s = 0; s < TG_NSCHED; s++)
		if (name && strcasecmp(name, tg_sched_name((enum tg_sched)s)) == 0) {
			*out = (enum tg_sched)s;
			return 0;
		}
	return sp_error(-EINVAL,
	                "unknown schedule '%s' (one of: auto, dp-swap, gpipe, 1f1b, harmony-dp, "
	                "harmony-pp)",
	                name ? name : "");
}

void rt_plan_hw(const struct rt_ctx *rt, int ndev, struct tg_hw *hw)
{
	struct dev_info in;
	memset(hw, 0, sizeof(*hw));
	if (dev_info(rt->dev, 0, &in) < 0)
		memset(&in, 0, sizeof(in));
	uint64_t used = 0, cap = 0;
	if (vmm_place_usage(rt->vmm, 0, &used, &cap) < 0)
		cap = in.capacity;
	hw->ndev = ndev;
	hw->capacity = cap;
	hw->flops = in.flops;
	hw->mem_bw = in.mem_bw;
	hw->h2d_bw = dev_link_bw(rt->dev, DEV_HOST, 0);
	hw->d2h_bw = dev_link_bw(rt->dev, 0, DEV_HOST);
	hw->host_link_bw = dev_host_link_bw(rt->dev);
	hw->p2p_bw = ndev > 1 ? dev_link_bw(rt->dev, 0, 1) : 0;
	hw->disk_bw = dev_link_bw(rt->dev, DEV_DISK, DEV_HOST);
}

void rt_plan_describe(const struct tg_plan *p, char *buf, size_t n)
{
	int k = snprintf(buf, n, "%s, %d pack%s, microbatch %d", tg_sched_name(p->sched), p->npacks,
	                 p->npacks == 1 ? "" : "s", p->microbatch);
	if (k < (int)n && (p->sched == TG_HARMONY_DP || p->sched == TG_HARMONY_PP))
		k += snprintf(buf + k, n - (size_t)k, ", group %d", p->group);
	if (k < (int)n)
		k += snprintf(buf + k, n - (size_t)k, ", %d device%s%s", p->ndev,
		              p->ndev == 1 ? "" : "s", p->upd_cpu ? ", update on the CPU" : "");
}

int rt_plan_choose(const struct rt_ctx *rt, const struct rt_model *m,
                   const struct rt_plan_request *req, struct tg_plan *out)
{
	SP_CHECK_ARG(rt && m && req && out, "rt_plan_choose: NULL argument");
	int ndev = req->devices ? req->devices : rt->ndev;
	SP_CHECK_ARG(ndev >= 1 && ndev <= rt->ndev, "plan: %d devices, the context has %d", ndev,
	             rt->ndev);
	struct tg_layer *tl = calloc((size_t)m->nlayers, sizeof(*tl));
	if (!tl)
		return sp_error(-ENOMEM, "plan: out of memory");
	struct tg_model tm;
	rt_model_tg(m, tl, &tm);
	struct tg_hw hw;
	rt_plan_hw(rt, ndev, &hw);
	int rc = 0;
	const char *name = req->schedule ? req->schedule : "auto";
	struct tg_plan p = {.ndev = ndev};
	if (strcasecmp(name, "auto") == 0) {
		struct tg_time t;
		rc = tg_plan_auto(&tm, &hw, &p, &t);
		if (rc == 0)
			p.recompute = 0; /* the executor does not recompute yet */
		goto out;
	}
	SP_CHECK_GOTO(rt_sched_parse(name, &p.sched), rc, out);
	int dp = p.sched == TG_DP_SWAP || p.sched == TG_HARMONY_DP;
	int per = dp ? ndev : 1;
	p.microbatch = req->microbatch;
	if (!p.microbatch)
		for (int mb = 8; mb >= 1 && !p.microbatch; mb /= 2)
			if (m->batch % (mb * per) == 0)
				p.microbatch = mb;
	if (!p.microbatch || m->batch % (p.microbatch * per)) {
		rc = sp_error(
		    -EINVAL, "plan: batch %d is not a multiple of microbatch %d%s (%d device%s)",
		    m->batch, p.microbatch, dp ? " x devices" : "", per, per > 1 ? "s" : "");
		goto out;
	}
	p.group = req->group ? req->group : 1;
	p.upd_cpu = req->upd_cpu;
	p.recompute = req->recompute;
	if (req->packs)
		rc = tg_pack_dp(&tm, p.microbatch, (uint64_t)-1 / 4, req->packs, &p);
	else
		rc = tg_pack_greedy(&tm, p.microbatch, hw.capacity / 2, 0.15, &p);
	if (rc < 0)
		goto out;
	p.ndev = ndev;
out:
	free(tl);
	if (rc == 0)
		*out = p;
	return rc;
}
