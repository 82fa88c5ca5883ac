/* taskgraph/graph.c — model + plan -> tasks, objects, dependencies, orders.
 *
 * Each schedule emits per-device task sequences and dependencies; a list scheduler
 * (unit costs = FLOPs) then interleaves them into one global topological order and
 * measures makespan, bubble and live stashed microbatches. Objects are per pack
 * (W, G, O; one replica per device in DP modes; 2BW's second weight version Wnew)
 * and per microbatch (stash, boundary output, input gradient, input, loss
 * workspace). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "taskgraph/taskgraph.h"

const char *tg_sched_name(enum tg_sched s)
{
	static const char *n[] = {"dp-swap",    "gpipe",       "1f1b", "harmony-dp",
	                          "harmony-pp", "interleaved", "2bw"};
	return s < TG_NSCHED ? n[s] : "?";
}

const char *tg_kind_name(int k)
{
	static const char *n[] = {"forward", "backward", "update", "all-reduce", "loss", "norm"};
	return k >= 0 && k <= TG_NORM ? n[k] : "?";
}

const char *tg_okind_name(int k)
{
	static const char *n[] = {"weight", "grad", "opt", "stash", "boundary", "input", "work"};
	return k >= 0 && k < TG_NOKIND ? n[k] : "?";
}

struct bld {
	struct tg_graph *g;
	int tcap, ocap;
	int **seq; /* per device (+1 for host at index ndev) */
	int *seqn, *seqcap;
};

static int pool_add(struct tg_graph *g, int v)
{
	if (g->pool_len == g->pool_cap) {
		int nc = g->pool_cap ? 2 * g->pool_cap : 4096;
		int *np = realloc(g->pool, (size_t)nc * sizeof(int));
		if (!np)
			return sp_error(-ENOMEM, "taskgraph: pool of %d ints", nc);
		g->pool = np;
		g->pool_cap = nc;
	}
	g->pool[g->pool_len++] = v;
	return 0;
}

static int obj_new(struct bld *b, int kind, int model, uint64_t bytes)
{
	struct tg_graph *g = b->g;
	if (g->nobj == b->ocap) {
		int nc = b->ocap ? 2 * b->ocap : 1024;
		struct tg_obj *no = realloc(g->obj, (size_t)nc * sizeof(*no));
		if (!no)
			return sp_error(-ENOMEM, "taskgraph: %d objects", nc);
		g->obj = no;
		b->ocap = nc;
	}
	g->obj[g->nobj] = (struct tg_obj){.kind = kind, .model = model, .bytes = bytes};
	return g->nobj++;
}

/* Largest group (microbatches per task); sizes the task lists below. */
#define TG_MAX_GROUP 128

/* lists: reads, writes, deps as (ptr,count); stored as pool offsets first. Per
 * microbatch a task lists at most 4 reads (BWD of the last pack), 2 writes (FWD,
 * LOSS) and 2 deps (BWD), plus a few per task. */
struct tspec {
	int kind, model, pack, mb0, nmb, rep, dev, constrained, work, root, step;
	double flops, xchg;
	int r[4 * TG_MAX_GROUP + 8], nr, w[2 * TG_MAX_GROUP + 8], nw, d[2 * TG_MAX_GROUP + 8], nd;
};

static int task_add(struct bld *b, struct tspec *s)
{
	struct tg_graph *g = b->g;
	if (g->ntask == b->tcap) {
		int nc = b->tcap ? 2 * b->tcap : 1024;
		struct tg_task *nt = realloc(g->task, (size_t)nc * sizeof(*nt));
		if (!nt)
			return sp_error(-ENOMEM, "taskgraph: %d tasks", nc);
		g->task = nt;
		b->tcap = nc;
	}
	struct tg_task *t = &g->task[g->ntask];
	memset(t, 0, sizeof(*t));
	t->id = g->ntask;
	t->kind = s->kind;
	t->model = s->model;
	t->pack = s->pack;
	t->mb0 = s->mb0;
	t->nmb = s->nmb;
	t->rep = s->rep;
	t->dev = s->dev;
	t->constrained = s->constrained;
	t->work = s->work;
	t->flops = s->flops;
	t->xchg_bytes = s->xchg;
	t->root = s->kind == TG_ALLREDUCE ? s->root : -1;
	t->step = s->step;
	t->tp_set = -1;
	/* offsets stored in the pointers' place as indices; fixed up at the end */
	t->nread = s->nr;
	t->nwrite = s->nw;
	t->ndep = s->nd;
	int base = g->pool_len;
	for (int i = 0; i < s->nr; i++)
		SP_CHECK(pool_add(g, s->r[i]));
	for (int i = 0; i < s->nw; i++)
		SP_CHECK(pool_add(g, s->w[i]));
	for (int i = 0; i < s->nd; i++)
		SP_CHECK(pool_add(g, s->d[i]));
	t->read = (int *)(intptr_t)base;
	int q = s->dev < 0 ? g->ndev : s->dev;
	if (b->seqn[q] == b->seqcap[q]) {
		int nc = b->seqcap[q] ? 2 * b->seqcap[q] : 256;
		int *ns = realloc(b->seq[q], (size_t)nc * sizeof(int));
		if (!ns)
			return sp_error(-ENOMEM, "taskgraph: sequence of %d tasks", nc);
		b->seq[q] = ns;
		b->seqcap[q] = nc;
	}
	b->seq[q][b->seqn[q]++] = g->ntask;
	return g->ntask++;
}

void tg_graph_free(struct tg_graph *g)
{
	if (!g)
		return;
	free(g->task);
	free(g->obj);
	free(g->pool);
	free(g->order);
	for (int i = 0; g->mobj && i < g->nmodels; i++)
		free(g->mobj[i].tie_pack); /* base of the model's one block */
	free(g->mobj);
	memset(g, 0, sizeof(*g));
}

/* per-model build state: the graph's object table of the model and, for the
 * dependencies, the last task of each role (task ids, -1 none). Under 2BW
 * with several steps a program (nstep > 1) the weights, gradients and norms
 * have two versions, by step parity: the per-version tables below are
 * [v*nrp + rep*P + p] (v = 0 or 1; always 0 with one version), see wv(),
 * gv(), nv(). */
struct mstate {
	const struct tg_model *m;
	struct tg_model_objs *mo;
	int P, nrp, nrep;
	int step;                   /* the step of the tasks being emitted */
	int *W, *G, *O, *Wnew;      /* = mo's, [rep*P + p] */
	int *S, *B, *D, *X, *Y, *L; /* = mo's, [k*P + p] or [k] */
	int *lastF, *lastB, *lastL; /* [k*P+p] or [k] */
	int *lastBacc;              /* [v][rep*P+p] last BWD accumulating G */
	int *lastAR;                /* [v][rep*P+p] */
	int *lastU;                 /* [v][rep*P+p] the last writer of weight version v */
	int *lastN;                 /* [v][rep] the last NORM (norm_bytes > 0), -1: none yet */
	int *updof;                 /* [step*nrp + rep*P+p] the UPD of each step (the last reader
	                  of its gradient and norm versions, which the step two
	                  later overwrites), -1 not yet */
	int *nupdated;              /* [rep*P+p] UPDs emitted (steps updated) */
	int *upd_pk, *upd_rep, *upd_dev, *upd_step, nupd; /* with norms: the UPDs owed */
	int *nnorm;                                       /* [v][rep] NORMs emitted */
	int *nbwd;    /* [rep*P+p] microbatches through BWD, all steps */
	int cross_ar; /* 1: emit_bwd adds each pack's ALLREDUCE after its last BWD */
};

/* Version indices of this step's weights, gradient and norm in the tables. */
static int wv(const struct mstate *st, int i)
{
	return (st->step & 1) && st->Wnew[i] >= 0 && st->mo->nstep > 1 ? st->nrp + i : i;
}
static int gv(const struct mstate *st, int i)
{
	return (st->step & 1) && st->mo->G2[i] >= 0 ? st->nrp + i : i;
}
static int nv(const struct mstate *st, int rep)
{
	return (st->step & 1) && st->mo->N2[rep] >= 0 ? st->nrep + rep : rep;
}

static uint64_t pack_sum(const struct tg_model *m, const struct tg_plan *p, int pk, int what)
{
	int lo = pk ? p->pack_end[pk - 1] : 0, hi = p->pack_end[pk];
	uint64_t s = 0;
	for (int l = lo; l < hi; l++) {
		const struct tg_layer *L = &m->layers[l];
		switch (what) {
		case 0: s += L->param_bytes; break;
		case 1: s += L->grad_bytes; break;
		case 2: s += L->opt_bytes; break;
		case 3: s += L->stash_bytes_per_sample; break;
		case 4: s = L->out_bytes_per_sample; break;
		}
	}
	return s;
}

/* Stash of pack pk per sample, recompute aside: what its layers keep for their
 * backward, plus the outputs of all but its last layer, which are the inputs the
 * later layers' backward needs (the last one's output is the boundary B). */
static uint64_t pack_stash(const struct tg_model *m, const struct tg_plan *p, int pk)
{
	int lo = pk ? p->pack_end[pk - 1] : 0, hi = p->pack_end[pk];
	uint64_t s = pack_sum(m, p, pk, 3);
	for (int l = lo; l < hi - 1; l++)
		s += m->layers[l].out_bytes_per_sample;
	return s;
}

