/* taskgraph/plan.c — partitioners (Hydra greedy packing, PipeDream-style DP) and
 * the `auto` planner.
 *
 * A pack's footprint for one microbatch is the sum over its layers of weights +
 * gradients + optimizer state + stash, output and workspace bytes for the
 * microbatch (an estimate: the graph's workspace is the largest layer's plus the
 * backward's gradient buffers, not the sum; tg_graph_min_capacity is exact). Greedy packing
 * adds layers while footprint·(1+reserve) fits the capacity; the DP minimises the
 * largest per-pack time (FLOPs) over contiguous splits into a given pack count,
 * with each pack fitting. The planner ranks plans by tg_time_predict(). */
#include <errno.h>
#include <float.h>
#include <stdlib.h>
#include <string.h>

#include "taskgraph/taskgraph.h"

#include "common/params.h"

/* A layer tied to an earlier one also holds that layer's weights and gradient
 * while it runs; they count even when both layers end up in one pack (an
 * overestimate by W+G of the tied layer, on the safe side). */
static uint64_t layer_foot(const struct tg_model *m, int l, int mb)
{
	const struct tg_layer *L = &m->layers[l];
	uint64_t f =
	    L->param_bytes + L->grad_bytes + L->opt_bytes +
	    (L->stash_bytes_per_sample + L->out_bytes_per_sample + L->work_bytes_per_sample) *
	        (uint64_t)mb +
	    L->work_bytes;
	if (L->tied && L->tied_layer >= 0 && L->tied_layer < l)
		f += m->layers[L->tied_layer].param_bytes + m->layers[L->tied_layer].grad_bytes;
	return f;
}

int tg_plan_shards(const struct tg_plan *p)
{
	int heads = 0;
	for (int pk = 0; pk < p->npacks && pk < TG_MAX_PACKS; pk++)
		heads += p->shard_head[pk] != 0;
	return heads ? heads + !p->shard_head[0] : p->npacks;
}

int tg_pack_greedy(const struct tg_model *m, int microbatch, uint64_t capacity, double reserve,
                   struct tg_plan *plan)
{
	SP_CHECK_ARG(m && plan, "taskgraph: null model or plan");
	SP_CHECK_ARG(m->nlayers > 0, "taskgraph: model %d has zero layers", m->id);
	SP_CHECK_ARG(microbatch > 0, "taskgraph: microbatch = %d, need > 0", microbatch);
	SP_CHECK_ARG(reserve >= 0 && reserve < 1, "taskgraph: reserve %.2f outside [0, 1)",
	             reserve);
	double lim = (double)capacity / (1.0 + reserve);
	int np = 0;
	double cur = 0;
	for (int l = 0; l < m->nlayers; l++) {
		double f = (double)layer_foot(m, l, microbatch);
		if (f > lim) {
			char a[32], b[32], d[32];
			return sp_error(-ENOMEM,
			                "taskgraph: layer %d (%s) needs %s with microbatch %d, "
			                "%.0f%% reserve leaves %s (short by %s)",
			                l, m->layers[l].name ? m->layers[l].name : "?",
			                sp_format_size((uint64_t)f, a, sizeof(a)), microbatch,
			                reserve * 100, sp_format_size((uint64_t)lim, b, sizeof(b)),
			                sp_format_size((uint64_t)(f - lim), d, sizeof(d)));
		}
		if (cur + f > lim) {
			if (np >= TG_MAX_PACKS)
				return sp_error(-EINVAL, "taskgraph: more than %d packs",
				                TG_MAX_PACKS);
			plan->pack_end[np++] = l;
			cur = 0;
		}
		cur += f;
	}
	plan->pack_end[np++] = m->nlayers;
	plan->npacks = np;
	plan->microbatch = microbatch;
	return 0;
}

