/* runtime/sharp.c — many models trained at once (Hydra's SHARP) on the executor.
 *
 * Each model runs under a one-device plan of greedy shards (rt_sharp_plan),
 * each shard a run of packs of one layer, so one training step of it is a chain
 * of tasks: forward of each shard (the last one with the loss), then backward
 * of each shard with its just-in-time updates. A shard unit is the forward or
 * backward tasks of one shard's packs with the loss or update tasks among and
 * after them, issued together: each pack's task waits only for its own objects,
 * so a unit computes its first layers while the later ones load. Units of one
 * model run strictly one after another; devices take units of any model: when a
 * device is free it runs the unit its double-buffer reserved, else the policy's
 * pick among the eligible models (the model's previous unit complete). With
 * double buffering the device picks its next unit as soon as it starts one —
 * under lrtf the running model's own next unit when that model has the longest
 * remaining time (reserve_next: its shard and intermediates are largely there
 * already) — and prefetches what of that unit's shard and inputs fits its free
 * space while the current one computes; intermediates stay on the device when
 * the next unit of the model runs there and go GPU->GPU otherwise (the vmm
 * copies from a device holding a valid copy first). Lrtf's remaining time of a
 * model: its units left in this step plus its steps left, from measured unit
 * times (the first step: FLOPs at the device's rate). The same estimates give
 * the vmm its Belady hints: when each object's next unit should start, on the
 * backend's clock (hint_model). The plan recomputes a shard's forward in its
 * backward unit, as Hydra does, when moving the stash out and back would take
 * longer. Every model's tasks keep the order of training it alone, so its
 * weights are those of the reference loop, bit for bit. */
#include "runtime/internal.h"

#include "common/log.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Packs per shard at most (split_shards). */
#define SHARD_PACKS 64

struct sm { /* one model */
	struct rt_run *run;
	int steps, done_steps, stopped, finished;
	int nunits, *ufirst; /* unit u: tasks [ufirst[u], ufirst[u + 1]) */
	/* object o is used by units use[ufrom[o]] .. use[ufrom[o + 1] - 1] (rising);
	 * dead_at[k]: that use starts by overwriting it (the old contents are dead) */
	int *ufrom, *use;
	unsigned char *dead_at;
	double *est;      /* seconds per unit (measured, or estimated) */
	int cur;          /* the next unit of the current step */
	int dev;          /* device running its unit, or -1 */
	int last_dev;     /* device its previous unit ran on */
	double start;     /* dev_now at the running unit's issue */
	struct rt_xs *xs; /* the current step's executor state */
	/* recover: [2 * layer + rt_state] the state at the last step boundary, with
	 * the run's position then; ck_new is filled first and swapped in whole */
	void **ck, **ck_new;
	int ck_iter, ck_step, ck_done, ck_final; /* ck_final: taken when it finished */
};

struct sharp {
	struct rt_ctx *rt;
	const struct rt_sharp_config *cfg;
	struct sm *m;
	int n, alive;
	struct tg_sharp *pol;
	int busy[DEV_MAX];     /* model running on the device, or -1 */
	int reserved[DEV_MAX]; /* double buffering: the model it runs next, or -1 */
	int dead[DEV_MAX];     /* failed devices already recovered from */
	double rate[DEV_MAX];  /* FLOP/s of each device (its speed included) */
	struct rt_sharp_stats *st;
};

/* Between a model's forward and backward units its device runs other models'
 * units, so what a forward stashes goes to the host and comes back: 1 when
 * those two copies take longer than running the forwards again. */
static int stash_costs_more(const struct tg_graph *g, const struct tg_hw *hw)
{
	double stash = 0, fwd = 0;
	for (int o = 0; o < g->nobj; o++)
		if (g->obj[o].kind == TG_O_STASH)
			stash += (double)g->obj[o].bytes;
	for (int t = 0; t < g->ntask; t++)
		if (g->task[t].kind == TG_FWD)
			fwd += g->task[t].flops;
	if (hw->h2d_bw <= 0 || hw->d2h_bw <= 0 || hw->flops <= 0)
		return 0;
	return stash / hw->d2h_bw + stash / hw->h2d_bw > fwd / hw->flops;
}

/* The shard of each pack (plan.shard_head); 0 when none is marked. */
static int shards_of(const struct tg_plan *p, int *shard)
{
	int any = 0;
	for (int pk = 0; pk < p->npacks; pk++)
		any |= p->shard_head[pk];
	for (int pk = 0, sh = -1; pk < p->npacks; pk++) {
		if (!pk || p->shard_head[pk])
			sh++;
		shard[pk] = sh;
	}
	return any;
}

/* Splits the task order into units: a forward or backward task starts one
 * unless the one before was of the same shard and microbatches and of the
 * same kind, or a forward before this backward (the last shard: its forward,
 * loss and backward are one unit, so its backward runs where its stash is);
 * with no shard marked, each starts one. The loss, norm and update tasks join
 * the unit before them, but with clipping each update is a unit. unit[n] for order position n (program task n is the
 * graph's order[n]); returns the number of units. */