/* Workspace of a FWD (bwd = 0) or BWD task of pack pk, per microbatch: a pack runs
 * its layers one after another on one microbatch at a time, so the largest layer
 * workspace is enough; the backward also holds two input-gradient buffers that
 * alternate between layers and, with recompute, the stash it rebuilds. */
static uint64_t pack_work(const struct tg_model *m, const struct tg_plan *p, int pk, int bwd)
{
	int lo = pk ? p->pack_end[pk - 1] : 0, hi = p->pack_end[pk];
	uint64_t mb = (uint64_t)p->microbatch, w = 0, dmax = 0;
	for (int l = lo; l < hi; l++) {
		const struct tg_layer *L = &m->layers[l];
		uint64_t lw = L->work_bytes + L->work_bytes_per_sample * mb;
		if (lw > w)
			w = lw;
		if (l < hi - 1 && L->out_bytes_per_sample > dmax)
			dmax = L->out_bytes_per_sample;
	}
	if (bwd) {
		w += 2 * dmax * mb;       /* 0 for a one-layer pack */
		if (tg_recomputes(p, pk)) /* the stash again, and the last layer's output */
			w += (pack_stash(m, p, pk) + m->layers[hi - 1].out_bytes_per_sample) * mb;
	} else if (tg_recomputes(p, pk)) { /* the forward's stash, not kept */
		w += pack_stash(m, p, pk) * mb;
	}
	return w;
}

static double pack_flops(const struct tg_model *m, const struct tg_plan *p, int pk, int bwd)
{
	int lo = pk ? p->pack_end[pk - 1] : 0, hi = p->pack_end[pk];
	double f = 0;
	for (int l = lo; l < hi; l++)
		f += bwd ? m->layers[l].bwd_flops_per_sample +
		               (tg_recomputes(p, pk) ? m->layers[l].fwd_flops_per_sample : 0)
		         : m->layers[l].fwd_flops_per_sample;
	return f;
}

/* Bytes a member of pack pk's pass pulls per sample (tensor parallelism). */
static double pack_xchg(const struct tg_model *m, const struct tg_plan *p, int pk)
{
	int lo = pk ? p->pack_end[pk - 1] : 0, hi = p->pack_end[pk];
	double b = 0;
	for (int l = lo; l < hi; l++)
		b += (double)m->layers[l].xchg_bytes_per_sample;
	return b;
}

static int is_dp(enum tg_sched s)
{
	return s == TG_DP_SWAP || s == TG_HARMONY_DP;
}

static int stage_dev(const struct tg_plan *p, int pk)
{
	return pk % p->ndev;
}

/* FWD of pack pk over microbatches k0..k0+n-1 of replica rep on device dev */
static int emit_fwd(struct bld *b, struct mstate *st, const struct tg_plan *p, int pk, int k0,
                    int n, int rep, int dev, int constrained)
{
	struct tspec s = {.kind = TG_FWD,
	                  .model = st->m->id,
	                  .pack = pk,
	                  .mb0 = k0,
	                  .nmb = n,
	                  .rep = rep,
	                  .dev = dev,
	                  .constrained = constrained,
	                  .work = -1,
	                  .step = st->step};
	int P = st->P, i = rep * P + pk;
	s.flops = pack_flops(st->m, p, pk, 0) * p->microbatch * n;
	s.xchg = pack_xchg(st->m, p, pk) * p->microbatch * n;
	s.r[s.nr++] = tg_w_of(st->mo, i, st->step);
	int tp = st->mo->tie_pack[pk];
	if (tp >= 0) {
		s.r[s.nr++] = tg_w_of(st->mo, rep * P + tp, st->step);
		if (st->lastU[wv(st, rep * P + tp)] >= 0)
			s.d[s.nd++] = st->lastU[wv(st, rep * P + tp)];
	}
	for (int k = k0; k < k0 + n; k++) {
		s.r[s.nr++] = pk ? st->B[k * P + pk - 1] : st->X[k];
		if (pk == P - 1)
			s.r[s.nr++] = st->Y[k];
		s.w[s.nw++] = st->S[k * P + pk];
		s.w[s.nw++] = st->B[k * P + pk];
		if (pk)
			s.d[s.nd++] = st->lastF[k * P + pk - 1];
	}
	if (st->lastU[wv(st, i)] >= 0)
		s.d[s.nd++] = st->lastU[wv(st, i)];
	SP_CHECK(s.work = obj_new(b, TG_O_WORK, st->m->id, pack_work(st->m, p, pk, 0)));
	s.w[s.nw++] = s.work;
	int id = task_add(b, &s);
	if (id < 0)
		return id;
	for (int k = k0; k < k0 + n; k++)
		st->lastF[k * P + pk] = id;
	return id;
}

static int emit_loss(struct bld *b, struct mstate *st, const struct tg_plan *p, int k0, int n,
                     int rep, int dev, int constrained)
{
	struct tspec s = {.kind = TG_LOSS,
	                  .model = st->m->id,
	                  .pack = st->P - 1,
	                  .mb0 = k0,
	                  .nmb = n,
	                  .rep = rep,
	                  .dev = dev,
	                  .constrained = constrained,
	                  .work = -1,
	                  .step = st->step};
	int P = st->P;
	for (int k = k0; k < k0 + n; k++) {
		s.r[s.nr++] = st->B[k * P + P - 1];
		s.r[s.nr++] = st->Y[k];
		s.w[s.nw++] = st->B[k * P + P - 1]; /* output gradient, in place */
		s.w[s.nw++] = st->L[k];             /* workspace (logits), dead after */
		s.d[s.nd++] = st->lastF[k * P + P - 1];
	}
	(void)p;
	int id = task_add(b, &s);
	if (id < 0)
		return id;
	for (int k = k0; k < k0 + n; k++)
		st->lastL[k] = id;
	return id;
}

/* Steps back to the step whose gradient version (of [rep*P+pk]) this step's
 * backwards overwrite: 2 with a version per parity, else 1. */
static int grad_lag(const struct mstate *st, int i)
{
	return st->mo->G2[i] >= 0 ? 2 : 1;
}

/* Has the step `lag` before st->step updated pack [i] (UPD emitted), or is
 * there none? What a step's passes wait for under 2BW with several steps. */
static int updated_since(const struct mstate *st, int i, int lag)
{
	return st->step - lag < 0 || st->nupdated[i] > st->step - lag;
}

static int emit_ar(struct bld *b, struct mstate *st, int pk, int rep, int dev);

static int emit_bwd(struct bld *b, struct mstate *st, const struct tg_plan *p, int pk, int k0,
                    int n, int rep, int dev, int constrained)
{
	struct tspec s = {.kind = TG_BWD,
	                  .model = st->m->id,
	                  .pack = pk,
	                  .mb0 = k0,
	                  .nmb = n,
	                  .rep = rep,
	                  .dev = dev,
	                  .constrained = constrained,
	                  .work = -1,
	                  .step = st->step};
	int P = st->P, i = rep * P + pk, g = gv(st, i), G = tg_g_of(st->mo, i, st->step);
	s.flops = pack_flops(st->m, p, pk, 1) * p->microbatch * n;
	s.xchg = pack_xchg(st->m, p, pk) * p->microbatch * n;
	/* a tie reads the tied pack's weights; the tied gradient accumulates in this
	 * pack's own G (after its layers' gradients): the tied pack's UPD adds it, so
	 * the order of accumulation never depends on the schedule */
	int tp = st->mo->tie_pack[pk];
	int acc = st->nbwd[i] % st->mo->mper != 0; /* not the step's first */
	s.r[s.nr++] = tg_w_of(st->mo, i, st->step);
	if (tp >= 0)
		s.r[s.nr++] = tg_w_of(st->mo, rep * P + tp, st->step);
	if (acc)
		s.r[s.nr++] = G;
	s.w[s.nw++] = G;
	for (int k = k0; k < k0 + n; k++) {
		s.r[s.nr++] = st->S[k * P + pk];
		s.r[s.nr++] = pk == P - 1 ? st->B[k * P + pk] : st->D[k * P + pk + 1];
		s.r[s.nr++] = pk ? st->B[k * P + pk - 1] : st->X[k];
		if (pk == P - 1)
			s.r[s.nr++] = st->Y[k];
		if (pk)
			s.w[s.nw++] = st->D[k * P + pk];
		s.d[s.nd++] = st->lastF[k * P + pk];
		s.d[s.nd++] = pk == P - 1 ? st->lastL[k] : st->lastB[k * P + pk + 1];
	}
	if (acc) {
		s.d[s.nd++] = st->lastBacc[g];
	} else if (st->step >= grad_lag(st, i)) {
		/* the first write of this version since the step that last read it:
		 * after that step's updates of this pack and of the pack tied to it
		 * (which reads the tied gradient here) */
		int j = st->step - grad_lag(st, i);
		if (!updated_since(st, i, grad_lag(st, i)) ||
		    (tp >= 0 && !updated_since(st, rep * P + tp, grad_lag(st, i))))
			return sp_error(-EINVAL,
			                "taskgraph: backward of pack %d, step %d, before the "
			                "updates of step %d (emission order)",
			                pk, st->step, j);
		s.d[s.nd++] = st->updof[j * st->nrp + i];
		if (tp >= 0)
			s.d[s.nd++] = st->updof[j * st->nrp + rep * P + tp];
	}
	SP_CHECK(s.work = obj_new(b, TG_O_WORK, st->m->id, pack_work(st->m, p, pk, 1)));
	s.w[s.nw++] = s.work;
	int id = task_add(b, &s);
	if (id < 0)
		return id;
	for (int k = k0; k < k0 + n; k++)
		st->lastB[k * P + pk] = id;
	st->lastBacc[g] = id;
	st->nbwd[i] += n;
	if (st->cross_ar && st->nbwd[i] % st->mo->mper == 0) {
		int ar = emit_ar(b, st, pk, rep, dev);
		if (ar < 0)
			return ar;
	}
	return id;
}

