/* runtime/plan.c — choosing a plan for a model on a context: the planner's
 * "auto" over the context's hardware (its finalists run in the executor on a
 * model-backend copy of the context), or a named schedule with the request's
 * (or default) packs, microbatch and group. */
#include "runtime/internal.h"

#include "common/log.h"

#include <math.h>
#include <stdio.h>
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
	                "harmony-pp, interleaved, 2bw)",
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
	hw->disk_bw = dev_link_bw(rt->dev, DEV_DISK, DEV_HOST) * dev_disk_count(rt->dev);
	/* what the devices, the host pool and the disk store together */
	uint64_t hu = 0, hc = 0, du = 0, dc = 0;
	if (vmm_place_usage(rt->vmm, VMM_HOST, &hu, &hc) < 0)
		hc = 0;
	if (vmm_place_usage(rt->vmm, VMM_DISK, &du, &dc) < 0)
		dc = 0;
	hw->store = hc ? (uint64_t)ndev * cap + hc + dc : 0;
	if (dc) { /* the host pool is a tier of its own only above a disk */
		hw->host_capacity = hc;
		hw->host_align = rt->cfg.vmm.align ? rt->cfg.vmm.align : 256;
	}
	hw->size_class_bits = rt->cfg.vmm.size_class_bits;
	hw->size_class_min = 64 * (rt->cfg.vmm.align ? rt->cfg.vmm.align : 256);
	hw->dev_align = rt->cfg.vmm.align ? rt->cfg.vmm.align : 256;
}

void rt_plan_hw_for(const struct rt_ctx *rt, const struct rt_model *m, struct tg_hw *hw)
{
	struct dev_info in;
	int bf16 = 0;
	for (int l = 0; l < m->nlayers; l++)
		bf16 |= rt_layer_dtype(&m->layers[l]) == KN_BF16;
	if (bf16 && dev_info(rt->dev, 0, &in) == 0 && in.bf16_flops > 0 && in.flops > 0)
		hw->flops *= in.bf16_flops / in.flops;
}

void rt_plan_describe(const struct tg_plan *p, char *buf, size_t n)
{
	char shards[32] = "";
	int ns = tg_plan_shards(p);
	if (ns != p->npacks)
		snprintf(shards, sizeof(shards), " in %d shard%s", ns, ns == 1 ? "" : "s");
	int k = snprintf(buf, n, "%s, %d pack%s%s, microbatch %d", tg_sched_name(p->sched),
	                 p->npacks, p->npacks == 1 ? "" : "s", shards, p->microbatch);
	if (k < (int)n && (p->sched == TG_HARMONY_DP || p->sched == TG_HARMONY_PP))
		k += snprintf(buf + k, n - (size_t)k, ", group %d", p->group);
	if (k < (int)n && p->sched == TG_2BW)
		k += snprintf(buf + k, n - (size_t)k, ", flush every %d step%s",
		              p->flush_every > 1 ? p->flush_every : 1,
		              p->flush_every > 1 ? "s" : "");
	int kept = 0;
	for (int pk = 0; pk < p->npacks && p->recompute; pk++)
		kept += p->keep_stash[pk] != 0;
	char rc[48] = "";
	if (p->recompute && kept)
		snprintf(rc, sizeof(rc), ", recompute but %d pack%s", kept, kept == 1 ? "" : "s");
	else if (p->recompute)
		snprintf(rc, sizeof(rc), ", recompute");
	if (k < (int)n)
		k += snprintf(buf + k, n - (size_t)k, ", %d device%s%s%s", p->ndev,
		              p->ndev == 1 ? "" : "s", rc, p->upd_cpu ? ", update on the CPU" : "");
	if (k < (int)n && p->tp > 1)
		k += snprintf(buf + k, n - (size_t)k, " (%d stage%s x tensor parallel %d)",
		              p->ndev / p->tp, p->ndev / p->tp == 1 ? "" : "s", p->tp);
}

/* The smallest device budget (within 2%) greedy packing fits m into at
 * microbatch mb, searched upwards from lo. */