static int split_units(const struct tg_graph *g, const struct tg_plan *p, int *unit)
{
	int shard[TG_MAX_PACKS];
	int marked = shards_of(p, shard);
	int nu = 0, kind = -1, sh = -1, mb0 = -1;
	for (int n = 0; n < g->ntask; n++) {
		const struct tg_task *t = &g->task[g->order[n]];
		if (t->kind == TG_FWD || t->kind == TG_BWD) {
			int same = t->kind == kind || (kind == TG_FWD && t->kind == TG_BWD);
			if (!nu || !marked || !same || shard[t->pack] != sh || t->mb0 != mb0)
				nu++;
			kind = t->kind;
			sh = shard[t->pack];
			mb0 = t->mb0;
		} else if (!nu || (t->kind == TG_UPD && g->mobj[0].N[0] >= 0)) {
			/* with clipping every update waits for the whole backward: each is
			 * a unit of its own (one pack's W, G, O and the norms), not a
			 * tail on the last backward unit holding every pack at once */
			nu++;
			kind = -1;
		}
		unit[n] = nu - 1;
	}
	return nu;
}

/* The device space of an object of `bytes`, as the vmm's pools allocate it:
 * aligned, rounded up to its size class, aligned again (vmm_obj_create). */
static uint64_t device_bytes(uint64_t bytes, const struct tg_hw *hw, uint64_t align)
{
	uint64_t b = (bytes + align - 1) / align * align;
	b = sp_size_class(b, hw->size_class_bits, hw->size_class_min);
	return (b + align - 1) / align * align;
}

/* Is task t's reference to o a write that reads nothing of it (its old
 * contents are dead: the executor discards them after the use before)? */
static int overwrites(const struct tg_task *t, int o)
{
	int w = 0;
	for (int i = 0; i < t->nwrite; i++)
		w |= t->write[i] == o;
	for (int i = 0; i < t->nread && w; i++)
		if (t->read[i] == o)
			return 0;
	return w;
}

/* The most device memory one unit holds, each object as the pools allocate
 * it: an object from its first use in the unit (a unit's tasks are issued
 * together, each acquiring what it uses) to the unit's end when the program
 * reads it again later, in this step or the next; else to its last use in the
 * unit (the executor discards dead contents right after issue, and the pools
 * reuse the space in stream order). -ENOMEM for no memory to count with. */
static int64_t unit_need_max(const struct tg_graph *g, const struct tg_plan *p,
                             const struct tg_hw *hw, uint64_t align)
{
	int nt = g->ntask, no = g->nobj;
	int *unit = malloc((size_t)nt * sizeof(int) + 1);
	int *from = calloc((size_t)no + 1, sizeof(int)); /* references of o: [from[o], from[o+1]) */
	int *fill = calloc((size_t)no + 1, sizeof(int));
	int nref = 0;
	for (int n = 0; n < nt; n++)
		nref += g->task[g->order[n]].nread + g->task[g->order[n]].nwrite;
	int *at = malloc((size_t)nref * sizeof(int) + 1); /* order position of each */
	int64_t *delta = calloc((size_t)nt + 1, sizeof(int64_t));
	if (!unit || !from || !fill || !at || !delta) {
		free(unit);
		free(from);
		free(fill);
		free(at);
		free(delta);
		return sp_error(-ENOMEM, "sharp: units of %d tasks", nt);
	}
	split_units(g, p, unit);
	/* each object's uses in order, a task that refers to it twice once:
	 * counted, then filled (fill[o]: the last position seen, + 1) */
	for (int pass = 0; pass < 2; pass++) {
		for (int n = 0; n < nt; n++) {
			const struct tg_task *t = &g->task[g->order[n]];
			for (int i = 0; i < t->nread + t->nwrite; i++) {
				int o = i < t->nread ? t->read[i] : t->write[i - t->nread];
				if (fill[o] == n + 1)
					continue;
				fill[o] = n + 1;
				if (pass == 0)
					from[o + 1]++;
				else
					at[from[o]++] = n;
			}
		}
		for (int o = 0; o < no && pass == 0; o++)
			from[o + 1] += from[o];
		memset(fill, 0, (size_t)(no + 1) * sizeof(int));
	}
	memmove(from + 1, from, (size_t)no * sizeof(int)); /* filling advanced each by one object */
	from[0] = 0;
	/* per object and unit: from its first use there; gone after its last
	 * one when the next use (cyclically: the next step's first) overwrites
	 * it, else held to the unit's end (a unit's count starts afresh) */
	for (int o = 0; o < no; o++) {
		if (!g->obj[o].bytes)
			continue;
		int64_t b = (int64_t)device_bytes(g->obj[o].bytes, hw, align);
		for (int k = from[o]; k < from[o + 1];) {
			int u = unit[at[k]], j = k;
			while (j + 1 < from[o + 1] && unit[at[j + 1]] == u)
				j++;
			int wraps = j + 1 >= from[o + 1];
			int nx = wraps ? at[from[o]] : at[j + 1];
			int dead = overwrites(&g->task[g->order[nx]], o) ||
			           (wraps && g->obj[o].kind == TG_O_INPUT);
			delta[at[k]] += b;
			if (dead && at[j] + 1 < nt && unit[at[j] + 1] == u)
				delta[at[j] + 1] -= b;
			k = j + 1;
		}
	}
	int64_t most = 0, live = 0;
	for (int n = 0; n < nt; n++) {
		if (n && unit[n] != unit[n - 1])
			live = 0; /* what a unit holds past its end is not counted in the next */
		live += delta[n];
		if (live > most)
			most = live;
	}
	free(unit);
	free(from);
	free(fill);
	free(at);
	free(delta);
	return most;
}

/* Shards split into packs of about one layer each, up to `most` per shard
 * and TG_MAX_PACKS in all: the unit's tasks acquire pack by pack, so a pack
 * computes while the next one loads, and a prefetch that cannot hold the
 * next shard whole still loads its first packs. */