static int emit_ar(struct bld *b, struct mstate *st, int pk, int rep, int dev)
{
	struct tspec s = {.kind = TG_ALLREDUCE,
	                  .model = st->m->id,
	                  .pack = pk,
	                  .rep = rep,
	                  .dev = dev,
	                  .constrained = 1,
	                  .work = -1,
	                  .root = -1,
	                  .step = st->step};
	int P = st->P, i = rep * P + pk, G = tg_g_of(st->mo, i, st->step);
	s.r[s.nr++] = G;
	s.w[s.nw++] = G;
	for (int r = 0; r < st->mo->nrep; r++)
		s.d[s.nd++] = st->lastBacc[gv(st, r * P + pk)];
	int id = task_add(b, &s);
	if (id >= 0)
		st->lastAR[gv(st, i)] = id;
	return id;
}

/* Pack [i]'s gradient of this step is final (its chain and all-reduce): the
 * dependency a reader of it takes. */
static int final_grad(const struct mstate *st, int i)
{
	int g = gv(st, i);
	return st->lastAR[g] >= 0 && st->lastAR[g] > st->lastBacc[g] ? st->lastAR[g]
	                                                             : st->lastBacc[g];
}

/* The packs tied to pk hold its tied gradients: s reads them after their
 * accumulation (and all-reduce) ends. */
static void read_tied_grads(struct tspec *s, const struct mstate *st, int pk, int rep)
{
	for (int q = 0; q < st->P; q++) {
		int j = rep * st->P + q;
		if (q == pk || st->mo->tie_pack[q] != pk)
			continue;
		s->r[s->nr++] = tg_g_of(st->mo, j, st->step);
		s->d[s->nd++] = final_grad(st, j);
	}
}

static int emit_norm(struct bld *b, struct mstate *st, const struct tg_plan *p, int pk, int rep,
                     int dev)
{
	struct tspec s = {.kind = TG_NORM,
	                  .model = st->m->id,
	                  .pack = pk,
	                  .rep = rep,
	                  .dev = p->upd_cpu ? -1 : dev,
	                  .constrained = 1,
	                  .work = -1,
	                  .step = st->step};
	int P = st->P, i = rep * P + pk, n = tg_n_of(st->mo, rep, st->step);
	int G = tg_g_of(st->mo, i, st->step), c = st->nnorm[nv(st, rep)], first = c % P == 0;
	/* a step's norms are one chain: those of the last step of its version are
	 * done (steps of both versions may interleave) */
	if (c / P != (st->mo->N2[rep] >= 0 ? st->step / 2 : st->step))
		return sp_error(-EINVAL,
		                "taskgraph: norm of pack %d, step %d, among those of another "
		                "step (emission order)",
		                pk, st->step);
	s.r[s.nr++] = G;
	s.w[s.nw++] = G;
	s.d[s.nd++] = final_grad(st, i);
	read_tied_grads(&s, st, pk, rep);
	if (!first) {
		s.r[s.nr++] = n;
		s.d[s.nd++] = st->lastN[nv(st, rep)];
	} else {
		/* the first write of this norm version since the step whose updates
		 * read it: after all of them */
		int lag = st->mo->N2[rep] >= 0 ? 2 : 1, j = st->step - lag;
		for (int q = 0; q < P && j >= 0; q++) {
			if (!updated_since(st, rep * P + q, lag))
				return sp_error(-EINVAL,
				                "taskgraph: norm of step %d before the update of "
				                "pack %d, step %d (emission order)",
				                st->step, q, j);
			s.d[s.nd++] = st->updof[j * st->nrp + rep * P + q];
		}
	}
	s.w[s.nw++] = n;
	int id = task_add(b, &s);
	if (id >= 0) {
		st->lastN[nv(st, rep)] = id;
		st->nnorm[nv(st, rep)]++;
	}
	return id;
}

/* With norms, UPD[rep,pk] becomes NORM[rep,pk] here and the UPD is owed until
 * every NORM of its replica (this step's) is emitted; then the replica's owed
 * UPDs follow at once (emit_owed_upds), not after every replica's NORMs: a
 * replica's gradients wait for its own norm only (with the update on the CPU,
 * holding back every replica's made them all meet in the host pool). */
static int emit_upd_now(struct bld *b, struct mstate *st, const struct tg_plan *p, int pk, int rep,
                        int dev);

static int emit_owed_upds(struct bld *b, struct mstate *st, const struct tg_plan *p, int rep)
{
	int kept = 0, step = st->step;
	for (int n = 0; n < st->nupd; n++) {
		if (st->upd_rep[n] != rep || st->upd_step[n] != step) {
			st->upd_pk[kept] = st->upd_pk[n];
			st->upd_rep[kept] = st->upd_rep[n];
			st->upd_dev[kept] = st->upd_dev[n];
			st->upd_step[kept++] = st->upd_step[n];
			continue;
		}
		int rc = emit_upd_now(b, st, p, st->upd_pk[n], rep, st->upd_dev[n]);
		if (rc < 0)
			return rc;
	}
	st->nupd = kept;
	return 0;
}

static int emit_upd(struct bld *b, struct mstate *st, const struct tg_plan *p, int pk, int rep,
                    int dev)
{
	if (!st->m->norm_bytes)
		return emit_upd_now(b, st, p, pk, rep, dev);
	int n = st->nupd++;
	st->upd_pk[n] = pk;
	st->upd_rep[n] = rep;
	st->upd_dev[n] = dev;
	st->upd_step[n] = st->step;
	int id = emit_norm(b, st, p, pk, rep, dev);
	if (id >= 0 && st->nnorm[nv(st, rep)] % st->P == 0) {
		int rc = emit_owed_upds(b, st, p, rep);
		if (rc < 0)
			return rc;
	}
	return id;
}

/* ZeRO-1: after pack pk's UPD (the owner's update; a no-op elsewhere) its
 * weights go from the owner to every other node, one member per replica. */
static int emit_wbcast(struct bld *b, struct mstate *st, const struct tg_plan *p, int pk, int rep,
                       int dev, int w)
{
	int i = rep * st->P + pk, v = wv(st, i);
	if (!p->zero || p->nodes <= 1)
		return st->lastU[v];
	struct tspec s = {.kind = TG_ALLREDUCE,
	                  .model = st->m->id,
	                  .pack = pk,
	                  .rep = rep,
	                  .dev = dev < 0 ? rep : dev,
	                  .constrained = 1,
	                  .work = -1,
	                  .root = tg_pack_owner(p, pk),
	                  .step = st->step};
	s.r[s.nr++] = w; /* the newest version */
	s.w[s.nw++] = w;
	s.d[s.nd++] = st->lastU[v];
	int id = task_add(b, &s);
	if (id >= 0)
		st->lastU[v] = id; /* the weights' last writer */
	return id;
}

static int emit_upd_now(struct bld *b, struct mstate *st, const struct tg_plan *p, int pk, int rep,
                        int dev)
{
	struct tspec s = {.kind = TG_UPD,
	                  .model = st->m->id,
	                  .pack = pk,
	                  .rep = rep,
	                  .dev = p->upd_cpu ? -1 : dev,
	                  .constrained = 1,
	                  .work = -1,
	                  .step = st->step};
	int P = st->P, i = rep * P + pk, G = tg_g_of(st->mo, i, st->step);
	s.flops = 0;
	for (int l = pk ? p->pack_end[pk - 1] : 0; l < p->pack_end[pk]; l++)
		s.flops += st->m->layers[l].upd_flops;
	/* 2BW, one step a program: the step is Wnew's; W, the version the passes
	 * read, becomes a copy of Wnew before it. W is read too, though the copy
	 * overwrites it: as a pure write it was dead after the last BWD and
	 * discarded, so a step that failed at its UPD left the next try's passes
	 * no weights to read. Several steps a program: the step is this step's
	 * version's (which the next step but one reads), made from a copy of the
	 * other version (the newest, which the next step reads): read, not
	 * written. */
	int par = st->mo->nstep > 1;
	int w = par ? tg_w_of(st->mo, i, st->step) : st->Wnew[i] >= 0 ? st->Wnew[i] : st->W[i];
	int other = par ? tg_w_of(st->mo, i, st->step + 1) : st->W[i];
	s.r[s.nr++] = w;
	s.r[s.nr++] = G;
	s.r[s.nr++] = st->O[i];
	if (other != w)
		s.r[s.nr++] = other;
	s.w[s.nw++] = w;
	s.w[s.nw++] = st->O[i];
	if (other != w && !par)
		s.w[s.nw++] = other;
	int ov = wv(st, i) == i ? st->nrp + i : i; /* the other version's entry */
	if (par && st->lastU[ov] >= 0)             /* the update that made it */
		s.d[s.nd++] = st->lastU[ov];
	if (st->m->norm_bytes) { /* its NORM added the tied gradients */
		s.r[s.nr++] = tg_n_of(st->mo, rep, st->step);
		s.d[s.nd++] = st->lastN[nv(st, rep)];
	} else {
		s.d[s.nd++] = final_grad(st, i);
		read_tied_grads(&s, st, pk, rep);
		/* every reader of W this step precedes it through the accumulation chain */
	}
	int id = task_add(b, &s);
	if (id < 0)
		return id;
	st->lastU[wv(st, i)] = id;
	st->updof[st->step * st->nrp + i] = id;
	st->nupdated[i]++;
	return emit_wbcast(b, st, p, pk, rep, dev, w);
}