static uint64_t min_pack_budget(const struct tg_model *m, int mb, uint64_t lo)
{
	uint64_t hi = 1ull << 50;
	while (hi - lo > (lo >> 6) + 1) {
		uint64_t mid = lo + (hi - lo) / 2;
		struct tg_plan q = {0};
		if (tg_pack_greedy(m, mb, mid, 0.15, &q) == 0)
			hi = mid;
		else
			lo = mid;
	}
	sp_error_clear();
	return hi;
}

static int simulates(const struct rt_model *m)
{
	for (int i = 0; i < m->nlayers; i++)
		if (!m->layers[i].ops || !m->layers[i].ops->simulates)
			return 0;
	return 1;
}

/* A model-backend context that simulates rt's first ndev devices: the same
 * profile figures (measured ones on cuda), vmm budgets and executor settings,
 * no trace or stats. */
int rt_profile_text(const char *name, char *buf, size_t n)
{
	SP_CHECK_ARG(name && buf, "rt_profile_text: NULL argument");
	struct dev_config c = {.backend = DEV_BACKEND_MODEL, .profile = name};
	struct dev_ctx *d;
	SP_CHECK(dev_open(&c, &d));
	int rc = dev_profile_text(d, buf, n);
	dev_close(d);
	return rc;
}

static int open_twin(const struct rt_ctx *rt, int ndev, const char *profile, struct rt_ctx **out)
{
	char text[2048];
	if (profile)
		snprintf(text, sizeof(text), "%s", profile);
	else
		SP_CHECK(dev_profile_text(rt->dev, text, sizeof(text)));
	struct rt_config c = rt->cfg;
	struct tg_hw hw;
	rt_plan_hw(rt, ndev, &hw);
	struct dev_info in;
	SP_CHECK(dev_info(rt->dev, 0, &in));
	memset(&c.dev, 0, sizeof(c.dev));
	c.dev.backend = DEV_BACKEND_MODEL;
	c.dev.profile_text = text;
	c.dev.ndevices = ndev;
	c.dev.device_mem = in.capacity;
	c.vmm.ndevices = ndev;
	c.vmm.device_mem = hw.capacity;
	c.vmm.trace_cap = 0;
	c.vmm.trace_file = NULL;
	c.vmm.stats_at_close = 0;
	/* the disk tier stays, simulated (the model backend's drives: nothing is
	 * written), so the trials see what spilling past the host pool costs: a
	 * host as large as the state chose plans whose disk traffic made them
	 * the slowest (GPT-2 10B on one H100 with 100 GB of host: 43.8 s/step
	 * against 27.2) */
	c.vmm.disk.fault = NULL;
	c.threads = 0;
	return rt_open(&c, out);
}

/* One plan's steady-state iteration on a fresh twin: the second of two. */
static int simulate(const struct rt_ctx *rt, const struct rt_model *m, const struct tg_plan *p,
                    const char *profile, double *iter_s)
{
	struct rt_ctx *tw = NULL;
	struct rt_run *run = NULL;
	int rc = open_twin(rt, p->ndev, profile, &tw);
	if (rc == 0)
		rc = rt_run_open(tw, m, p, 1, &run);
	if (rc == 0)
		rc = rt_run_step(run, NULL);
	double t0 = rc == 0 ? dev_now(tw->dev) : 0;
	if (rc == 0)
		rc = rt_run_step(run, NULL);
	if (rc == 0)
		*iter_s = dev_now(tw->dev) - t0;
	rt_run_close(run);
	rt_close(tw);
	return rc;
}

int rt_plan_simulate(const struct rt_ctx *rt, const struct rt_model *m, const struct tg_plan *plan,
                     const char *profile, double *iter_s)
{
	SP_CHECK_ARG(rt && m && plan && iter_s, "rt_plan_simulate: NULL argument");
	SP_CHECK_ARG(simulates(m), "rt_plan_simulate: model %s has layers that do not simulate",
	             m->name);
	return simulate(rt, m, plan, profile, iter_s);
}

/* auto: the analytic search's finalists, ranked by simulation when the layers
 * simulate (the prediction misses prefetch, the executor's binding and
 * fragmentation; DESIGN §6). */