static void split_shards(const struct tg_plan *shards, int most, struct tg_plan *out)
{
	*out = *shards;
	memset(out->shard_head, 0, sizeof(out->shard_head));
	if (most > TG_MAX_PACKS / shards->npacks)
		most = TG_MAX_PACKS / shards->npacks; /* tg_pack_greedy: npacks <= TG_MAX_PACKS */
	if (most < 1)
		most = 1;
	int np = 0;
	for (int sh = 0; sh < shards->npacks; sh++) {
		int lo = sh ? shards->pack_end[sh - 1] : 0, hi = shards->pack_end[sh];
		int k = hi - lo < most ? hi - lo : most;
		out->shard_head[np] = 1;
		for (int j = 1; j <= k; j++)
			out->pack_end[np++] = lo + (int)((int64_t)(hi - lo) * j / k);
	}
	out->npacks = np;
}

/* The unit need of plan p, or a negative error. */
static int64_t plan_need(const struct tg_model *tm, const struct tg_plan *p, const struct tg_hw *hw,
                         uint64_t align)
{
	struct tg_graph g;
	int rc = tg_graph_build(tm, 1, p, &g);
	if (rc < 0)
		return rc;
	int64_t need = unit_need_max(&g, p, hw, align);
	tg_graph_free(&g);
	return need;
}

/* A recomputing plan: the last shard's forward, loss and backward are one
 * unit (split_units), so its packs can keep their stash instead, as many of
 * its last packs as fit with the double-buffer reserve left (the need grows
 * with each one kept: a binary search). */
static void keep_last_stashes(const struct tg_model *tm, struct tg_plan *p, const struct tg_hw *hw,
                              uint64_t align, double reserve)
{
	int head = 0;
	for (int pk = 0; pk < p->npacks; pk++)
		if (p->shard_head[pk])
			head = pk;
	double lim = (double)hw->capacity / (1.0 + reserve);
	int lo = 0, hi = p->npacks - head; /* lo packs fit */
	while (lo < hi) {
		int k = (lo + hi + 1) / 2;
		struct tg_plan q = *p;
		for (int pk = p->npacks - k; pk < p->npacks; pk++)
			q.keep_stash[pk] = 1;
		int64_t need = plan_need(tm, &q, hw, align);
		if (need >= 0 && (double)need <= lim)
			lo = k;
		else
			hi = k - 1;
	}
	for (int pk = p->npacks - lo; pk < p->npacks; pk++)
		p->keep_stash[pk] = 1;
}

int rt_sharp_plan(const struct rt_ctx *rt, const struct rt_model *m, double reserve,
                  struct tg_plan *out)
{
	SP_CHECK_ARG(rt && m && out, "rt_sharp_plan: NULL argument");
	SP_CHECK_ARG(reserve >= 0 && reserve < 1,
	             "sharp: double-buffer reserve %.2f outside [0, 1)", reserve);
	struct tg_layer *tl = calloc((size_t)m->nlayers, sizeof(*tl));
	if (!tl)
		return sp_error(-ENOMEM, "rt_sharp_plan: layers");
	struct tg_model tm;
	rt_model_tg(m, tl, &tm);
	struct tg_hw hw;
	rt_plan_hw(rt, 1, &hw);
	memset(out, 0, sizeof(*out));
	out->sched = TG_HARMONY_PP;
	out->ndev = 1;
	out->group = 1;
	/* Hydra's shard unit is a whole minibatch; the greedy packing counts the
	 * pack's layers and a minibatch, the executor's working set is a little
	 * more (ping-pong gradients, the loss): shrink until every task fits */
	int rc = -ENOMEM;
	uint64_t cap = hw.capacity, align = rt->cfg.vmm.align ? rt->cfg.vmm.align : 256;
	int most = SHARD_PACKS;
	for (int tries = 0; tries < 40; tries++) {
		struct tg_plan shards = *out;
		rc = tg_pack_greedy(&tm, m->batch, cap, reserve, &shards);
		if (rc < 0)
			break;
		split_shards(&shards, most, out);
		struct tg_graph g;
		rc = tg_graph_build(&tm, 1, out, &g);
		if (rc < 0 && most > 1) {
			/* a pack of several layers tied to two packs: whole shards */
			SP_INFO(RT, "sharp %s: shards stay whole: %s", m->name, sp_last_error());
			most = 1;
			tries--;
			continue;
		}
		if (rc < 0)
			break;
		int64_t need = unit_need_max(&g, out, &hw, align);
		if (need >= 0 && (uint64_t)need <= hw.capacity && !out->recompute &&
		    stash_costs_more(&g, &hw)) {
			/* Hydra's backward unit runs its shard's forward again (the
			 * unit keeps only its packs' inputs): the stash would go to the
			 * host and back between a model's units; recompute works in the
			 * unit's own space, so the fit is checked again */
			out->recompute = 1;
			tg_graph_free(&g);
			tries--;
			continue;
		}
		tg_graph_free(&g);
		if (need < 0) {
			free(tl);
			return (int)need;
		}
		if ((uint64_t)need <= hw.capacity)
			break;
		rc = -ENOMEM;
		cap = cap / 10 * 9;
	}
	if (rc == 0 && out->recompute && tg_plan_shards(out) < out->npacks)
		keep_last_stashes(&tm, out, &hw, align, reserve);
	free(tl);
	if (rc == -ENOMEM && !strstr(sp_last_error(), "layer"))
		return sp_error(-ENOMEM,
		                "sharp: model %s does not fit %.0f MiB per device in shards",
		                m->name, (double)hw.capacity / (1 << 20));
	if (rc < 0)
		return sp_error(rc, "model %s: %s", m->name, sp_last_error());
	return 0;
}