/* Pipeline schedules over units of `unit` microbatches, pack pk on GPU pk mod N.
 * Each pack has a desired sequence of 2 x units tasks — GPipe: all forwards, then
 * all backwards; 1F1B: P-1-pk warm-up forwards, then one forward / one backward,
 * then the cool-down backwards — emitted in a topological interleaving (a sweep
 * over the packs emits each one's next task once its inputs exist), so the
 * per-GPU sequences merge the packs they hold. jit: a pack's UPD right after its
 * last BWD (Harmony); otherwise all UPDs at the flush.
 * 2BW with several steps a program (nstep > 1): one 1F1B order over the
 * microbatches of every step, each step's UPD of a pack right after its last
 * BWD of the step; a pass waits, besides its inputs, for the update that made
 * its weight version (two steps before) and, the first backward of a step,
 * for the updates that read its gradient version last. The warm-up is at most
 * a step's microbatches: a forward of step j+1 then follows the backward of
 * step j-1's last microbatch (and so UPD_{j-1}, which made its weights). */
static int emit_pipeline(struct bld *b, struct mstate *st, const struct tg_plan *p, int unit,
                         int jit)
{
	int nstep = st->mo->nstep, mper = st->mo->mper;
	int P = st->P, nu = nstep * mper / unit, done = 0, total = 2 * P * nu, rc = 0;
	if (nstep > 1)
		jit = 1; /* unit is 1 */
	int *pos = calloc((size_t)P, sizeof(int));
	if (!pos)
		return sp_error(-ENOMEM, "taskgraph: pipeline state of %d packs", P);
	while (done < total && !rc) {
		int progressed = 0;
		for (int pk = 0; pk < P && !rc; pk++) {
			int i = pos[pk], fwd, u;
			if (i >= 2 * nu)
				continue;
			int w = p->sched == TG_GPIPE ? nu : (P - 1 - pk < nu ? P - 1 - pk : nu);
			if (nstep > 1 && w > mper)
				w = mper;
			if (i < w) {
				fwd = 1;
				u = i;
			} else if (i - w < 2 * (nu - w)) {
				int r = i - w; /* steady state: F, B alternate */
				fwd = r % 2 == 0;
				u = fwd ? w + r / 2 : r / 2;
			} else {
				fwd = 0;
				u = i - nu;
			}
			int k = u * unit, dev = stage_dev(p, pk);
			int ok = fwd ? (pk == 0 || st->lastF[k * P + pk - 1] >= 0)
			             : (st->lastF[k * P + pk] >= 0 &&
			                (pk == P - 1 ? st->lastL[k] >= 0
			                             : st->lastB[k * P + pk + 1] >= 0));
			st->step = k / mper;
			int tp = st->mo->tie_pack[pk];
			if (ok && nstep > 1 && fwd) /* its weight version is made */
				ok = updated_since(st, pk, 2) &&
				     (tp < 0 || updated_since(st, tp, 2));
			if (ok && nstep > 1 && !fwd && k % mper == 0) { /* its gradient is free */
				int lag = grad_lag(st, pk);
				ok = updated_since(st, pk, lag) &&
				     (tp < 0 || updated_since(st, tp, lag));
			}
			if (!ok)
				continue;
			rc = fwd ? emit_fwd(b, st, p, pk, k, unit, 0, dev, 1)
			         : emit_bwd(b, st, p, pk, k, unit, 0, dev, 1);
			if (rc >= 0 && fwd && pk == P - 1)
				rc = emit_loss(b, st, p, k, unit, 0, dev, 1);
			if (rc >= 0 && !fwd && jit &&
			    (nstep > 1 ? (k + 1) % mper == 0 : i + 1 == 2 * nu))
				rc = emit_upd(b, st, p, pk, 0, dev);
			rc = rc < 0 ? rc : 0;
			pos[pk]++;
			done++;
			progressed = 1;
		}
		if (!rc && !progressed)
			rc = sp_error(-EINVAL,
			              "taskgraph: pipeline order deadlocks (%d of %d emitted)",
			              done, total);
	}
	for (int pk = 0; pk < P && !rc && !jit; pk++) {
		rc = emit_upd(b, st, p, pk, 0, stage_dev(p, pk));
		rc = rc < 0 ? rc : 0;
	}
	free(pos);
	return rc;
}

/* Interleaved 1F1B: device d's sequence (Megatron-LM's
 * forward_backward_pipelining_with_interleaving): forwards walk the
 * microbatches in groups of ndev, each group through chunk 0, 1, ..., v-1
 * (chunk c of device d is pack c * ndev + d); backwards the same groups
 * through the chunks in reverse; the first (ndev - d - 1) * 2 + (v - 1) *
 * ndev forwards run alone (warm-up), then forward and backward alternate,
 * then the last backwards. Megatron needs packs and microbatches that are
 * multiples of the devices; here the order is built for the model padded to
 * v * ndev packs and the microbatches to whole groups, then the padding is
 * dropped: the padded schedule is deadlock-free and every dependency between
 * real tasks holds there too (padding only lengthens chains), so the real
 * tasks in that order are a valid order. (Dropping the padding first and
 * counting the warm-up in real tasks deadlocked: 6 packs on 4 devices.) The
 * devices' sequences are emitted by a sweep that takes each device's next
 * task once its inputs exist, as emit_pipeline does per pack. */
struct ilv_item {
	int fwd, pk, k;
};

/* Device d's sequence into out (room for 6 * v * ndev * mpad items: the
 * result, then scratch); returns its length. */
static int ilv_order(const struct tg_plan *p, int P, int m, int d, struct ilv_item *out)
{
	int nd = p->ndev, v = (P + nd - 1) / nd, mpad = (m + nd - 1) / nd * nd;
	size_t cap = (size_t)v * nd * mpad;
	struct ilv_item *f = out + 2 * cap, *bw = out + 3 * cap, *seq = out + 4 * cap;
	int nf = 0, nb = 0, n = 0;
	for (int g = 0; g < mpad; g += nd)
		for (int c = 0; c < v; c++)
			for (int k = g; k < g + nd; k++) {
				f[nf++] = (struct ilv_item){1, c * nd + d, k};
				bw[nb++] = (struct ilv_item){0, (v - 1 - c) * nd + d, k};
			}
	int warm = (nd - d - 1) * 2 + (v - 1) * nd, i = 0, j = 0;
	if (warm > nf)
		warm = nf;
	for (; i < warm; i++)
		seq[n++] = f[i];
	while (i < nf || j < nb) {
		if (i < nf)
			seq[n++] = f[i++];
		if (j < nb)
			seq[n++] = bw[j++];
	}
	int real = 0;
	for (int x = 0; x < n; x++)
		if (seq[x].pk < P && seq[x].k < m)
			out[real++] = seq[x];
	return real;
}