static int choose_auto(const struct rt_ctx *rt, struct rt_model *m, const struct tg_hw *hw,
                       const char *profile, struct tg_plan *out)
{
	int trials = simulates(m) ? rt->cfg.plan_trials : 0;
	if (trials > 0) { /* layer times from a pilot run on the twin */
		struct rt_ctx *tw;
		SP_CHECK(open_twin(rt, hw->ndev, profile, &tw));
		int rc = rt_model_profile(tw, m, 1);
		rt_close(tw);
		SP_CHECK(rc);
	}
	struct tg_layer *tl = calloc((size_t)m->nlayers, sizeof(*tl));
	int max = trials > 1 ? trials : 1;
	struct tg_plan *cand = calloc((size_t)max, sizeof(*cand));
	struct tg_time *times = calloc((size_t)max, sizeof(*times));
	int rc = 0, n = 0;
	if (!tl || !cand || !times) {
		rc = sp_error(-ENOMEM, "plan: out of memory");
		goto out;
	}
	struct tg_model tm;
	rt_model_tg_timed(m, hw->flops, tl, &tm);
	/* at most half the finalists of one schedule, so that the simulation
	 * also sees the runner-up schedules the prediction may misjudge */
	rc = tg_plan_candidates(&tm, hw, max, max > 1 ? (max + 1) / 2 : 1, cand, times, &n);
	if (rc == -ENOMEM) {
		char b[32], need[32];
		rc = sp_error(
		    -ENOMEM,
		    "plan: no plan fits %d devices of %s (budget per device); the smallest "
		    "device budget any plan fits is about %s (one layer per pack, "
		    "microbatch 1; SPILL_VMM_DEVICE_MEM)",
		    hw->ndev, sp_format_size(hw->capacity, b, sizeof(b)),
		    sp_format_size(min_pack_budget(&tm, 1, hw->capacity), need, sizeof(need)));
	}
	if (rc < 0)
		goto out;
	int best = 0;
	double best_s = INFINITY;
	for (int i = 0; trials > 0 && i < n; i++) {
		char desc[160];
		rt_plan_describe(&cand[i], desc, sizeof(desc));
		double s = INFINITY;
		if (simulate(rt, m, &cand[i], profile, &s) < 0) {
			SP_INFO(RT, "auto: %s does not run: %s", desc, sp_last_error());
			continue;
		}
		SP_INFO(RT, "auto: %s: predicted %.4f s, simulated %.4f s", desc, times[i].iter_s,
		        s);
		if (s < best_s) {
			best_s = s;
			best = i;
		}
	}
	if (trials > 0 && isinf(best_s)) {
		char b[32];
		rc = sp_error(-ENOMEM,
		              "plan: none of auto's %d best plans runs in %s on each of %d devices "
		              "(the last: %s)",
		              n, sp_format_size(hw->capacity, b, sizeof(b)), hw->ndev,
		              sp_last_error());
		goto out;
	}
	sp_error_clear();
	*out = cand[best];
out:
	free(tl);
	free(cand);
	free(times);
	return rc;
}

/* Greedy packing estimates a pack's working set from its layers; the graph's
 * tasks may hold more (2bw's update: both weight versions; the update of a
 * tied pack: the other pack's gradient too). Packs until the largest task fits
 * the budget, smaller each time; -ENOMEM naming that task and its size when
 * one layer a pack does not fit. (2bw, 2 layers of GPT-2 C 64 at 1792 KiB:
 * the plan was taken, and its first step failed at the update of pack 0,
 * which needs 1.88 MiB.) */
static uint64_t device_need(const struct vmm *v, const struct tg_graph *g, int *worst)
{
	uint64_t most = 0;
	*worst = -1;
	for (int i = 0; i < g->ntask; i++) {
		const struct tg_task *t = &g->task[i];
		uint64_t need = 0;
		int n = t->nread + t->nwrite; /* write follows read */
		for (int k = 0; k < n && t->dev >= 0; k++) {
			int o = t->read[k], seen = 0;
			for (int j = 0; j < k && !seen; j++)
				seen = t->read[j] == o;
			if (!seen && g->obj[o].bytes)
				need += vmm_device_footprint(v, g->obj[o].bytes);
		}
		if (need > most) {
			most = need;
			*worst = i;
		}
	}
	return most;
}