/* Which units use each object, for the hints (after units_of). */
static int uses_of(struct sm *s)
{
	const struct rt_prog *p = &s->run->prog;
	int no = p->nobj, total = 0;
	s->ufrom = calloc((size_t)no + 1, sizeof(int));
	int *last = malloc((size_t)no * sizeof(int));
	if (!s->ufrom || !last) {
		free(last);
		return sp_error(-ENOMEM, "sharp: uses of %d objects", no);
	}
	for (int pass = 0; pass < 2; pass++) {
		for (int o = 0; o < no; o++)
			last[o] = -1;
		for (int u = 0; u < s->nunits; u++)
			for (int t = s->ufirst[u]; t < s->ufirst[u + 1]; t++)
				for (int r = 0; r < p->task[t].nref; r++) {
					int o = p->task[t].ref[r].obj;
					if (last[o] == u)
						continue;
					last[o] = u;
					if (!pass) {
						s->ufrom[o + 1]++;
						total++;
						continue;
					}
					int k = s->ufrom[o]++; /* filled, then shifted back */
					s->use[k] = u;
					s->dead_at[k] = p->task[t].ref[r].mode == VMM_OVERWRITE;
				}
		if (!pass) {
			for (int o = 0; o < no; o++)
				s->ufrom[o + 1] += s->ufrom[o];
			s->use = malloc((size_t)(total + 1) * sizeof(int));
			s->dead_at = malloc((size_t)total + 1);
			if (!s->use || !s->dead_at) {
				free(last);
				return sp_error(-ENOMEM, "sharp: %d object uses", total);
			}
		}
	}
	for (int o = no; o > 0; o--)
		s->ufrom[o] = s->ufrom[o - 1];
	s->ufrom[0] = 0;
	free(last);
	return 0;
}

/* The vmm's eviction ranks copies by next use (Belady). The executor's own
 * hints count in one program's tasks, which says nothing across models; here
 * the clock is the backend's, in microseconds: each object of model i gets
 * the time its next unit using it should start, from the measured unit
 * times, stretched by the models sharing each device. Contents that the next
 * use overwrites (beyond the unit about to run), and state no step will read
 * again, get no hint (evicted first). Called whenever model i's position
 * changes. */
static void hint_model(struct sharp *h, int i)
{
	struct sm *s = &h->m[i];
	const struct rt_prog *p = &s->run->prog;
	int live = 0;
	for (int d = 0; d < h->rt->ndev; d++)
		live += !h->dead[d];
	double slow = live && h->alive > live ? (double)h->alive / live : 1.0;
	double now = dev_now(h->rt->dev) - h->st->t0, to_end = 0;
	for (int u = s->cur; u < s->nunits; u++)
		to_end += s->est[u];
	int more = s->done_steps + 1 < s->steps;
	for (int o = 0; o < p->nobj; o++) {
		if (!p->obj[o].vid || s->ufrom[o] == s->ufrom[o + 1])
			continue;
		int k = s->ufrom[o], end = s->ufrom[o + 1];
		while (k < end && s->use[k] < s->cur)
			k++;
		double dist = 0;
		int wrap = k == end;
		if (wrap)
			k = s->ufrom[o];
		int u = s->use[k];
		for (int j = wrap ? 0 : s->cur; j < u; j++)
			dist += s->est[j];
		if (wrap)
			dist += to_end;
		uint64_t next = VMM_NO_HINT;
		/* in the unit about to run, what it overwrites it then reads (the
		 * last shard's stash, a shard's boundaries): needed now, not a
		 * victim once written (its dead contents were discarded before) */
		int now_unit = !wrap && u == s->cur;
		if ((!s->dead_at[k] || now_unit) && (!wrap || more))
			next = (uint64_t)(1e6 * (now + slow * dist));
		if (vmm_hint(h->rt->vmm, p->obj[o].vid, next) < 0)
			SP_INFO(RT, "sharp hint %s: %s", p->obj[o].name, sp_last_error());
	}
}

/* The program's units (split_units) and their first estimates: FLOPs at the
 * device's rate. */
static int units_of(struct sm *s)
{
	const struct rt_run *r = s->run;
	int n = r->prog.ntask;
	s->ufirst = malloc((size_t)(n + 1) * sizeof(int));
	s->est = calloc((size_t)n + 1, sizeof(double));
	int *unit = malloc((size_t)n * sizeof(int) + 1);
	if (!s->ufirst || !s->est || !unit) {
		free(unit);
		return sp_error(-ENOMEM, "sharp: units of %d tasks", n);
	}
	for (int t = 0; t < n; t++)
		if (r->g.task[r->prog.task[t].tg_task].kind == TG_ALLREDUCE) {
			free(unit);
			return sp_error(-EINVAL, "sharp: model %s's plan has an all-reduce",
			                r->m->name);
		}
	struct tg_hw hw;
	rt_plan_hw(r->rt, 1, &hw);
	s->nunits = split_units(&r->g, &r->plan, unit);
	for (int t = 0; t < n; t++) {
		if (!t || unit[t] != unit[t - 1])
			s->ufirst[unit[t]] = t;
		s->est[unit[t]] += r->prog.task[t].flops / (hw.flops > 0 ? hw.flops : 1e12);
	}
	free(unit);
	s->ufirst[s->nunits] = n;
	for (int u = 0; u < s->nunits && sp_log_level_now >= SP_LOG_TRACE; u++)
		for (int t = s->ufirst[u]; t < s->ufirst[u + 1]; t++)
			SP_TRACE(RT, "sharp %s: unit %d task %d %s", r->m->name, u, t,
			         r->prog.task[t].name);
	return uses_of(s);
}