static int emit_interleaved(struct bld *b, struct mstate *st, const struct tg_plan *p)
{
	int P = st->P, m = st->mo->mper, nd = p->ndev, rc = 0, total = 0, done = 0;
	int v = (P + nd - 1) / nd, mpad = (m + nd - 1) / nd * nd;
	size_t per = (size_t)6 * v * nd * mpad; /* ilv_order's room */
	struct ilv_item *seq = malloc((size_t)nd * per * sizeof(*seq));
	int *len = calloc((size_t)nd, sizeof(int)), *pos = calloc((size_t)nd, sizeof(int));
	if (!seq || !len || !pos) {
		rc = sp_error(-ENOMEM, "taskgraph: interleaved order of %d packs x %d microbatches",
		              P, m);
		goto out;
	}
	for (int d = 0; d < nd; d++)
		total += len[d] = ilv_order(p, P, m, d, seq + (size_t)d * per);
	while (done < total && !rc) {
		int progressed = 0;
		for (int d = 0; d < nd && !rc; d++) {
			if (pos[d] >= len[d])
				continue;
			const struct ilv_item *it = &seq[(size_t)d * per + (size_t)pos[d]];
			int k = it->k, pk = it->pk;
			int ok = it->fwd ? (pk == 0 || st->lastF[k * P + pk - 1] >= 0)
			                 : (st->lastF[k * P + pk] >= 0 &&
			                    (pk == P - 1 ? st->lastL[k] >= 0
			                                 : st->lastB[k * P + pk + 1] >= 0));
			if (!ok)
				continue;
			rc = it->fwd ? emit_fwd(b, st, p, pk, k, 1, 0, d, 1)
			             : emit_bwd(b, st, p, pk, k, 1, 0, d, 1);
			if (rc >= 0 && it->fwd && pk == P - 1)
				rc = emit_loss(b, st, p, k, 1, 0, d, 1);
			rc = rc < 0 ? rc : 0;
			pos[d]++;
			done++;
			progressed = 1;
		}
		if (!rc && !progressed)
			rc = sp_error(-EINVAL,
			              "taskgraph: interleaved order deadlocks (%d of %d emitted; "
			              "%d packs, %d devices, %d microbatches)",
			              done, total, P, nd, m);
	}
	for (int pk = 0; pk < P && !rc; pk++) {
		rc = emit_upd(b, st, p, pk, 0, stage_dev(p, pk));
		rc = rc < 0 ? rc : 0;
	}
out:
	free(seq);
	free(len);
	free(pos);
	return rc;
}

static int validate_input(const struct tg_model *models, int nmodels, const struct tg_plan *p)
{
	SP_CHECK_ARG(models && nmodels > 0, "taskgraph: no models (nmodels = %d)", nmodels);
	SP_CHECK_ARG(p->ndev > 0, "taskgraph: devices = %d, need at least 1", p->ndev);
	SP_CHECK_ARG(p->sched >= 0 && p->sched < TG_NSCHED, "taskgraph: schedule %d unknown",
	             (int)p->sched);
	SP_CHECK_ARG(p->microbatch > 0, "taskgraph: microbatch = %d, need > 0", p->microbatch);
	SP_CHECK_ARG(p->npacks > 0 && p->npacks <= TG_MAX_PACKS,
	             "taskgraph: npacks = %d, need 1..%d", p->npacks, TG_MAX_PACKS);
	SP_CHECK_ARG(p->flush_every >= 0 && p->flush_every <= TG_MAX_FLUSH_EVERY,
	             "taskgraph: flush every %d steps, need 0..%d (0, 1: every step)",
	             p->flush_every, TG_MAX_FLUSH_EVERY);
	SP_CHECK_ARG(p->flush_every <= 1 || p->sched == TG_2BW,
	             "taskgraph: flush every %d steps: only 2bw runs steps without a flush "
	             "between them (%s flushes every step)",
	             p->flush_every, tg_sched_name(p->sched));
	for (int i = 0; i < nmodels; i++) {
		const struct tg_model *m = &models[i];
		SP_CHECK_ARG(m->nlayers > 0, "taskgraph: model %d has zero layers", m->id);
		SP_CHECK_ARG(p->pack_end[p->npacks - 1] == m->nlayers,
		             "taskgraph: packs cover %d layers, model %d has %d",
		             p->pack_end[p->npacks - 1], m->id, m->nlayers);
		for (int k = 0; k < p->npacks; k++)
			SP_CHECK_ARG(p->pack_end[k] > (k ? p->pack_end[k - 1] : 0),
			             "taskgraph: pack %d is empty or out of order (ends at %d)", k,
			             p->pack_end[k]);
		for (int l = 0; l < m->nlayers; l++)
			SP_CHECK_ARG(!m->layers[l].tied || (m->layers[l].tied_layer >= 0 &&
			                                    m->layers[l].tied_layer < l),
			             "taskgraph: layer %d of model %d is tied to layer %d, need an "
			             "earlier layer (0..%d)",
			             l, m->id, m->layers[l].tied_layer, l - 1);
		int per = is_dp(p->sched) ? p->ndev * p->microbatch : p->microbatch;
		SP_CHECK_ARG(
		    m->batch >= per && m->batch % per == 0,
		    "taskgraph: batch %d of model %d is not a multiple of %d (microbatch %d%s)",
		    m->batch, m->id, per, p->microbatch, is_dp(p->sched) ? " x devices" : "");
		int mm = m->batch / per;
		int grp = (p->sched == TG_HARMONY_DP || p->sched == TG_HARMONY_PP) ? p->group : 1;
		SP_CHECK_ARG(grp > 0 && grp <= mm,
		             "taskgraph: group %d larger than the %d microbatches per %s "
		             "(by %d)",
		             grp, mm, is_dp(p->sched) ? "device" : "iteration", grp - mm);
		SP_CHECK_ARG(grp <= TG_MAX_GROUP, "taskgraph: group %d above the limit %d", grp,
		             TG_MAX_GROUP);
		SP_CHECK_ARG(mm % grp == 0, "taskgraph: group %d does not divide %d microbatches",
		             grp, mm);
	}
	return 0;
}