static int fit_packs(const struct rt_ctx *rt, const struct tg_model *tm, const struct tg_hw *hw,
                     struct tg_plan *p, const char *name)
{
	uint64_t cap = hw->capacity / 2;
	for (;;) {
		struct tg_graph g;
		struct tg_plan two = *p; /* 2bw: two steps have every task's largest set */
		if (two.flush_every > 2)
			two.flush_every = 2;
		SP_CHECK(tg_graph_build(tm, 1, &two, &g));
		int task;
		uint64_t need = device_need(rt->vmm, &g, &task);
		char what[64] = "";
		if (task >= 0)
			snprintf(what, sizeof(what), "the %s of pack %d",
			         tg_kind_name(g.task[task].kind), g.task[task].pack);
		tg_graph_free(&g);
		if (need <= hw->capacity)
			return 0;
		struct tg_plan q = *p;
		cap = cap / 4 * 3;
		int single = p->npacks == tm->nlayers;
		if (single || tg_pack_greedy(tm, p->microbatch, cap, 0.15, &q) < 0) {
			char b[32], n[32];
			return sp_error(-ENOMEM,
			                "plan: %s, microbatch %d: %s needs %s on a device, more "
			                "than the device budget of %s, and smaller packs do not "
			                "help (SPILL_VMM_DEVICE_MEM, or a smaller microbatch)",
			                name, p->microbatch, what,
			                sp_format_size(need, n, sizeof(n)),
			                sp_format_size(hw->capacity, b, sizeof(b)));
		}
		if (q.npacks == p->npacks &&
		    !memcmp(q.pack_end, p->pack_end, (size_t)q.npacks * sizeof(int)))
			continue; /* the same cut: smaller still */
		p->npacks = q.npacks;
		memcpy(p->pack_end, q.pack_end, sizeof(p->pack_end));
	}
}

/* One step's predicted time of plan p (tg_sim_time), or INFINITY. */
static double predicted_step(const struct tg_model *tm, const struct tg_hw *hw,
                             const struct tg_plan *p)
{
	struct tg_graph g;
	struct tg_swap sw;
	struct tg_time t;
	if (tg_graph_build(tm, 1, p, &g) < 0)
		return INFINITY;
	tg_graph_set_hw(&g, hw);
	int ok = tg_sim_time(&g, p, hw, 0, &sw, &t) == 0;
	tg_graph_free(&g);
	return ok ? t.iter_s : INFINITY;
}

/* 2bw without a --flush-every: no flush in 8 steps where the prediction has it
 * faster, else a flush every step. Steps that overlap read both weight
 * versions at once: where the devices swap (GPT-2 10B on 4 GTX 1080 Ti) that
 * moved 1483 GB a step against 803 and took 107.7 s against 74.9 with the
 * flush (make bench-schedules). */
static int flush_choice(const struct tg_model *tm, const struct tg_hw *hw, const struct tg_plan *p)
{
	struct tg_plan a = *p, b = *p;
	a.flush_every = TG_2BW_FLUSH_EVERY;
	b.flush_every = 1;
	double ta = predicted_step(tm, hw, &a), tb = predicted_step(tm, hw, &b);
	sp_error_clear();
	return ta < tb ? TG_2BW_FLUSH_EVERY : 1; /* neither predicted: the flush */
}