static double remaining(const struct sm *s)
{
	double step = 0, left = 0;
	for (int u = 0; u < s->nunits; u++) {
		step += s->est[u];
		if (u >= s->cur)
			left += s->est[u];
	}
	return left + step * (double)(s->steps - s->done_steps - 1);
}

/* Recovery: model i's training state (parameters and optimizer state of every
 * layer) copied to plain host memory, off every device and the vmm. */
static int checkpoint(struct sharp *h, int i)
{
	struct sm *s = &h->m[i];
	const struct rt_run *r = s->run;
	SP_CHECK(rt_run_save(s->run, &s->ck_new));
	/* complete: it replaces the last one (whose buffers are reused next) */
	void **t = s->ck;
	s->ck = s->ck_new;
	s->ck_new = t;
	s->ck_iter = r->iter;
	s->ck_step = r->step;
	s->ck_done = s->done_steps;
	s->ck_final = s->stopped || s->done_steps == s->steps;
	h->st->checkpoints++;
	return 0;
}

/* Model i back to its last checkpoint: every object's contents are dropped
 * (lost ones too), then the state is written into the host pool. */
static int restore(struct sharp *h, int i)
{
	struct sm *s = &h->m[i];
	struct rt_run *r = s->run;
	SP_CHECK(rt_run_restore(r, s->ck));
	r->iter = s->ck_iter;
	r->step = s->ck_step;
	s->done_steps = s->ck_done;
	if (s->finished && !s->ck_final) { /* its last steps were not kept */
		s->finished = 0;
		h->st->stopped -= s->stopped;
		s->stopped = 0;
		h->alive++;
	}
	return 0;
}

static int begin_step(struct sharp *h, int i)
{
	struct sm *s = &h->m[i];
	if (h->cfg->recover && h->rt->data)
		SP_CHECK(checkpoint(h, i));
	SP_CHECK(rt_run_step_begin(s->run));
	int rc = rt_xs_open(h->rt, &s->run->prog, s->run->iter, &s->xs);
	if (rc < 0) {
		s->run->step--;
		return rc;
	}
	s->cur = 0;
	return 0;
}

/* The unit of model i on device d: its tasks, issued in order. */
static int issue_unit(struct sharp *h, int i, int d)
{
	struct sm *s = &h->m[i];
	s->dev = d;
	s->start = dev_now(h->rt->dev);
	h->busy[d] = i;
	h->st->units++;
	h->st->units_on[d]++;
	if (s->last_dev == d)
		h->st->same_device++;
	for (int t = s->ufirst[s->cur]; t < s->ufirst[s->cur + 1]; t++)
		SP_CHECK(rt_xs_issue(s->xs, t, d));
	return 0;
}

/* 1 while the unit running on device d still waits for a copy of what it
 * reads (over the host link only, with h2d_only): a prefetch now would take
 * link bandwidth from it. Polled on each pass of the loop, which wakes on
 * task completions: on a device alone, the prefetch may start only when the
 * unit's first task is done. (Waking on the unit's start event instead, so
 * that the prefetch starts as soon as the loads are done, made bench-hydra
 * slower: AdamW 38.1 -> 43.8 s.) */
static int loading(struct sharp *h, int d, int h2d_only)
{
	const struct sm *s = &h->m[h->busy[d]];
	const struct rt_prog *p = &s->run->prog;
	for (int t = s->ufirst[s->cur]; t < s->ufirst[s->cur + 1]; t++)
		for (int r = 0; r < p->task[t].nref; r++) {
			const struct rt_obj *o = &p->obj[p->task[t].ref[r].obj];
			struct vmm_obj_info in;
			if (o->vid && vmm_obj_info(h->rt->vmm, o->vid, &in) == 0 &&
			    (in.in_flight == VMM_XFER_H2D ||
			     (!h2d_only && in.in_flight == VMM_XFER_P2P)))
				return 1;
		}
	return 0;
}

/* Double buffering: what model i's next unit reads comes to device d, as far
 * as it fits, once the running unit has what it reads (bench-hydra: loading
 * both at once, each at half the link, was 5-12% slower) and no unit running
 * elsewhere waits for the shared host link (asking only d's unit, a prefetch
 * delayed the others' loads: bench-hydra AdamW 59.4 s and 0.73x the time
 * without double buffering; 40.3 s and 1.08x the other way; SGD 21.2 ->
 * 20.4 s). link_busy: some running unit waits for an H2D copy (loop() asks
 * once per pass). Called again on every pass of the loop while the
 * reservation stands: room frees as the running unit's predecessors are
 * written back. */
static void prefetch_unit(struct sharp *h, int i, int d, int link_busy)
{
	if (link_busy || loading(h, d, 0))
		return;
	struct sm *s = &h->m[i];
	const struct rt_prog *p = &s->run->prog;
	/* the model running here: its unit after the current one (the next
	 * step's first after its last) */
	int u = s->dev == d ? (s->cur + 1) % s->nunits : s->cur;
	for (int t = s->ufirst[u]; t < s->ufirst[u + 1]; t++)
		for (int r = 0; r < p->task[t].nref; r++) {
			const struct rt_obj *o = &p->obj[p->task[t].ref[r].obj];
			/* a unit of the next step: its inputs are not written yet */
			if (!o->vid || p->task[t].ref[r].mode == VMM_OVERWRITE ||
			    (o->input && u != s->cur) ||
			    (vmm_obj_where(h->rt->vmm, o->vid) & (1u << d)))
				continue;
			/* Hydra loads only what fits the free space: evicting for it
			 * threw out copies that running models need next (bench-hydra:
			 * 1.6x slower under LRU, still 1.2-1.4x with the hints) */
			uint64_t used, cap;
			if (vmm_place_usage(h->rt->vmm, d, &used, &cap) == 0 &&
			    used + o->bytes > cap)
				continue;
			int rc = vmm_prefetch(h->rt->vmm, o->vid, d);
			if (rc < 0)
				SP_INFO(RT, "sharp prefetch %s: %s", o->name, sp_last_error());
			else
				h->rt->st.prefetches++;
		}
}