static int build_model(struct bld *b, const struct tg_model *m, const struct tg_plan *p)
{
	int rc = 0, P = p->npacks, N = p->ndev;
	struct tg_model_objs *mo = &b->g->mobj[b->g->nmodels];
	struct mstate st = {.m = m, .mo = mo, .P = P};
	int dp = is_dp(p->sched);
	int nrep = dp ? N : 1;
	int mper = m->batch / (dp ? N * p->microbatch : p->microbatch);
	int nmb = mper * nrep;
	int nstep = p->sched == TG_2BW && p->flush_every > 1 ? p->flush_every : 1;
	*mo = (struct tg_model_objs){
	    .id = m->id, .P = P, .nrep = nrep, .nmb = nmb, .mper = mper, .nstep = nstep};
	b->g->m = mper;
	b->g->npacks = P;
	/* per microbatch of every step */
	int nrp = nrep * P, nk = nmb * nstep, nkp = nk * P;
	st.nrp = nrp;
	st.nrep = nrep;
	/* the table is the graph's (freed with it from here on); lastX are ours */
	int *blk = malloc(
	    ((size_t)P + (size_t)nrp * 5 + (size_t)nkp * 3 + (size_t)nk * 3 + (size_t)nrep * 2) *
	    sizeof(int));
	size_t nlast =
	    (size_t)nkp * 2 + (size_t)nk + (size_t)nrp * 6 + (size_t)nrep * 2 + (size_t)nstep * nrp;
	st.lastF = malloc(nlast * sizeof(int));
	st.upd_pk = malloc(((size_t)nrp * 8 + (size_t)nrep * 2) * sizeof(int));
	st.nbwd = calloc((size_t)nrp * 2, sizeof(int));
	/* DP schedules place their own ALLREDUCEs (one member per replica) */
	st.cross_ar = p->nodes > 1 && !dp;
	if (!blk || !st.lastF || !st.upd_pk || !st.nbwd) {
		free(blk);
		rc = sp_error(-ENOMEM, "taskgraph: state for %d packs x %d microbatches", P, nk);
		goto out;
	}
	mo->tie_pack = blk;
	mo->W = mo->tie_pack + P;
	mo->G = mo->W + nrp;
	mo->O = mo->G + nrp;
	mo->S = mo->O + nrp;
	mo->B = mo->S + nkp;
	mo->D = mo->B + nkp;
	mo->X = mo->D + nkp;
	mo->Y = mo->X + nk;
	mo->L = mo->Y + nk;
	mo->N = mo->L + nk;
	mo->Wnew = mo->N + nrep;
	mo->G2 = mo->Wnew + nrp;
	mo->N2 = mo->G2 + nrp;
	b->g->nmodels++;
	st.upd_rep = st.upd_pk + nrp * 2;
	st.upd_dev = st.upd_rep + nrp * 2;
	st.upd_step = st.upd_dev + nrp * 2;
	st.nnorm = st.upd_step + nrp * 2;
	memset(st.nnorm, 0, (size_t)nrep * 2 * sizeof(int));
	st.nupdated = st.nbwd + nrp;
	st.W = mo->W;
	st.G = mo->G;
	st.O = mo->O;
	st.Wnew = mo->Wnew;
	st.S = mo->S;
	st.B = mo->B;
	st.D = mo->D;
	st.X = mo->X;
	st.Y = mo->Y;
	st.L = mo->L;
	st.lastB = st.lastF + nkp;
	st.lastL = st.lastB + nkp;
	st.lastBacc = st.lastL + nk;
	st.lastAR = st.lastBacc + nrp * 2;
	st.lastU = st.lastAR + nrp * 2;
	st.lastN = st.lastU + nrp * 2;
	st.updof = st.lastN + nrep * 2;
	for (size_t i = 0; i < nlast; i++)
		st.lastF[i] = -1;
	for (int pk = 0, lo = 0; pk < P; lo = p->pack_end[pk++]) {
		mo->tie_pack[pk] = -1;
		for (int l = lo; l < p->pack_end[pk]; l++) {
			if (!m->layers[l].tied || m->layers[l].tied_layer >= lo)
				continue; /* untied, or tied inside the pack */
			int tp = 0;
			while (p->pack_end[tp] <= m->layers[l].tied_layer)
				tp++;
			if (mo->tie_pack[pk] >= 0 && mo->tie_pack[pk] != tp) {
				rc = sp_error(
				    -EINVAL,
				    "taskgraph: pack %d of model %d ties to packs %d and %d "
				    "(layer %d); a pack may tie to one other pack",
				    pk, m->id, mo->tie_pack[pk], tp, l);
				goto out;
			}
			mo->tie_pack[pk] = tp;
		}
	}
#define OBJ(dst, kind, bytes)                                           \
	do {                                                            \
		if (((dst) = obj_new(b, (kind), m->id, (bytes))) < 0) { \
			rc = (dst);                                     \
			goto out;                                       \
		}                                                       \
	} while (0)
	for (int i = 0; i < nrp; i++) {
		int pk = i % P;
		OBJ(st.W[i], TG_O_WEIGHT, pack_sum(m, p, pk, 0));
		OBJ(st.G[i], TG_O_GRAD, pack_sum(m, p, pk, 1));
		OBJ(st.O[i], TG_O_OPT, tg_owns_pack(p, pk) ? pack_sum(m, p, pk, 2) : 0);
		st.Wnew[i] = -1;
		if (p->sched == TG_2BW)
			OBJ(st.Wnew[i], TG_O_WEIGHT, pack_sum(m, p, pk, 0));
		/* read by another pack's update (a tie) or by a norm: by parity */
		int tied_to = mo->tie_pack[pk] >= 0;
		mo->G2[i] = -1;
		if (nstep > 1 && (tied_to || m->norm_bytes))
			OBJ(mo->G2[i], TG_O_GRAD, pack_sum(m, p, pk, 1));
	}
	for (int r = 0; r < nrep; r++) {
		mo->N[r] = mo->N2[r] = -1;
		if (m->norm_bytes)
			OBJ(mo->N[r], TG_O_GRAD, m->norm_bytes);
		if (m->norm_bytes && nstep > 1)
			OBJ(mo->N2[r], TG_O_GRAD, m->norm_bytes);
	}
	uint64_t mb = (uint64_t)p->microbatch;
	for (int k = 0; k < nk; k++) {
		OBJ(st.X[k], TG_O_INPUT, m->in_bytes_per_sample * mb);
		OBJ(st.Y[k], TG_O_INPUT, m->target_bytes_per_sample * mb);
		OBJ(st.L[k], TG_O_WORK, m->loss_bytes_per_sample * mb);
		for (int pk = 0; pk < P; pk++) {
			uint64_t stash = tg_recomputes(p, pk) ? 0 : pack_stash(m, p, pk) * mb;
			OBJ(st.S[k * P + pk], TG_O_STASH, stash);
			OBJ(st.B[k * P + pk], TG_O_BOUNDARY, pack_sum(m, p, pk, 4) * mb);
			uint64_t din = pk ? pack_sum(m, p, pk - 1, 4) * mb : 0;
			OBJ(st.D[k * P + pk], TG_O_BOUNDARY, din);
		}
	}
#undef OBJ
	int g = (p->sched == TG_HARMONY_DP || p->sched == TG_HARMONY_PP) ? p->group : 1;
#define E(call)                   \
	do {                      \
		int e_ = (call);  \
		if (e_ < 0) {     \
			rc = e_;  \
			goto out; \
		}                 \
	} while (0)
	switch (p->sched) {
	case TG_DP_SWAP:
	case TG_HARMONY_DP:
		/* FWD, LOSS and BWD may be bound late (constrained = 0): any GPU that can
		 * reach the replica's W and G may run them (Harmony's late binding); dev
		 * is the replica's GPU, the placement the predictions assume. ALLREDUCE
		 * and UPD stay on the replica's GPU: the collective has one rank there. */
		for (int d = 0; d < N; d++) {
			for (int j = 0; j < mper; j += g) {
				int k0 = d * mper + j, last = j + g >= mper;
				for (int pk = 0; pk < P; pk++)
					E(emit_fwd(b, &st, p, pk, k0, g, d, d, 0));
				E(emit_loss(b, &st, p, k0, g, d, d, 0));
				if (last && p->sched == TG_HARMONY_DP)
					break; /* last group's backward is interleaved with JIT AR/UPD below */
				for (int pk = P - 1; pk >= 0; pk--)
					E(emit_bwd(b, &st, p, pk, k0, g, d, d, 0));
			}
		}
		if (p->sched == TG_HARMONY_DP) {
			for (int pk = P - 1; pk >= 0; pk--) {
				for (int d = 0; d < N; d++)
					E(emit_bwd(b, &st, p, pk, d * mper + mper - g, g, d, d, 0));
				for (int d = 0; d < N; d++) {
					E(emit_ar(b, &st, pk, d, d));
					E(emit_upd(b, &st, p, pk, d, d));
				}
			}
		} else {
			for (int pk = P - 1; pk >= 0; pk--)
				for (int d = 0; d < N; d++)
					E(emit_ar(b, &st, pk, d, d));
			for (int pk = 0; pk < P; pk++)
				for (int d = 0; d < N; d++)
					E(emit_upd(b, &st, p, pk, d, d));
		}
		break;
	case TG_GPIPE:
	case TG_1F1B:
	case TG_2BW: E(emit_pipeline(b, &st, p, 1, 0)); break;
	case TG_INTERLEAVED: E(emit_interleaved(b, &st, p)); break;
	case TG_HARMONY_PP:
		/* the same pipeline with groups as its units (weights come in once per
		 * group) and each pack's update just in time */
		E(emit_pipeline(b, &st, p, g, 1));
		break;
	default: break;
	}
	if (st.nupd) /* every replica's owed UPDs follow its last NORM */
		E(sp_error(-EINVAL, "taskgraph: %d updates owed at the end", st.nupd));
#undef E
out:
	free(st.lastF);
	free(st.upd_pk);
	free(st.nbwd);
	return rc;
}

/* Interleaves per-device sequences by list scheduling with unit costs (FWD/BWD
 * FLOPs; other tasks free), producing the global order, makespan, bubble and
 * peak live stash count. */
static int order_build(struct bld *b)
{
	struct tg_graph *g = b->g;
	int nq = g->ndev + 1, rc = 0;
	double *end = calloc((size_t)g->ntask, sizeof(double)),
	       *clk = calloc((size_t)nq, sizeof(double));
	double *busy = calloc((size_t)nq, sizeof(double));
	int *pos = calloc((size_t)nq, sizeof(int)), *done = calloc((size_t)g->ntask, sizeof(int));
	int *live = calloc((size_t)nq, sizeof(int));
	g->order = malloc((size_t)g->ntask * sizeof(int) + 1);
	if (!end || !clk || !pos || !done || !g->order || !busy || !live) {
		rc = sp_error(-ENOMEM, "taskgraph: order of %d tasks", g->ntask);
		goto out;
	}
	g->peak_stash = 0;
	for (int n = 0; n < g->ntask; n++) {
		int bq = -1;
		double bst = 0;
		for (int q = 0; q < nq; q++) {
			if (pos[q] >= b->seqn[q])
				continue;
			struct tg_task *t = &g->task[b->seq[q][pos[q]]];
			double st = clk[q];
			int ok = 1;
			for (int i = 0; i < t->ndep; i++) {
				if (!done[t->dep[i]]) {
					ok = 0;
					break;
				}
				if (end[t->dep[i]] > st)
					st = end[t->dep[i]];
			}
			if (ok && (bq < 0 || st < bst)) {
				bq = q;
				bst = st;
			}
		}
		if (bq < 0) {
			rc = sp_error(-EINVAL,
			              "taskgraph: per-device orders deadlock after %d of %d tasks",
			              n, g->ntask);
			goto out;
		}
		struct tg_task *t = &g->task[b->seq[bq][pos[bq]++]];
		double dur =
		    (t->kind == TG_FWD || t->kind == TG_BWD || t->kind == TG_UPD) ? t->flops : 0;
		end[t->id] = bst + dur;
		clk[bq] = end[t->id];
		busy[bq] += dur;
		done[t->id] = 1;
		g->order[n] = t->id;
		if (t->kind == TG_FWD)
			live[bq] += t->nmb;
		if (t->kind == TG_BWD)
			live[bq] -= t->nmb;
		if (t->kind == TG_FWD && live[bq] > g->peak_stash && bq < g->ndev && t->pack == 0)
			g->peak_stash = live[bq];
	}
	g->makespan_units = 0;
	g->busy_units = 0;
	for (int q = 0; q < g->ndev; q++) {
		if (clk[q] > g->makespan_units)
			g->makespan_units = clk[q];
		if (busy[q] > g->busy_units)
			g->busy_units = busy[q];
	}
	g->bubble = g->busy_units > 0 ? (g->makespan_units - g->busy_units) / g->busy_units : 0;
out:
	free(end);
	free(clk);
	free(busy);
	free(pos);
	free(done);
	free(live);
	return rc;
}

/* One table of a model's objects, widened: member r's ids (o * tp + r) at r
 * times its length; -1 stays -1. */
static int *widen_table(int *dst, const int *src, long len, int tp)
{
	for (int r = 0; r < tp; r++)
		for (long i = 0; i < len; i++)
			dst[r * len + i] = src[i] < 0 ? -1 : src[i] * tp + r;
	return dst + (long)tp * len;
}