int tg_pack_dp(const struct tg_model *m, int microbatch, uint64_t capacity, int npacks,
               struct tg_plan *plan)
{
	SP_CHECK_ARG(m && plan, "taskgraph: null model or plan");
	int n = m->nlayers, rc = 0;
	SP_CHECK_ARG(n > 0, "taskgraph: model %d has zero layers", m->id);
	SP_CHECK_ARG(npacks > 0 && npacks <= n && npacks <= TG_MAX_PACKS,
	             "taskgraph: npacks %d outside 1..%d (layers)", npacks, n);
	for (int l = 0; l < n; l++)
		if (layer_foot(m, l, microbatch) > capacity) {
			char a[32], b[32], d[32];
			uint64_t f = layer_foot(m, l, microbatch);
			return sp_error(
			    -ENOMEM, "taskgraph: layer %d needs %s, capacity %s (short by %s)", l,
			    sp_format_size(f, a, sizeof(a)), sp_format_size(capacity, b, sizeof(b)),
			    sp_format_size(f - capacity, d, sizeof(d)));
		}
	double *pf = calloc((size_t)n + 1, sizeof(double)),
	       *pb = calloc((size_t)n + 1, sizeof(double));
	double *best = malloc((size_t)(npacks + 1) * (n + 1) * sizeof(double));
	int *arg = malloc((size_t)(npacks + 1) * (n + 1) * sizeof(int));
	if (!pf || !pb || !best || !arg) {
		rc = sp_error(-ENOMEM, "taskgraph: DP tables %d x %d", npacks, n);
		goto out;
	}
	for (int l = 0; l < n; l++) {
		const struct tg_layer *L = &m->layers[l];
		pf[l + 1] = pf[l] + L->fwd_flops_per_sample + L->bwd_flops_per_sample;
		pb[l + 1] = pb[l] + (double)layer_foot(m, l, microbatch);
	}
#define AT(k, i) ((size_t)(k) * (n + 1) + (i))
	for (int k = 0; k <= npacks; k++)
		for (int i = 0; i <= n; i++)
			best[AT(k, i)] = DBL_MAX;
	best[AT(0, 0)] = 0;
	for (int k = 1; k <= npacks; k++)
		for (int i = k; i <= n; i++)
			for (int j = k - 1; j < i; j++) {
				if (best[AT(k - 1, j)] == DBL_MAX ||
				    pb[i] - pb[j] > (double)capacity)
					continue;
				double c = pf[i] - pf[j];
				if (best[AT(k - 1, j)] > c)
					c = best[AT(k - 1, j)];
				if (c < best[AT(k, i)]) {
					best[AT(k, i)] = c;
					arg[AT(k, i)] = j;
				}
			}
	if (best[AT(npacks, n)] == DBL_MAX) {
		rc = sp_error(-ENOMEM,
		              "taskgraph: %d packs cannot hold %d layers in %llu bytes each",
		              npacks, n, (unsigned long long)capacity);
		goto out;
	}
	for (int k = npacks, i = n; k > 0; k--) {
		plan->pack_end[k - 1] = i;
		i = arg[AT(k, i)];
	}
#undef AT
	plan->npacks = npacks;
	plan->microbatch = microbatch;
out:
	free(pf);
	free(pb);
	free(best);
	free(arg);
	return rc;
}

/* Keeps the best `max` plans in out[] (sorted by predicted time), at most
 * per_sched of each schedule. */
static void keep(struct tg_plan *out, struct tg_time *times, int max, int per_sched, int *n,
                 const struct tg_plan *p, const struct tg_time *t)
{
	int same = 0, worst_same = -1;
	for (int i = 0; i < *n; i++)
		if (out[i].sched == p->sched) {
			same++;
			worst_same = i;
		}
	if (same >= per_sched) { /* replace this schedule's worst if better */
		if (t->iter_s >= times[worst_same].iter_s)
			return;
		for (int i = worst_same; i + 1 < *n; i++) {
			out[i] = out[i + 1];
			times[i] = times[i + 1];
		}
		(*n)--;
	}
	int at = *n;
	while (at > 0 && times[at - 1].iter_s > t->iter_s)
		at--;
	if (at >= max)
		return;
	int last = *n < max ? *n : max - 1;
	for (int i = last; i > at; i--) {
		out[i] = out[i - 1];
		times[i] = times[i - 1];
	}
	out[at] = *p;
	times[at] = *t;
	if (*n < max)
		(*n)++;
}

/* The finalists: the two rankings' best in turn, the sum's first (so the
 * analytic choice, max = 1, is the sum's), each plan once. Neither predictor
 * ranks well alone: on GPT-2 10B with one H100, 64 GB of host and a disk the
 * sum's finalists ran 32.3 s/step at best and the overlap's 30.9; with 100 GB
 * 24.9 against 25.2; BERT-Large on 4 GTX 1080 Ti 1.056 against 1.083. The
 * trials (the runtime's auto) then pick by simulation. */
static void merge(struct tg_plan *out, struct tg_time *times, int max, int *n,
                  const struct tg_plan *alt, const struct tg_time *alt_t, int nalt)
{
	struct tg_plan *m = malloc((size_t)max * sizeof(*m));
	struct tg_time *mt = malloc((size_t)max * sizeof(*mt));
	if (!m || !mt) { /* the sum's ranking alone */
		free(m);
		free(mt);
		return;
	}
	int k = 0;
	for (int i = 0; k < max && (i < *n || i < nalt); i++)
		for (int w = 0; w < 2 && k < max; w++) {
			const struct tg_plan *p =
			    w ? (i < nalt ? &alt[i] : NULL) : (i < *n ? &out[i] : NULL);
			int dup = !p;
			for (int j = 0; j < k && !dup; j++)
				dup = !memcmp(&m[j], p, sizeof(*p));
			if (dup)
				continue;
			m[k] = *p;
			mt[k++] = w ? alt_t[i] : times[i];
		}
	memcpy(out, m, (size_t)k * sizeof(*m));
	memcpy(times, mt, (size_t)k * sizeof(*mt));
	*n = k;
	free(m);
	free(mt);
}