/* Model i's unit completed: account, advance, next step, early stop. */
static int unit_done(struct sharp *h, int i)
{
	struct sm *s = &h->m[i];
	int d = s->dev;
	double t_end = dev_now(h->rt->dev);
	if (dev_event_time(s->run->prog.ev[s->ufirst[s->cur + 1] - 1], &t_end) < 0)
		t_end = dev_now(h->rt->dev);
	double took = t_end - s->start;
	if (took > 0)
		s->est[s->cur] = took;
	h->st->busy_s[d] += took > 0 ? took : 0;
	h->busy[d] = -1;
	s->dev = -1;
	s->last_dev = d;
	/* chained: its device runs its next unit, the policy does not offer it */
	int chained = h->reserved[d] == i;
	if (++s->cur < s->nunits) {
		if (!chained)
			tg_sharp_ready(h->pol, i, remaining(s));
		hint_model(h, i);
		return 0;
	}
	double loss;
	rt_run_step_end(s->run, &loss);
	rt_xs_close(s->xs);
	s->xs = NULL;
	s->done_steps++;
	if (h->cfg->on_step && s->done_steps < s->steps &&
	    h->cfg->on_step(h->cfg->arg, i, s->done_steps, loss)) {
		s->stopped = 1;
		h->st->stopped++;
	}
	if (s->stopped || s->done_steps == s->steps) {
		if (chained)
			h->reserved[d] = -1;
		if (h->cfg->recover && h->rt->data)
			SP_CHECK(checkpoint(h, i)); /* its result survives a later failure */
		s->finished = 1;
		hint_model(h, i); /* nothing of it is needed again */
		h->alive--;
		h->st->makespan_s = t_end - h->st->t0;
		return 0;
	}
	SP_CHECK(begin_step(h, i));
	if (!chained)
		tg_sharp_ready(h->pol, i, remaining(s));
	hint_model(h, i);
	return 0;
}

/* A device that failed since the last look, or -1. */
static int new_failure(const struct sharp *h)
{
	for (int d = 0; d < h->rt->ndev; d++)
		if (!h->dead[d] && dev_failed(h->rt->dev, d))
			return d;
	return -1;
}

/* Device d failed. Without recovery the run ends. With it: whatever was in
 * flight completes (dropped work fails), the vmm forgets d, and every model
 * goes back to its last checkpoint — unfinished ones to the start of their
 * current step, which reruns on the devices left (work that read a failed
 * copy, on any device, may be wrong: only a checkpoint is trusted). */
static int recover(struct sharp *h, int d)
{
	h->dead[d] = 1;
	int left = 0;
	for (int e = 0; e < h->rt->ndev; e++)
		left += !h->dead[e];
	int on = h->cfg->recover && h->rt->data;
	if (on)
		SP_WARN(RT,
		        "sharp: device %d failed; %d model%s go back to their last step boundary "
		        "on %d device%s",
		        d, h->alive, h->alive == 1 ? "" : "s", left, left == 1 ? "" : "s");
	for (int i = 0; i < h->n; i++) {
		struct sm *s = &h->m[i];
		if (s->dev >= 0) {
			h->busy[s->dev] = -1;
			s->dev = -1;
			h->st->units_lost++;
		}
		rt_xs_close(s->xs); /* waits for what was issued; dropped work fails */
		s->xs = NULL;
	}
	for (int e = 0; e < DEV_MAX; e++)
		h->reserved[e] = -1;
	/* the vmm forgets d either way: what survives stays readable */
	SP_CHECK(vmm_device_failed(h->rt->vmm, d, NULL));
	for (int k = 0; k < 64 && vmm_sync(h->rt->vmm) < 0; k++)
		SP_INFO(RT, "sharp recovery: %s", sp_last_error());
	if (!on)
		return sp_error(-EIO,
		                "sharp: device %d failed; %d model%s unfinished (with recovery on, "
		                "spill tune --recover, they go back to their last step)",
		                d, h->alive, h->alive == 1 ? "" : "s");
	if (!left)
		return sp_error(-EIO, "sharp: every device has failed; %d models unfinished",
		                h->alive);
	h->st->failures++;
	for (int i = 0; i < h->n; i++) {
		struct sm *s = &h->m[i];
		if (!s->ck)
			continue; /* never started */
		SP_CHECK(restore(h, i));
		tg_sharp_remove(h->pol, i);
		if (s->finished)
			continue;
		/* the step begins again: same inputs, same update */
		SP_CHECK(rt_run_step_begin(s->run));
		SP_CHECK(rt_xs_open(h->rt, &s->run->prog, s->run->iter, &s->xs));
		s->cur = 0;
		s->last_dev = -1;
		tg_sharp_ready(h->pol, i, remaining(s));
		hint_model(h, i);
	}
	return 0;
}