/* plan.tp > 1: every task and object of g becomes tp members (task i's
 * member r is i * tp + r, on device dev * tp + r; object o's is o * tp + r),
 * each member's reads, writes and dependencies its own members'; the global
 * order lists each task's members together. */
static int widen(struct tg_graph *g, int tp)
{
	int T = g->ntask, O = g->nobj;
	struct tg_task *task = malloc((size_t)T * tp * sizeof(*task));
	struct tg_obj *obj = malloc((size_t)O * tp * sizeof(*obj));
	int *pool = malloc((size_t)g->pool_len * tp * sizeof(int) + 1);
	int *order = malloc((size_t)T * tp * sizeof(int) + 1);
	int **blk = calloc((size_t)g->nmodels + 1, sizeof(int *));
	int rc = 0;
	if (!task || !obj || !pool || !order || !blk) {
		rc = sp_error(-ENOMEM, "taskgraph: %d tasks x %d tensor-parallel members", T, tp);
		goto fail;
	}
	for (int m = 0; m < g->nmodels; m++) {
		const struct tg_model_objs *mo = &g->mobj[m];
		long nrp = (long)mo->nrep * mo->P, nk = (long)mo->nmb * mo->nstep, nkp = nk * mo->P;
		blk[m] = malloc(((size_t)mo->P +
		                 (size_t)tp * (nrp * 5 + nkp * 3 + nk * 3 + (long)mo->nrep * 2)) *
		                sizeof(int));
		if (!blk[m]) {
			rc = sp_error(-ENOMEM, "taskgraph: tables of model %d x %d members", mo->id,
			              tp);
			goto fail;
		}
	}
	for (int o = 0; o < O; o++)
		for (int r = 0; r < tp; r++)
			obj[o * tp + r] = g->obj[o];
	int len = 0;
	for (int i = 0; i < T; i++) {
		const struct tg_task *t = &g->task[i];
		int n = t->nread + t->nwrite;
		for (int r = 0; r < tp; r++) {
			struct tg_task *w = &task[i * tp + r];
			*w = *t;
			w->id = i * tp + r;
			w->member = r;
			w->tp_set = t->kind == TG_FWD || t->kind == TG_BWD ? i : -1;
			w->dev = t->dev < 0 ? t->dev : t->dev * tp + r;
			w->work = t->work < 0 ? -1 : t->work * tp + r;
			w->read = pool + len;
			w->write = w->read + t->nread;
			w->dep = w->write + t->nwrite;
			for (int j = 0; j < n; j++)
				w->read[j] = t->read[j] * tp + r;
			for (int j = 0; j < t->ndep; j++)
				w->dep[j] = t->dep[j] * tp + r;
			len += n + t->ndep;
		}
	}
	for (int k = 0; k < T; k++)
		for (int r = 0; r < tp; r++)
			order[k * tp + r] = g->order[k] * tp + r;
	for (int m = 0; m < g->nmodels; m++) {
		struct tg_model_objs *mo = &g->mobj[m];
		long nrp = (long)mo->nrep * mo->P, nk = (long)mo->nmb * mo->nstep, nkp = nk * mo->P;
		int *b = blk[m];
		memcpy(b, mo->tie_pack, (size_t)mo->P * sizeof(int));
		int *at = b + mo->P;
		int **tab[] = {&mo->W, &mo->G, &mo->O, &mo->S,    &mo->B,  &mo->D, &mo->X,
		               &mo->Y, &mo->L, &mo->N, &mo->Wnew, &mo->G2, &mo->N2};
		long lens[] = {nrp, nrp, nrp,      nkp, nkp, nkp,     nk,
		               nk,  nk,  mo->nrep, nrp, nrp, mo->nrep};
		for (int j = 0; j < 13; j++) {
			int *start = at;
			at = widen_table(at, *tab[j], lens[j], tp);
			*tab[j] = start;
		}
		free(mo->tie_pack);
		mo->tie_pack = b;
		mo->tp = tp;
		blk[m] = NULL;
	}
	free(g->task), free(g->obj), free(g->pool), free(g->order);
	g->task = task, g->obj = obj, g->pool = pool, g->order = order;
	g->ntask = T * tp, g->nobj = O * tp, g->pool_len = g->pool_cap = len;
	g->ndev *= tp;
	g->tp = tp;
	free(blk);
	return 0;
fail:
	for (int m = 0; blk && m < g->nmodels; m++)
		free(blk[m]);
	free(blk), free(task), free(obj), free(pool), free(order);
	return rc;
}

int tg_graph_build(const struct tg_model *models, int nmodels, const struct tg_plan *plan,
                   struct tg_graph *out)
{
	SP_CHECK_ARG(plan && out, "taskgraph: null plan or graph");
	SP_CHECK_ARG(plan->tp >= 0 && plan->tp <= TG_MAX_TP,
	             "taskgraph: tensor parallel %d, need 0..%d (0, 1: none)", plan->tp, TG_MAX_TP);
	if (plan->tp > 1) { /* the plan on one member's devices, then widened */
		SP_CHECK_ARG(plan->ndev % plan->tp == 0,
		             "taskgraph: tensor parallel %d does not divide the %d devices",
		             plan->tp, plan->ndev);
		SP_CHECK_ARG(!is_dp(plan->sched),
		             "taskgraph: tensor parallelism with %s: the data-parallel schedules "
		             "bind tasks late, which the members' exchanges cannot follow",
		             tg_sched_name(plan->sched));
		struct tg_plan base = *plan;
		base.ndev /= plan->tp;
		base.tp = 1;
		SP_CHECK(tg_graph_build(models, nmodels, &base, out));
		int rc = widen(out, plan->tp);
		if (rc < 0)
			tg_graph_free(out);
		return rc;
	}
	SP_CHECK(validate_input(models, nmodels, plan));
	struct tg_graph g = {.ndev = plan->ndev, .tp = 1};
	struct bld b = {.g = &g};
	int rc = 0, nq = plan->ndev + 1;
	g.mobj = calloc((size_t)nmodels, sizeof(*g.mobj));
	if (!g.mobj) {
		rc = sp_error(-ENOMEM, "taskgraph: tables of %d models", nmodels);
		goto fail;
	}
	b.seq = calloc((size_t)nq, sizeof(int *));
	b.seqn = calloc((size_t)nq, sizeof(int));
	b.seqcap = calloc((size_t)nq, sizeof(int));
	if (!b.seq || !b.seqn || !b.seqcap) {
		rc = sp_error(-ENOMEM, "taskgraph: %d device sequences", nq);
		goto fail;
	}
	for (int i = 0; i < nmodels; i++)
		SP_CHECK_GOTO(build_model(&b, &models[i], plan), rc, fail);
	for (int i = 0; i < g.ntask; i++) { /* pool offsets -> pointers */
		intptr_t off = (intptr_t)g.task[i].read;
		g.task[i].read = g.pool + off;
		g.task[i].write = g.task[i].read + g.task[i].nread;
		g.task[i].dep = g.task[i].write + g.task[i].nwrite;
	}
	SP_CHECK_GOTO(order_build(&b), rc, fail);
	*out = g;
	goto done;
fail:
	tg_graph_free(&g);
done:
	for (int q = 0; b.seq && q < nq; q++)
		free(b.seq[q]);
	free(b.seq);
	free(b.seqn);
	free(b.seqcap);
	return rc;
}

/* Bytes of t's distinct objects (an object may be in both sets). Quadratic in the
 * list length, which stays below a few hundred, so nothing is allocated. */
static uint64_t task_ws(const struct tg_graph *g, const struct tg_task *t)
{
	uint64_t ws = 0;
	int n = t->nread + t->nwrite; /* write follows read in the pool */
	for (int i = 0; i < n; i++) {
		int o = t->read[i], seen = 0;
		for (int j = 0; j < i && !seen; j++)
			seen = t->read[j] == o;
		if (!seen)
			ws += g->obj[o].bytes;
	}
	return ws;
}

uint64_t tg_graph_state_bytes(const struct tg_graph *g)
{
	uint64_t s = 0;
	for (int i = 0; i < g->nobj; i++)
		if (g->obj[i].kind != TG_O_WORK)
			s += g->obj[i].bytes;
	/* a program of several steps: one step's microbatches (the objects of a
	 * microbatch live from its forward to its backward, within one pipeline
	 * of steps) */
	for (int m = 0; m < g->nmodels; m++) {
		const struct tg_model_objs *mo = &g->mobj[m];
		for (int r = 0; r < (mo->tp > 1 ? mo->tp : 1); r++)
			for (int k = mo->nmb; k < mo->nmb * mo->nstep; k++) {
				s -= g->obj[tg_mo_member(mo, mo->X, k, r)].bytes +
				     g->obj[tg_mo_member(mo, mo->Y, k, r)].bytes;
				for (int pk = 0; pk < mo->P; pk++) {
					int i = k * mo->P + pk;
					s -= g->obj[tg_mo_member(mo, mo->S, i, r)].bytes +
					     g->obj[tg_mo_member(mo, mo->B, i, r)].bytes +
					     g->obj[tg_mo_member(mo, mo->D, i, r)].bytes;
				}
			}
	}
	return s;
}