int rt_plan_choose(const struct rt_ctx *rt, struct rt_model *m, const struct rt_plan_request *req,
                   struct tg_plan *out)
{
	SP_CHECK_ARG(rt && m && req && out, "rt_plan_choose: NULL argument");
	int ndev = req->devices ? req->devices : rt->ndev;
	SP_CHECK_ARG(ndev >= 1 && ndev <= rt->ndev, "plan: %d devices, the context has %d", ndev,
	             rt->ndev);
	if (req->tp > 1) { /* the members' plan on the stages, widened */
		SP_CHECK_ARG(ndev % req->tp == 0,
		             "plan: tensor parallel %d does not divide the %d devices", req->tp,
		             ndev);
		SP_CHECK_ARG(req->schedule && strcasecmp(req->schedule, "auto"),
		             "plan: tensor parallel %d needs a named pipeline schedule", req->tp);
		enum tg_sched s;
		SP_CHECK(rt_sched_parse(req->schedule, &s));
		SP_CHECK_ARG(s != TG_DP_SWAP && s != TG_HARMONY_DP,
		             "plan: tensor parallel %d with %s: a pipeline schedule takes it (the "
		             "data-parallel ones bind tasks late)",
		             req->tp, tg_sched_name(s));
		if (req->recompute || m->opt.grad_clip > 0)
			return sp_error(
			    -ENOTSUP, "plan: tensor parallel %d: %s is not built with it", req->tp,
			    req->recompute ? "recomputation" : "gradient clipping");
		struct rt_model mm;
		SP_CHECK(rt_model_gpt_members(m, req->tp, &mm));
		struct rt_plan_request q = *req;
		q.tp = 0;
		q.devices = ndev / req->tp;
		int rc = rt_plan_choose(rt, &mm, &q, out);
		free(mm.layers);
		if (rc == 0) {
			out->ndev = ndev;
			out->tp = req->tp;
		}
		return rc;
	}
	struct tg_layer *tl = calloc((size_t)m->nlayers, sizeof(*tl));
	if (!tl)
		return sp_error(-ENOMEM, "plan: out of memory");
	struct tg_model tm;
	struct tg_hw hw;
	rt_plan_hw(rt, ndev, &hw);
	if (req->twin_profile) { /* the devices the caller says, at this context's budget */
		struct rt_ctx *tw;
		int e = open_twin(rt, ndev, req->twin_profile, &tw);
		if (e < 0) {
			free(tl);
			return e;
		}
		rt_plan_hw(tw, ndev, &hw);
		rt_close(tw);
	}
	rt_plan_hw_for(rt, m, &hw);
	rt_model_tg_timed(m, hw.flops, tl, &tm); /* measured times, where known */
	int rc = 0;
	const char *name = req->schedule ? req->schedule : "auto";
	struct tg_plan p = {.ndev = ndev};
	if (strcasecmp(name, "auto") == 0) {
		rc = choose_auto(rt, m, &hw, req->twin_profile, &p);
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
	if (p.sched == TG_2BW) /* no flush between steps, but every few */
		p.flush_every = req->flush_every ? req->flush_every : TG_2BW_FLUSH_EVERY;
	p.upd_cpu = req->upd_cpu;
	p.recompute = req->recompute;
	if (req->packs) {
		rc = tg_pack_dp(&tm, p.microbatch, (uint64_t)-1 / 4, req->packs, &p);
	} else {
		/* packs of half the budget leave room for the next pack's prefetch;
		 * where a layer is too big for that, as large as the budget */
		rc = tg_pack_greedy(&tm, p.microbatch, hw.capacity / 2, 0.15, &p);
		if (rc == -ENOMEM)
			rc = tg_pack_greedy(&tm, p.microbatch, hw.capacity, 0.15, &p);
		if (rc == -ENOMEM) {
			char msg[SP_ERROR_MSG_MAX], b[32], need[32];
			snprintf(msg, sizeof(msg), "%s", sp_last_error());
			uint64_t hi = min_pack_budget(&tm, p.microbatch, hw.capacity);
			rc = sp_error(
			    -ENOMEM,
			    "plan: %s, microbatch %d does not fit a device budget of %s on "
			    "device 0 (%s); the smallest device budget it packs into is "
			    "about %s (SPILL_VMM_DEVICE_MEM, or a smaller microbatch)",
			    name, p.microbatch, sp_format_size(hw.capacity, b, sizeof(b)), msg,
			    sp_format_size(hi, need, sizeof(need)));
		}
	}
	if (rc < 0)
		goto out;
	p.ndev = ndev;
	if (!req->packs && (rc = fit_packs(rt, &tm, &hw, &p, name)) < 0)
		goto out;
	if (p.sched == TG_2BW && !req->flush_every)
		p.flush_every = flush_choice(&tm, &hw, &p);
out:
	free(tl);
	if (rc == 0)
		*out = p;
	return rc;
}