/* For a device with no reservation of its own: the policy's pick, or a model
 * another (busy) device reserved. Lrtf takes the longest remaining of them
 * all: a long model left waiting on a busy device's reservation while free
 * devices run shorter ones is what stretches the makespan's tail (its
 * prefetched part comes GPU->GPU). The other policies steal only when they
 * have nothing. */
static int available(const struct sharp *h, int d)
{
	return !h->cfg->device_ready || h->cfg->device_ready(h->cfg->arg, d);
}

/* Bytes of what model i's next unit reads that device d holds. */
static uint64_t held_on(const struct sharp *h, int i, int d)
{
	const struct sm *s = &h->m[i];
	const struct rt_prog *p = &s->run->prog;
	uint64_t b = 0;
	for (int t = s->ufirst[s->cur]; t < s->ufirst[s->cur + 1]; t++)
		for (int r = 0; r < p->task[t].nref; r++) {
			const struct rt_obj *o = &p->obj[p->task[t].ref[r].obj];
			if (o->vid && p->task[t].ref[r].mode != VMM_OVERWRITE &&
			    (vmm_obj_where(h->rt->vmm, o->vid) & (1u << d)))
				b += o->bytes;
		}
	return b;
}

/* The policy's pick for device d. Under lrtf, among the models whose
 * remaining time is within AFFINITY of the longest, the one whose next unit
 * finds the most of what it reads on d: a shard moved GPU to GPU, or evicted
 * and loaded again, costs link time that units wait for. */
#define AFFINITY 0.05
static int pick_for(struct sharp *h, int d)
{
	int i = tg_sharp_pick(h->pol);
	if (i < 0 || h->cfg->policy != TG_MM_LRTF)
		return i;
	int cand[8], n = 0;
	double top = remaining(&h->m[i]);
	cand[n++] = i;
	while (n < 8) {
		int j = tg_sharp_pick(h->pol);
		if (j < 0)
			break;
		if (remaining(&h->m[j]) < top * (1 - AFFINITY)) {
			tg_sharp_ready(h->pol, j, remaining(&h->m[j]));
			break;
		}
		cand[n++] = j;
	}
	int best = 0;
	uint64_t most = held_on(h, i, d);
	for (int k = 1; k < n; k++) {
		uint64_t b = held_on(h, cand[k], d);
		if (b > most) {
			most = b;
			best = k;
		}
	}
	for (int k = 0; k < n; k++) /* the others back to the policy, unchanged */
		if (k != best)
			tg_sharp_ready(h->pol, cand[k], remaining(&h->m[cand[k]]));
	return cand[best];
}

static int pick_or_steal(struct sharp *h, int d)
{
	int i = pick_for(h, d), from = -1;
	double best = i >= 0 ? remaining(&h->m[i]) : -1;
	for (int o = 0; o < h->rt->ndev; o++) {
		int r = h->reserved[o];
		if (r < 0 || h->m[r].dev >= 0 || /* chained: still running there */
		    (i >= 0 && h->cfg->policy != TG_MM_LRTF))
			continue;
		double left = remaining(&h->m[r]);
		if (left > best) {
			best = left;
			from = o;
		}
	}
	if (from < 0)
		return i;
	if (i >= 0) /* back to the policy, unchanged */
		tg_sharp_ready(h->pol, i, remaining(&h->m[i]));
	i = h->reserved[from];
	h->reserved[from] = -1;
	return i;
}

/* Double buffering: the unit busy device d runs next. Under lrtf that is the
 * running model's own next unit when it has the longest remaining time of
 * the two: it becomes eligible just as d frees, and what it reads is largely
 * on d already (the last forward's shard is the first backward's, the last
 * backward's the next step's first forward, and the intermediates between).
 * Otherwise the policy's pick; also on a device slower than another live one,
 * which should not keep the longest model to itself. */
static int slower_than_another(const struct sharp *h, int d)
{
	for (int e = 0; e < h->rt->ndev; e++)
		if (e != d && !h->dead[e] && h->rate[e] > h->rate[d])
			return 1;
	return 0;
}

static int reserve_next(struct sharp *h, int d)
{
	int i = pick_for(h, d), run = h->busy[d];
	if (h->cfg->policy != TG_MM_LRTF || slower_than_another(h, d))
		return i;
	const struct sm *s = &h->m[run];
	int last = s->cur + 1 == s->nunits && s->done_steps + 1 >= s->steps;
	double left = remaining(s) - s->est[s->cur];
	if (last || (i >= 0 && remaining(&h->m[i]) > left))
		return i;
	if (i >= 0) /* back to the policy, unchanged */
		tg_sharp_ready(h->pol, i, remaining(&h->m[i]));
	return run;
}