uint64_t tg_graph_min_capacity(const struct tg_graph *g, int *task)
{
	uint64_t best = 0;
	int arg = -1;
	for (int i = 0; g && i < g->ntask; i++) {
		const struct tg_task *t = &g->task[i];
		if (t->dev < 0)
			continue;
		uint64_t ws = task_ws(g, t);
		if (arg < 0 || ws > best) {
			best = ws;
			arg = t->id;
		}
	}
	if (task)
		*task = arg;
	return best;
}

/* Every two tasks touching one object, one of them writing it, are ordered by
 * dependencies (transitively): whatever the executor's timing, they meet in
 * the same order. Ancestor sets as bitsets, built in the global order; graphs
 * above 20000 tasks are not checked (quadratic memory). */
static int check_hazards(const struct tg_graph *g)
{
	int T = g->ntask, rc = 0;
	if (T > 20000)
		return 0;
	size_t words = ((size_t)T + 63) / 64;
	uint64_t *anc = calloc((size_t)T * words + 1, sizeof(uint64_t));
	int *lastw = malloc(((size_t)g->nobj + 1) * sizeof(int));
	int *nread = calloc((size_t)g->nobj + 1, sizeof(int));
	int **readers = calloc((size_t)g->nobj + 1, sizeof(int *));
	if (!anc || !lastw || !nread || !readers) {
		rc = sp_error(-ENOMEM, "taskgraph: validate %d tasks", T);
		goto out;
	}
	for (int o = 0; o < g->nobj; o++)
		lastw[o] = -1;
	for (int n = 0; n < T && !rc; n++) {
		const struct tg_task *t = &g->task[g->order[n]];
		uint64_t *a = anc + (size_t)t->id * words;
		for (int i = 0; i < t->ndep; i++) {
			const uint64_t *d = anc + (size_t)t->dep[i] * words;
			for (size_t w = 0; w < words; w++)
				a[w] |= d[w];
			a[t->dep[i] / 64] |= 1ull << (t->dep[i] % 64);
		}
#define ANC(x) ((a[(x) / 64] >> ((x) % 64)) & 1)
		/* reads after the last write; writes after it and after its readers */
		for (int i = 0; i < t->nread + t->nwrite && !rc; i++) {
			int o = t->read[i], wr = i >= t->nread; /* write follows read */
			if (lastw[o] >= 0 && lastw[o] != t->id && !ANC(lastw[o]))
				rc = sp_error(-EINVAL,
				              "taskgraph: task %d (kind %d, pack %d, step %d) uses "
				              "object %d (%s) written by task %d without depending "
				              "on it",
				              t->id, t->kind, t->pack, t->step, o,
				              tg_okind_name(g->obj[o].kind), lastw[o]);
			for (int r = 0; wr && r < nread[o] && !rc; r++)
				if (readers[o][r] != t->id && !ANC(readers[o][r]))
					rc = sp_error(-EINVAL,
					              "taskgraph: task %d (kind %d, pack %d, step "
					              "%d) overwrites object %d (%s) that task %d "
					              "reads, without depending on it",
					              t->id, t->kind, t->pack, t->step, o,
					              tg_okind_name(g->obj[o].kind), readers[o][r]);
		}
#undef ANC
		for (int i = 0; i < t->nread + t->nwrite && !rc; i++) {
			int o = t->read[i];
			if (i >= t->nread) {
				lastw[o] = t->id;
				nread[o] = 0;
				continue;
			}
			int *nr = realloc(readers[o], ((size_t)nread[o] + 1) * sizeof(int));
			if (!nr) {
				rc = sp_error(-ENOMEM, "taskgraph: validate readers");
				break;
			}
			readers[o] = nr;
			readers[o][nread[o]++] = t->id;
		}
	}
out:
	for (int o = 0; readers && o < g->nobj; o++)
		free(readers[o]);
	free(readers);
	free(nread);
	free(lastw);
	free(anc);
	return rc;
}

int tg_graph_validate(const struct tg_graph *g)
{
	int rc = 0;
	int *at = malloc((size_t)g->ntask * sizeof(int) + 1),
	    *written = calloc((size_t)g->nobj + 1, sizeof(int));
	int *updc = calloc((size_t)g->nobj + 1, sizeof(int));
	int *seen = calloc((size_t)g->ntask + 1, sizeof(int)),
	    *stack = malloc(((size_t)g->ntask + 1) * sizeof(int));
	if (!at || !written || !updc || !seen || !stack) {
		rc = sp_error(-ENOMEM, "taskgraph: validate");
		goto out;
	}
	for (int n = 0; n < g->ntask; n++)
		at[g->order[n]] = n;
	for (int n = 0; n < g->ntask && !rc; n++) {
		const struct tg_task *t = &g->task[g->order[n]];
		for (int i = 0; i < t->ndep; i++)
			if (at[t->dep[i]] >= n)
				rc =
				    sp_error(-EINVAL, "taskgraph: task %d depends on later task %d",
				             t->id, t->dep[i]);
		for (int i = 0; i < t->nread && !rc; i++) {
			const struct tg_obj *o = &g->obj[t->read[i]];
			int initial =
			    o->kind == TG_O_WEIGHT || o->kind == TG_O_OPT || o->kind == TG_O_INPUT;
			if (!initial && !written[t->read[i]])
				rc = sp_error(
				    -EINVAL,
				    "taskgraph: task %d reads object %d (%s) before any write",
				    t->id, t->read[i], tg_okind_name(o->kind));
		}
		for (int i = 0; i < t->nwrite; i++)
			written[t->write[i]] = 1;
		if (t->kind == TG_UPD) {
			/* the weights it writes: W (2BW: Wnew, and W as its copy) */
			int w = t->read[0], gr = t->read[1], w2 = -1;
			for (int i = 0; i < t->nwrite; i++)
				if (t->write[i] != w && g->obj[t->write[i]].kind == TG_O_WEIGHT)
					w2 = t->write[i];
			/* once a step: updc holds the last step + 1 that wrote it */
			if (updc[w] > t->step || (w2 >= 0 && updc[w2] > t->step))
				rc =
				    sp_error(-EINVAL, "taskgraph: pack %d updated twice in step %d",
				             t->pack, t->step);
			updc[w] = t->step + 1;
			if (w2 >= 0)
				updc[w2] = t->step + 1;
			/* the executor runs by dependencies, not by this order: every other
			 * user of W and writer of G must be an ancestor of the UPD (this
			 * covers a tied pack's FWD/BWD, which use W and G of this pack at
			 * other list positions) */
			int sp = 0, mark = t->id + 1; /* marked when pushed: once each */
			for (int i = 0; i < t->ndep; i++)
				if (seen[t->dep[i]] != mark) {
					seen[t->dep[i]] = mark;
					stack[sp++] = t->dep[i];
				}
			while (sp > 0) {
				const struct tg_task *x = &g->task[stack[--sp]];
				for (int i = 0; i < x->ndep; i++)
					if (seen[x->dep[i]] != mark) {
						seen[x->dep[i]] = mark;
						stack[sp++] = x->dep[i];
					}
			}
			for (int x = 0; x < g->ntask && !rc; x++) {
				const struct tg_task *u = &g->task[x];
				int uses = 0;
				if (u->step != t->step) /* other steps' versions: by the emission */
					continue;
				if (u->kind == TG_ALLREDUCE && u->root >= 0)
					continue; /* ZeRO-1: the update's weights sent on, after it */
				for (int i = 0; i < u->nread; i++)
					uses |= u->read[i] == w || (w2 >= 0 && u->read[i] == w2);
				for (int i = 0; i < u->nwrite; i++)
					uses |= u->write[i] == gr;
				if (x != t->id && uses && seen[x] != mark)
					rc = sp_error(
					    -EINVAL,
					    "taskgraph: UPD %d of pack %d does not depend on "
					    "task %d (kind %d, pack %d) that uses its W or G",
					    t->id, t->pack, x, u->kind, u->pack);
			}
		}
	}
	for (int i = 0; i < g->nobj && !rc; i++)
		if (g->obj[i].kind == TG_O_WEIGHT && !updc[i])
			rc = sp_error(-EINVAL, "taskgraph: weight object %d never updated", i);
	/* every step updates every pack of every replica once */
	for (int mi = 0; mi < g->nmodels && !rc; mi++) {
		const struct tg_model_objs *mo = &g->mobj[mi];
		for (int j = 0; j < mo->nstep && !rc; j++) {
			int n = 0;
			for (int t = 0; t < g->ntask; t++)
				n += g->task[t].kind == TG_UPD && g->task[t].model == mo->id &&
				     g->task[t].step == j;
			int want = mo->nrep * mo->P * (mo->tp > 1 ? mo->tp : 1);
			if (n != want)
				rc = sp_error(
				    -EINVAL,
				    "taskgraph: model %d, step %d: %d updates, expected %d "
				    "(a pack per replica and member)",
				    mo->id, j, n, want);
		}
	}
	if (!rc)
		rc = check_hazards(g);
out:
	free(at);
	free(written);
	free(updc);
	free(seen);
	free(stack);
	return rc;
}