int tg_plan_candidates(const struct tg_model *m, const struct tg_hw *hw, int max, int per_sched,
                       struct tg_plan *out, struct tg_time *times, int *n)
{
	SP_CHECK_ARG(m && hw && out && times && n && max >= 1 && per_sched >= 1,
	             "taskgraph: bad arguments to tg_plan_candidates");
	SP_CHECK_ARG(hw->ndev > 0, "taskgraph: devices = %d, need at least 1", hw->ndev);
	SP_CHECK_ARG(m->nlayers > 0, "taskgraph: model %d has zero layers", m->id);
	static const int mbs[] = {1, 2, 4, 8};
	/* not TG_2BW: its delayed update trains other numbers (a user asks for it;
	 * rt_plan_choose then picks its flush) */
	static const int scheds[] = {TG_DP_SWAP,    TG_GPIPE,      TG_1F1B,
	                             TG_HARMONY_DP, TG_HARMONY_PP, TG_INTERLEAVED};
	*n = 0;
	int over = 0; /* candidates that fit the devices but not the whole store */
	/* the same search ranked by tg_sim_time's overlap, whose best join the
	 * finalists (below) */
	struct tg_plan *alt = malloc((size_t)max * sizeof(*alt));
	struct tg_time *alt_t = malloc((size_t)max * sizeof(*alt_t));
	int nalt = 0;
	if (!alt || !alt_t) {
		free(alt);
		free(alt_t);
		return sp_error(-ENOMEM, "taskgraph: %d finalists", max);
	}
	for (size_t a = 0; a < SP_ARRAY_SIZE(mbs); a++)
		for (int div = 1; div <= 4; div *= 2) { /* packs of the budget, half, a quarter */
			struct tg_plan base = {.ndev = hw->ndev};
			if (tg_pack_greedy(m, mbs[a], hw->capacity / (uint64_t)div, 0.15, &base) !=
			    0)
				continue;
			for (size_t s = 0; s < SP_ARRAY_SIZE(scheds); s++)
				for (int grp = 1; grp <= 64; grp *= 2)
					for (int v = 0; v < 4; v++) {
						int harmony = scheds[s] == TG_HARMONY_DP ||
						              scheds[s] == TG_HARMONY_PP;
						if (grp > 1 && !harmony)
							continue; /* the group only matters there */
						struct tg_plan p = base;
						p.sched = scheds[s];
						p.group = grp;
						p.upd_cpu = v & 1;
						p.recompute = v >> 1;
						struct tg_graph g;
						if (tg_graph_build(m, 1, &p, &g) != 0)
							continue;
						tg_graph_set_hw(&g, hw);
						struct tg_swap sw;
						struct tg_time t, ts;
						/* spill's executor: dead contents discarded,
						 * clean copies dropped, whatever the schedule */
						/* all it stores fits the devices, host and disk
						 * (10% for the pools' gaps) */
						int ok = !hw->store || tg_graph_state_bytes(&g) <=
						                           hw->store / 10 * 9;
						if (!ok)
							over++;
						/* the sum of compute and transfers, and
						 * tg_sim_time's overlap (the same replay) */
						ok = ok &&
						     tg_sim_time(&g, &p, hw, 0, &sw, &ts) == 0 &&
						     tg_time_predict(&g, &p, hw, &sw, &t) == 0;
						tg_graph_free(&g);
						if (ok) {
							keep(out, times, max, per_sched, n, &p, &t);
							keep(alt, alt_t, max, per_sched, &nalt, &p,
							     &ts);
						}
					}
		}
	merge(out, times, max, n, alt, alt_t, nalt);
	free(alt);
	free(alt_t);
	if (!*n && over)
		return sp_error(-ENOMEM,
		                "taskgraph: no plan's state fits the devices, host memory and disk "
		                "(%llu bytes together) for model %d",
		                (unsigned long long)hw->store, m->id);
	if (!*n)
		return sp_error(-ENOMEM,
		                "taskgraph: no plan fits %d devices of %llu bytes for model %d",
		                hw->ndev, (unsigned long long)hw->capacity, m->id);
	sp_error_clear();
	return 0;
}

int tg_plan_auto(const struct tg_model *m, const struct tg_hw *hw, struct tg_plan *best,
                 struct tg_time *best_time)
{
	SP_CHECK_ARG(m && hw && best && best_time, "taskgraph: null argument to tg_plan_auto");
	int n;
	return tg_plan_candidates(m, hw, 1, 1, best, best_time, &n);
}