static int loop(struct sharp *h)
{
	struct dev_event *ev[DEV_MAX + 1];
	while (h->alive) {
		int progress = 0;
		for (int i = 0; i < h->n; i++) {
			struct sm *s = &h->m[i];
			if (s->dev < 0)
				continue;
			int rc = rt_xs_reap(s->xs);
			/* a unit is accepted only while no device has failed
			 * unnoticed: it may have read a copy the failure dropped */
			if (new_failure(h) >= 0)
				return -EIO; /* rt_sharp_run recovers */
			SP_CHECK(rc);
			if (rt_xs_state(s->xs, s->ufirst[s->cur + 1] - 1) == RT_XS_DONE) {
				SP_CHECK(unit_done(h, i));
				progress = 1;
			}
		}
		if (vmm_progress(h->rt->vmm) < 0)
			SP_INFO(RT, "%s", sp_last_error());
		/* idle devices first: their reservation (all of those before any
		 * steal, or a device idle a moment earlier takes a chained model
		 * from the device that holds its shard), else the policy's pick or
		 * another device's reservation (that device is busy: running it
		 * here beats waiting) */
		for (int pass = 0; pass < 2; pass++)
			for (int d = 0; d < h->rt->ndev; d++) {
				if (h->busy[d] >= 0 || h->dead[d])
					continue;
				int i = h->reserved[d];
				if (!pass && i < 0)
					continue;
				h->reserved[d] = -1;
				if (!available(h, d)) {
					if (i >= 0) /* another device takes it */
						tg_sharp_ready(h->pol, i, remaining(&h->m[i]));
					continue;
				}
				if (i < 0)
					i = pick_or_steal(h, d);
				if (i < 0)
					continue;
				SP_CHECK(issue_unit(h, i, d));
				progress = 1;
			}
		/* then double buffering: each busy device reserves its next unit
		 * and loads what of it fits */
		int link_busy = 0;
		for (int e = 0; e < h->rt->ndev && h->cfg->double_buffer && !link_busy; e++)
			link_busy = h->busy[e] >= 0 && loading(h, e, 1);
		for (int d = 0; d < h->rt->ndev && h->cfg->double_buffer; d++) {
			if (h->busy[d] < 0 || h->dead[d])
				continue;
			if (!available(h, d) && h->reserved[d] == h->busy[d]) {
				h->reserved[d] = -1; /* leaving: unit_done hands it on */
				continue;
			}
			if (h->reserved[d] < 0 && available(h, d)) /* not one leaving */
				h->reserved[d] = reserve_next(h, d);
			if (h->reserved[d] >= 0)
				prefetch_unit(h, h->reserved[d], d, link_busy);
		}
		if (progress || !h->alive)
			continue;
		int nev = 0;
		for (int i = 0; i < h->n && nev < DEV_MAX; i++)
			if (h->m[i].dev >= 0)
				nev += rt_xs_heads(h->m[i].xs, ev + nev, DEV_MAX + 1 - nev);
		if (!nev)
			return sp_error(-EDEADLK,
			                "sharp: %d models left, nothing running and no device "
			                "available",
			                h->alive);
		int idx;
		SP_CHECK(dev_event_wait_any(ev, nev, &idx));
	}
	return 0;
}

int rt_sharp_run(struct rt_ctx *rt, struct rt_run *const *runs, const int *steps, int n,
                 const struct rt_sharp_config *cfg, struct rt_sharp_stats *st)
{
	SP_CHECK_ARG(rt && runs && steps && cfg && st && n > 0, "rt_sharp_run: bad arguments");
	memset(st, 0, sizeof(*st));
	struct sharp h = {.rt = rt, .cfg = cfg, .n = n, .st = st};
	for (int d = 0; d < DEV_MAX; d++)
		h.busy[d] = h.reserved[d] = -1;
	for (int d = 0; d < rt->ndev; d++) {
		struct dev_info in;
		h.rate[d] = dev_info(rt->dev, d, &in) == 0 ? in.flops * in.speed : 0;
	}
	h.m = calloc((size_t)n, sizeof(*h.m));
	if (!h.m)
		return sp_error(-ENOMEM, "sharp: %d models", n);
	int rc = tg_sharp_open(n, cfg->policy, cfg->seed, &h.pol);
	st->t0 = dev_now(rt->dev);
	for (int i = 0; i < n && rc == 0; i++) {
		struct sm *s = &h.m[i];
		s->run = runs[i];
		s->steps = steps[i];
		s->dev = s->last_dev = -1;
		if (!runs[i] || runs[i]->rt != rt || runs[i]->plan.ndev != 1 || steps[i] < 0) {
			rc = sp_error(-EINVAL,
			              "sharp: model %d: a run on this context with a "
			              "one-device plan (rt_sharp_plan) and steps >= 0",
			              i);
			break;
		}
		rc = units_of(s);
		if (rc == 0 && s->steps > 0) {
			h.alive++;
			rc = begin_step(&h, i);
			if (rc == 0)
				tg_sharp_ready(h.pol, i, remaining(s));
			if (rc == 0)
				hint_model(&h, i);
		} else {
			s->finished = 1;
		}
	}
	/* any error while a device has failed unnoticed is that failure's: recover
	 * (or stop with it) and go on */
	for (int f; rc == 0;) {
		rc = loop(&h);
		if (rc == 0 || (f = new_failure(&h)) < 0)
			break;
		rc = recover(&h, f);
	}
	if (rc < 0) {
		char msg[SP_ERROR_MSG_MAX];
		snprintf(msg, sizeof(msg), "%s", sp_last_error());
		for (int i = 0; i < n; i++) /* what was issued completes first */
			rt_xs_close(h.m[i].xs);
		rc = sp_error(rc, "%s", msg);
	}
	char msg[SP_ERROR_MSG_MAX];
	snprintf(msg, sizeof(msg), "%s", sp_last_error());
	int e = vmm_sync(rt->vmm);
	if (rc == 0 && e < 0)
		rc = e;
	else if (rc < 0)
		sp_error(rc, "%s", msg); /* the run's error, not a later one */
	for (int i = 0; i < n; i++) {
		free(h.m[i].ufirst);
		free(h.m[i].est);
		free(h.m[i].ufrom);
		free(h.m[i].use);
		free(h.m[i].dead_at);
		rt_run_save_free(runs[i], h.m[i].ck);
		rt_run_save_free(runs[i], h.m[i].ck_new);
	}
	free(h.m);
	tg_sharp_close(h.pol);
	return rc;
}
