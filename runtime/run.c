/* runtime/run.c — a model under a plan: task graph -> program -> steps.
 *
 * Objects map one to one (program object i = graph object i); tasks follow
 * the graph's global order (program task n = g->order[n]). An object both
 * read and written is acquired WRITE, one only written OVERWRITE. Callbacks
 * find their objects by role through the graph's per-model tables and launch
 * the layers' ops, microbatch by microbatch, layer by layer:
 *   FWD   each layer's output goes to its slot in the stash (interior layers)
 *         or to the pack's boundary (the last one)
 *   BWD   layers in reverse; the input gradient of an interior layer goes to a
 *         ping-pong buffer in the work object, the pack's to D[k,pk]; a
 *         gradient's first accumulation zeroes it first
 *   LOSS  copies the last layer's losses to a host buffer
 *   UPD   adds the tied gradients of layers that use this pack's layers, then
 *         each layer's update (on the device, or on the CPU stream); under 2BW
 *         it first copies the newest weights (Wnew) into W, which the next
 *         iteration's passes read, and updates Wnew
 *   ALLREDUCE  one collective per pack (the executor groups the members)
 * Layout inside a pack: W, G, O are the layers' ranges back to back (a layer's
 * optimizer state is its own optim_bytes); the stash of one microbatch holds,
 * per layer, its stash then (interior layers) its output.
 */
#include "runtime/internal.h"

#include "common/log.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct rt_run_task {
	struct rt_run *run;
	const struct tg_task *t;
};

static int pack_lo(const struct rt_run *r, int pk)
{
	return pk ? r->plan.pack_end[pk - 1] : 0;
}

static int pack_hi(const struct rt_run *r, int pk)
{
	return r->plan.pack_end[pk];
}

/* The weight replica a FWD or BWD task reads: in data-parallel modes the
 * device's it runs on (the executor rebinds a late-bound task's W to that
 * device's replica, equal to every other), else the one the graph names. Its
 * gradients always go to the graph's replica t->rep (the executor never
 * rebinds an accumulating replica): the sum's order is the program's. */
static int rep_of(const struct rt_launch *l, const struct rt_run *r, const struct tg_task *t)
{
	return r->mo->nrep > 1 && l->dev >= 0 ? l->dev : t->rep;
}

/* The task's tensor-parallel member (0 without): the objects the model's
 * tables name are member 0's, member r's are r further (taskgraph's widen). */
static int member_of(const struct rt_launch *l)
{
	return ((const struct rt_run_task *)l->task->arg)->t->member;
}

/* The access task l got to graph object o (VMM_READ if absent). */
static enum vmm_access mode_of(const struct rt_launch *l, int o)
{
	const struct rt_task *t = l->task;
	o += member_of(l);
	for (int i = 0; i < t->nref; i++)
		if (t->ref[i].obj == o)
			return t->ref[i].mode;
	return VMM_READ;
}

/* The pointer of graph object o among the task's refs (NULL: 0 bytes, or absent). */
static void *ptr_raw(const struct rt_launch *l, int o)
{
	const struct rt_task *t = l->task;
	for (int i = 0; i < t->nref; i++)
		if (t->ref[i].obj == o)
			return l->ptr[i];
	return NULL;
}

/* The same for an object of the model's tables (member 0's), as the task's
 * member sees it. */
static void *ptr_of(const struct rt_launch *l, int o)
{
	return o < 0 ? NULL : ptr_raw(l, o + member_of(l));
}

static int zero(struct dev_stream *s, void *p, uint64_t bytes)
{
	if (!p || !bytes)
		return 0;
	struct kn_grad_zero_args z = {.dtype = KN_F32, .x = p, .N = (long)(bytes / sizeof(float))};
	if (bytes % sizeof(float))
		return dev_memset_async(s, p, dev_stream_device(s), 0, bytes);
	return kn_grad_zero_launch(s, &z);
}

/* The tied layer's parameters for layer l of pack pk (step's version). */
static const void *tied_params(const struct rt_launch *L, const struct rt_run *r, int l, int rep,
                               int step)
{
	const struct rt_layer *ly = &r->m->layers[l];
	if (!ly->tied)
		return NULL;
	int tl = ly->tied_layer, tp = r->pack_of[tl];
	char *w = ptr_of(L, tg_w_of(r->mo, rep * r->mo->P + tp, step));
	return w ? w + r->poff[tl] : NULL;
}

/* ---- tensor parallelism: a set of members runs one pass together ------------------ */

static int tp_block(const struct rt_layer *ly)
{
	return ly->kind == KN_LAYER_BLOCK && ly->gpt.tp_shards > 1;
}

/* Between two segments of a block: member i's slot i goes into slot i of
 * every other member. Each stream waits for every member's segment, pulls
 * the others' slots, and waits until every member has pulled its own before
 * the next segment overwrites it. */
static int tp_exchange(struct rt_run *r, const struct rt_launch *L, int n, float *const *slot,
                       uint64_t bytes)
{
	for (int i = 0; i < n; i++)
		SP_CHECK(dev_event_record(r->tp_done[i], L[i].s));
	for (int i = 0; i < n; i++)
		for (int o = 0; o < n; o++) {
			if (o == i)
				continue;
			SP_CHECK(dev_stream_wait_event(L[i].s, r->tp_done[o]));
			uint64_t off = (uint64_t)o * bytes;
			SP_CHECK(dev_memcpy_async(L[i].s, (char *)slot[i] + off, L[i].dev,
			                          (char *)slot[o] + off, L[o].dev, bytes));
			r->rt->st.tp_bytes += bytes;
		}
	for (int i = 0; i < n; i++)
		SP_CHECK(dev_event_record(r->tp_pulled[i], L[i].s));
	for (int i = 0; i < n; i++)
		for (int o = 0; o < n; o++)
			if (o != i)
				SP_CHECK(dev_stream_wait_event(L[i].s, r->tp_pulled[o]));
	return 0;
}

/* One block's pass (bwd 0: forward) over the n members, segment by segment. */
static int tp_pass(struct rt_run *r, const struct rt_launch *L, int n, const struct rt_layer *ly,
                   const struct kn_layer_mem *mem, const struct kn_layer_io *io, int bwd)
{
	int mb = r->plan.microbatch, t = ly->gpt.tp_shards;
	float *slot[DEV_MAX];
	for (int i = 0; i < n; i++)
		slot[i] = kn_block_tp_slots(&ly->gpt, t, mb, ly->T, mem[i].work);
	uint64_t bytes = (uint64_t)mb * ly->T * ly->gpt.C * sizeof(float);
	for (int seg = 0; seg < KN_TP_SEGS; seg++) {
		if (seg)
			SP_CHECK(tp_exchange(r, L, n, slot, bytes));
		for (int i = 0; i < n; i++) {
			int rank = member_of(&L[i]);
			if (bwd)
				SP_CHECK(kn_block_tp_backward_launch(L[i].s, &ly->gpt, t, rank, seg,
				                                     mb, ly->T, &mem[i], &io[i]));
			else
				SP_CHECK(kn_block_tp_forward_launch(L[i].s, &ly->gpt, t, rank, seg,
				                                    mb, ly->T, &mem[i], &io[i]));
		}
	}
	return 0;
}

/* The task's graph task (a set's members: each its own). */
static const struct tg_task *tg_of(const struct rt_launch *l)
{
	return ((const struct rt_run_task *)l->task->arg)->t;
}

/* The forward of a pack: each microbatch through its layers, interior
 * outputs and stashes in its stash object (with recomputation: scratch in
 * the work object, backward redoes it), the last output in the boundary. A
 * tensor-parallel set runs its n members together (n = 1: a task alone),
 * their blocks segment by segment with the exchanges between (tp_pass). */
static int fwd_set(const struct rt_launch *L, int n)
{
	const struct tg_task *t0 = tg_of(&L[0]);
	struct rt_run *r = ((const struct rt_run_task *)L[0].task->arg)->run;
	const struct tg_model_objs *mo = r->mo;
	int P = mo->P, pk = t0->pack, mb = r->plan.microbatch;
	int lo = pack_lo(r, pk), hi = pack_hi(r, pk);
	for (int k = t0->mb0; k < t0->mb0 + t0->nmb; k++) {
		const void *x[DEV_MAX];
		char *W[DEV_MAX], *S[DEV_MAX];
		void *work[DEV_MAX];
		for (int i = 0; i < n; i++) {
			const struct tg_task *t = tg_of(&L[i]);
			x[i] = ptr_of(&L[i], pk ? mo->B[k * P + pk - 1] : mo->X[k]);
			W[i] = ptr_of(&L[i], tg_w_of(mo, rep_of(&L[i], r, t) * P + pk, t->step));
			S[i] = ptr_of(&L[i], mo->S[k * P + pk]);
			work[i] = t->work >= 0 ? ptr_raw(&L[i], t->work) : NULL;
			if (tg_recomputes(&r->plan, pk)) /* scratch: backward redoes it */
				S[i] = (char *)work[i] + r->pp_off[pk];
		}
		for (int l = lo; l < hi; l++) {
			const struct rt_layer *ly = &r->m->layers[l];
			struct kn_layer_mem mem[DEV_MAX];
			struct kn_layer_io io[DEV_MAX];
			for (int i = 0; i < n; i++) {
				const struct tg_task *t = tg_of(&L[i]);
				void *out = l == hi - 1 ? ptr_of(&L[i], mo->B[k * P + pk])
				                        : S[i] + r->ioff[l];
				const void *Y = pk == P - 1 ? ptr_of(&L[i], mo->Y[k]) : NULL;
				mem[i] =
				    (struct kn_layer_mem){.params = W[i] + r->poff[l],
				                          .stash = S[i] ? S[i] + r->soff[l] : NULL,
				                          .work = work[i]};
				io[i] = (struct kn_layer_io){.in = x[i], .out = out, .targets = Y};
				if (tp_block(ly))
					continue;
				struct rt_layer_call c = {
				    .s = L[i].s,
				    .layer = ly,
				    .B = mb,
				    .params = mem[i].params,
				    .stash = mem[i].stash,
				    .work = work[i],
				    .in = x[i],
				    .out = out,
				    .targets = Y,
				    .tied = tied_params(&L[i], r, l, rep_of(&L[i], r, t), t->step)};
				SP_CHECK(ly->ops->forward(&c));
			}
			if (tp_block(ly))
				SP_CHECK(tp_pass(r, L, n, ly, mem, io, 0));
			for (int i = 0; i < n; i++)
				x[i] = io[i].out;
		}
	}
	return 0;
}

static int fwd_task(const struct rt_launch *L, void *arg)
{
	(void)arg; /* L->task->arg */
	return fwd_set(L, 1);
}

/* The samples the loss averages over: every node's batch. */
static int batch_total(const struct rt_model *m)
{
	return m->batch_total > 0 ? m->batch_total : m->batch;
}

/* The backward of a pack: zero its gradient at the iteration's first
 * accumulation (the mode the executor gave) and the input-gradient boundary,
 * then each microbatch back through the layers, interior input gradients in
 * two ping-pong buffers of the work object (with recomputation the forward
 * first, its stash in the work object). The weights are the replica of the
 * device it runs on, the gradient always the graph's replica (rep_of). A
 * tensor-parallel set runs its n members together, as fwd_set. */
static int bwd_set(const struct rt_launch *L, int n)
{
	const struct tg_task *t0 = tg_of(&L[0]);
	struct rt_run *r = ((const struct rt_run_task *)L[0].task->arg)->run;
	const struct tg_model_objs *mo = r->mo;
	const struct rt_model *m = r->m;
	int P = mo->P, pk = t0->pack, mb = r->plan.microbatch;
	int lo = pack_lo(r, pk), hi = pack_hi(r, pk);
	char *W[DEV_MAX], *G[DEV_MAX], *work[DEV_MAX];
	for (int i = 0; i < n; i++) {
		const struct tg_task *t = tg_of(&L[i]);
		int gobj = tg_g_of(mo, t->rep * P + pk, t->step);
		W[i] = ptr_of(&L[i], tg_w_of(mo, rep_of(&L[i], r, t) * P + pk, t->step));
		G[i] = ptr_of(&L[i], gobj);
		work[i] = t->work >= 0 ? ptr_raw(&L[i], t->work) : NULL;
		if (mode_of(&L[i], gobj) == VMM_OVERWRITE) { /* the first accumulation */
			uint64_t gb = 0;
			for (int l = lo; l < hi; l++)
				gb += m->layers[l].grad_bytes;
			SP_CHECK(zero(L[i].s, G[i], gb));
		}
	}
	float dloss = 1.0f / ((float)batch_total(m) * (float)m->loss_floats);
	for (int k = t0->mb0; k < t0->mb0 + t0->nmb; k++) {
		char *S[DEV_MAX];
		const void *in[DEV_MAX], *dout[DEV_MAX], *Y[DEV_MAX];
		void *dpack[DEV_MAX];
		for (int i = 0; i < n; i++) {
			const struct tg_task *t = tg_of(&L[i]);
			S[i] = ptr_of(&L[i], mo->S[k * P + pk]);
			in[i] = ptr_of(&L[i], pk ? mo->B[k * P + pk - 1] : mo->X[k]);
			Y[i] = pk == P - 1 ? ptr_of(&L[i], mo->Y[k]) : NULL;
			dout[i] =
			    ptr_of(&L[i], pk == P - 1 ? mo->B[k * P + pk] : mo->D[k * P + pk + 1]);
			dpack[i] = pk ? ptr_of(&L[i], mo->D[k * P + pk]) : NULL;
			if (tg_recomputes(&r->plan, pk)) { /* forward again, its stash in work */
				S[i] = work[i] + r->rc_off[pk];
				const void *x = in[i];
				for (int l = lo; l < hi; l++) { /* never a shard: refused at open */
					const struct rt_layer *ly = &m->layers[l];
					struct rt_layer_call c = {
					    .s = L[i].s,
					    .layer = ly,
					    .B = mb,
					    .params = W[i] + r->poff[l],
					    .stash = S[i] + r->soff[l],
					    .work = work[i],
					    .in = x,
					    .out = l == hi - 1 ? S[i] + r->rc_out[pk]
					                       : S[i] + r->ioff[l],
					    .targets = Y[i],
					    .tied = tied_params(&L[i], r, l, rep_of(&L[i], r, t),
					                        t->step)};
					SP_CHECK(ly->ops->forward(&c));
					x = c.out;
				}
			}
			if (dpack[i])
				SP_CHECK(zero(L[i].s, dpack[i],
				              m->layers[lo - 1].out_per_sample * (uint64_t)mb));
		}
		int pp = 0;
		for (int l = hi - 1; l >= lo; l--) {
			const struct rt_layer *ly = &m->layers[l];
			struct kn_layer_mem mem[DEV_MAX];
			struct kn_layer_io io[DEV_MAX];
			for (int i = 0; i < n; i++) {
				const struct tg_task *t = tg_of(&L[i]);
				void *din = dpack[i];
				if (l > lo) { /* an interior input gradient: a ping-pong buffer */
					din =
					    work[i] + r->pp_off[pk] + (uint64_t)pp * r->pp_size[pk];
					SP_CHECK(
					    zero(L[i].s, din,
					         m->layers[l - 1].out_per_sample * (uint64_t)mb));
				}
				const void *lin = l == lo ? in[i] : S[i] + r->ioff[l - 1];
				mem[i] =
				    (struct kn_layer_mem){.params = W[i] + r->poff[l],
				                          .grads = G[i] + r->goff[l],
				                          .stash = S[i] ? S[i] + r->soff[l] : NULL,
				                          .work = work[i]};
				io[i] = (struct kn_layer_io){.in = lin,
				                             .dout = dout[i],
				                             .din = din,
				                             .targets = Y[i],
				                             .dloss = dloss};
				if (tp_block(ly))
					continue;
				struct rt_layer_call c = {
				    .s = L[i].s,
				    .layer = ly,
				    .B = mb,
				    .params = mem[i].params,
				    .grads = mem[i].grads,
				    .stash = mem[i].stash,
				    .work = work[i],
				    .in = lin,
				    .dout = dout[i],
				    .din = din,
				    .targets = Y[i],
				    .tied = tied_params(&L[i], r, l, rep_of(&L[i], r, t), t->step),
				    .tied_grad =
				        ly->tied ? G[i] + r->goff[l] + ly->param_bytes : NULL,
				    .dloss = dloss};
				SP_CHECK(ly->ops->backward(&c));
			}
			if (tp_block(ly))
				SP_CHECK(tp_pass(r, L, n, ly, mem, io, 1));
			if (l > lo)
				pp ^= 1;
			for (int i = 0; i < n; i++)
				dout[i] = io[i].din;
		}
	}
	return 0;
}

static int bwd_task(const struct rt_launch *L, void *arg)
{
	(void)arg; /* L->task->arg */
	return bwd_set(L, 1);
}

static int loss_task(const struct rt_launch *L, void *arg)
{
	const struct rt_run_task *rt = arg;
	struct rt_run *r = rt->run;
	const struct tg_task *t = rt->t;
	const struct tg_model_objs *mo = r->mo;
	int P = mo->P, mb = r->plan.microbatch;
	uint64_t bytes = (uint64_t)mb * (uint64_t)r->m->loss_floats * sizeof(float);
	if (t->member) /* tensor parallelism: every member's losses are member 0's */
		return 0;
	for (int k = t->mb0; k < t->mb0 + t->nmb; k++) {
		const void *lo = ptr_of(L, mo->B[k * P + P - 1]);
		float *dst = r->losses + (size_t)k * mb * r->m->loss_floats;
		SP_CHECK(dev_memcpy_async(L->s, dst, DEV_HOST, lo,
		                          L->dev == RT_HOST ? DEV_HOST : L->dev, bytes));
		r->rt->st.loss_readback += bytes;
	}
	return 0;
}

/* The gradients the update or the norm of pack pk reads: its own and those of
 * the packs tied to it (NULL for other layers); checks each tie is there. */
static int pack_grads(const struct rt_launch *L, const struct rt_run *r, int pk, int rep, int step,
                      void ***out)
{
	const struct tg_model_objs *mo = r->mo;
	const struct rt_model *m = r->m;
	int P = mo->P;
	void **grads = calloc((size_t)m->nlayers, sizeof(void *));
	if (!grads)
		return sp_error(-ENOMEM, "update: out of memory");
	for (int l = 0; l < m->nlayers; l++) { /* this pack's, and those of packs tied to it */
		char *g = ptr_of(L, tg_g_of(mo, rep * P + r->pack_of[l], step));
		grads[l] = g ? g + r->goff[l] : NULL;
	}
	for (int l = pack_lo(r, pk); l < pack_hi(r, pk); l++)
		for (int j = 0; j < m->nlayers; j++)
			if (m->layers[j].tied && m->layers[j].tied_layer == l && !grads[j]) {
				free(grads);
				return sp_error(
				    -EINVAL,
				    "update of %s: the gradient of %s (tied to it) is not "
				    "among the task's objects",
				    m->layers[l].name, m->layers[j].name);
			}
	*out = grads;
	return 0;
}

/* With clipping: the tied gradients added (which the update does otherwise),
 * then each layer's sum of squares into the replica's norm object. */
static int norm_task(const struct rt_launch *L, void *arg)
{
	const struct rt_run_task *rt = arg;
	struct rt_run *r = rt->run;
	const struct tg_task *t = rt->t;
	const struct rt_model *m = r->m;
	int pk = t->pack, rep = t->rep;
	double *N = ptr_of(L, tg_n_of(r->mo, rep, t->step));
	void **grads;
	SP_CHECK(pack_grads(L, r, pk, rep, t->step, &grads));
	int rc = 0;
	for (int l = pack_lo(r, pk); l < pack_hi(r, pk) && !rc; l++) {
		rc = rt_layer_add_ties(L->s, m, l, grads);
		if (!rc)
			rc = rt_layer_norm(L->s, m, l, grads[l], N);
	}
	free(grads);
	return rc;
}

struct copy_args {
	void *dst;
	const void *src;
	size_t bytes;
};

static void copy_cpu(const void *a)
{
	const struct copy_args *c = a;
	memcpy(c->dst, c->src, c->bytes);
}

/* 2BW: dst = src on the task's stream (a device-to-device copy on a device, a
 * CPU kernel on the host, which has no device copy). */
static int copy_version(const struct rt_launch *L, void *dst, const void *src, size_t bytes)
{
	if (L->dev != RT_HOST)
		return dev_memcpy_async(L->s, dst, L->dev, src, L->dev, bytes);
	static const struct dev_kernel k = {"2bw weight copy", copy_cpu, NULL};
	struct copy_args a = {dst, src, bytes};
	return dev_launch(L->s, &k, &a, sizeof(a), (struct dev_cost){0, 2.0 * (double)bytes, 0});
}

static int upd_task(const struct rt_launch *L, void *arg)
{
	const struct rt_run_task *rt = arg;
	struct rt_run *r = rt->run;
	const struct tg_task *t = rt->t;
	const struct tg_model_objs *mo = r->mo;
	const struct rt_model *m = r->m;
	int P = mo->P, pk = t->pack, rep = t->rep, i = rep * P + pk, j = t->step;
	char *W = ptr_of(L, mo->W[i]);
	/* ZeRO-1 elsewhere, several steps a program: the owner's broadcast after
	 * this task writes the whole version, so no copy here */
	int bcast_only = mo->nstep > 1 && !tg_owns_pack(&r->plan, pk);
	if (mo->Wnew[i] >= 0 && !bcast_only) {
		/* 2BW, one step a program: the passes of the next iteration read W(t)
		 * (Wnew's copy), and the step makes W(t+1) from Wnew. Several: this
		 * step's version (which the next step but one reads) becomes a copy
		 * of the other, the newest, and the step makes W(t+1) from it */
		char *src = ptr_of(L, mo->nstep > 1 ? tg_w_of(mo, i, j + 1) : mo->Wnew[i]);
		char *dst = ptr_of(L, mo->nstep > 1 ? tg_w_of(mo, i, j) : mo->W[i]);
		uint64_t bytes = 0;
		for (int l = pack_lo(r, pk); l < pack_hi(r, pk); l++)
			bytes += m->layers[l].param_bytes;
		if (bytes)
			SP_CHECK(copy_version(L, dst, src, bytes));
		W = mo->nstep > 1 ? dst : src;
	}
	if (!tg_owns_pack(&r->plan, pk))
		return 0; /* ZeRO-1: the owner updates; its weights come after */
	const struct rt_optim *opt = &r->step_opt[j];
	int step = r->step_base + j + 1; /* AdamW's count: steps done, this one included */
	char *G = ptr_of(L, tg_g_of(mo, i, j));
	char *O = ptr_of(L, mo->O[i]);
	if (mo->N[rep] >= 0) { /* its NORM added the ties */
		const double *N = ptr_of(L, tg_n_of(mo, rep, j));
		for (int l = pack_lo(r, pk); l < pack_hi(r, pk); l++)
			SP_CHECK(
			    rt_layer_update_opt(L->s, m, opt, l, W + r->poff[l], G + r->goff[l],
			                        O ? (float *)(O + r->ooff[l]) : NULL, step, N));
		return 0;
	}
	void **grads;
	SP_CHECK(pack_grads(L, r, pk, rep, j, &grads));
	int rc = 0;
	for (int l = pack_lo(r, pk); l < pack_hi(r, pk) && !rc; l++) {
		rc = rt_layer_add_ties(L->s, m, l, grads);
		if (!rc)
			rc = rt_layer_update_opt(L->s, m, opt, l, W + r->poff[l], G + r->goff[l],
			                         O ? (float *)(O + r->ooff[l]) : NULL, step, NULL);
	}
	free(grads);
	return rc;
}

static int allreduce_task(const struct rt_launch *L, void *arg)
{
	/* never called: the executor runs the group as one collective */
	return sp_error(-EINVAL, "all-reduce member launched alone");
}

/* ---- building ------------------------------------------------------------------ */

static enum vmm_kind vmm_kind_of(int k)
{
	switch (k) {
	case TG_O_WEIGHT: return VMM_KIND_WEIGHT;
	case TG_O_GRAD: return VMM_KIND_GRAD;
	case TG_O_OPT: return VMM_KIND_OPTIM;
	case TG_O_STASH: return VMM_KIND_STASH;
	case TG_O_BOUNDARY: return VMM_KIND_INTERMEDIATE;
	case TG_O_INPUT: return VMM_KIND_INPUT;
	default: return VMM_KIND_WORKSPACE;
	}
}

static int layouts(struct rt_run *r)
{
	const struct rt_model *m = r->m;
	int P = r->plan.npacks, n = m->nlayers;
	uint64_t mb = (uint64_t)r->plan.microbatch;
	r->pack_of = calloc((size_t)n, sizeof(int));
	r->poff = calloc((size_t)n + 1, sizeof(uint64_t));
	r->goff = calloc((size_t)n + 1, sizeof(uint64_t));
	r->ooff = calloc((size_t)n + 1, sizeof(uint64_t));
	r->soff = calloc((size_t)n + 1, sizeof(uint64_t));
	r->ioff = calloc((size_t)n + 1, sizeof(uint64_t));
	r->pp_off = calloc((size_t)P, sizeof(uint64_t));
	r->rc_off = calloc((size_t)P, sizeof(uint64_t));
	r->pp_size = calloc((size_t)P, sizeof(uint64_t));
	r->rc_out = calloc((size_t)P, sizeof(uint64_t));
	if (!r->pack_of || !r->poff || !r->goff || !r->ooff || !r->soff || !r->ioff || !r->pp_off ||
	    !r->rc_off || !r->pp_size || !r->rc_out)
		return sp_error(-ENOMEM, "run: layouts of %d layers", n);
	/* as taskgraph.h sizes the objects: per pack, the layers' W, G, O back to
	 * back; the stash of one microbatch (each layer's stash, then an interior
	 * layer's output); a BWD's work = the layers' largest scratch, two
	 * ping-pong buffers, and with recompute the stash again and the last output */
	for (int pk = 0; pk < P; pk++) {
		uint64_t po = 0, go = 0, oo = 0, so = 0, maxw = 0, maxint = 0;
		int lo = pack_lo(r, pk), hi = pack_hi(r, pk);
		for (int l = lo; l < hi; l++) {
			const struct rt_layer *ly = &m->layers[l];
			r->pack_of[l] = pk;
			r->poff[l] = po;
			r->goff[l] = go;
			r->ooff[l] = oo;
			po += ly->param_bytes;
			go += ly->grad_bytes;
			oo += ly->optim_bytes;
			r->soff[l] = so;
			so += ly->stash_per_sample * mb;
			if (l < hi - 1) {
				r->ioff[l] = so;
				so += ly->out_per_sample * mb;
				if (ly->out_per_sample * mb > maxint)
					maxint = ly->out_per_sample * mb;
			}
			uint64_t w = ly->work_bytes + ly->work_per_sample * mb;
			if (w > maxw)
				maxw = w;
		}
		r->pp_off[pk] = maxw;
		r->pp_size[pk] = maxint;
		r->rc_off[pk] = maxw + 2 * maxint;
		r->rc_out[pk] = so;
	}
	return 0;
}

/* The plan's weights, gradients and optimizer state (a copy per replica) must
 * fit in the devices' budgets, the host pool and the disk tier together, or
 * the first step that holds them all fails: refused here, with the sizes. */
static int state_fits(struct rt_ctx *rt, const struct tg_plan *plan, const struct tg_graph *g)
{
	if (plan->zero && plan->nodes > 1)
		return 0; /* ZeRO-1 shards the optimizer state over the nodes */
	uint64_t used, cap, dev = 0, host = 0, disk = 0;
	for (int d = 0; d < plan->ndev; d++)
		if (vmm_place_usage(rt->vmm, d, &used, &cap) == 0)
			dev += cap;
	if (vmm_place_usage(rt->vmm, VMM_HOST, &used, &cap) == 0)
		host = cap;
	if (vmm_place_usage(rt->vmm, VMM_DISK, &used, &cap) == 0)
		disk = cap;
	uint64_t state = tg_graph_state_bytes(g);
	if (state <= dev + host + disk)
		return 0;
	char a[32], b[32], c[32], e[32], desc[160], dk[64] = "and no disk tier";
	if (disk)
		snprintf(dk, sizeof(dk), "and the disk tier (%s)",
		         sp_format_size(disk, e, sizeof(e)));
	rt_plan_describe(plan, desc, sizeof(desc));
	int dp = (plan->sched == TG_DP_SWAP || plan->sched == TG_HARMONY_DP) && plan->ndev > 1;
	return sp_error(-ENOMEM,
	                "plan %s keeps %s of weights, gradients and optimizer state%s: more "
	                "than the devices' budgets (%s), the host pool (%s) %s hold "
	                "together; a larger host pool (SPILL_HOST_MEM), a disk tier "
	                "(SPILL_DISK_PATH)%s",
	                desc, sp_format_size(state, a, sizeof(a)), dp ? " (a copy per device)" : "",
	                sp_format_size(dev, b, sizeof(b)), sp_format_size(host, c, sizeof(c)), dk,
	                dp ? " or a pipeline schedule, which keeps one copy" : "");
}

int rt_run_open(struct rt_ctx *rt, const struct rt_model *m, const struct tg_plan *plan,
                uint64_t seed, struct rt_run **out)
{
	SP_CHECK_ARG(rt && m && plan && out, "rt_run_open: NULL argument");
	SP_CHECK_ARG(m->nlayers > 0 && m->layers && m->data && m->loss_floats > 0,
	             "rt_run_open: model %s needs layers, a data callback and losses", m->name);
	SP_CHECK_ARG(plan->ndev >= 1 && plan->ndev <= rt->ndev,
	             "plan: %d devices, the context has %d", plan->ndev, rt->ndev);
	/* the loss task reads the losses from the last layer's output */
	const struct rt_layer *last = &m->layers[m->nlayers - 1];
	SP_CHECK_ARG(last->out_per_sample >= (uint64_t)m->loss_floats * sizeof(float),
	             "model %s: its last layer %s outputs %llu bytes a sample, too few for "
	             "%d fp32 losses",
	             m->name, last->name, (unsigned long long)last->out_per_sample, m->loss_floats);
	int rc = 0;
	struct rt_run *r = calloc(1, sizeof(*r));
	if (!r)
		return sp_error(-ENOMEM, "rt_run_open: out of memory");
	r->rt = rt;
	r->m = m;
	r->plan = *plan;
	r->plan.nodes = rt_node_count(rt); /* every pack's gradient added over the nodes */
	r->plan.node_rank = rt_node_rank(rt);
	if (r->plan.zero && r->plan.nodes <= 1)
		r->plan.zero = 0; /* one node owns everything */
	if (r->plan.zero) {       /* packs to nodes, largest optimizer state first, each to
	                     * the node holding least (the same on every node) */
		if (r->plan.nodes > 255) {
			int n = r->plan.nodes;
			free(r);
			return sp_error(-EINVAL, "ZeRO-1 over %d nodes: at most 255", n);
		}
		int P = r->plan.npacks, order[TG_MAX_PACKS];
		uint64_t bytes[TG_MAX_PACKS] = {0}, load[256] = {0};
		for (int pk = 0, lo = 0; pk < P; lo = r->plan.pack_end[pk++]) {
			for (int l = lo; l < r->plan.pack_end[pk]; l++)
				bytes[pk] += m->layers[l].optim_bytes;
			order[pk] = pk;
		}
		for (int i = 1; i < P; i++) /* by bytes, descending; ties: lower pack */
			for (int k = i; k > 0 && bytes[order[k]] > bytes[order[k - 1]]; k--) {
				int x = order[k];
				order[k] = order[k - 1];
				order[k - 1] = x;
			}
		for (int i = 0; i < P; i++) {
			int best = 0;
			for (int n = 1; n < r->plan.nodes; n++)
				if (load[n] < load[best])
					best = n;
			r->plan.owner[order[i]] = (unsigned char)best;
			load[best] += bytes[order[i]];
		}
	}
	r->seed = seed;
	r->full = m;
	rt_prog_init(&r->prog);
	if (plan->tp > 1) { /* the members' model: blocks as shards */
		if (plan->recompute || m->opt.grad_clip > 0 || m->gpt.dtype != KN_F32) {
			rc = sp_error(-ENOTSUP,
			              "tensor parallel %d: %s is not built with it (fp32, no "
			              "recomputation, no clipping)",
			              plan->tp,
			              plan->recompute        ? "recomputation"
			              : m->opt.grad_clip > 0 ? "gradient clipping"
			                                     : "bf16");
			goto fail;
		}
		SP_CHECK_GOTO(rt_model_gpt_members(m, plan->tp, &r->members), rc, fail);
		r->m = m = &r->members;
		for (int i = 0; i < plan->tp; i++) {
			SP_CHECK_GOTO(dev_event_create(rt->dev, &r->tp_done[i]), rc, fail);
			SP_CHECK_GOTO(dev_event_create(rt->dev, &r->tp_pulled[i]), rc, fail);
		}
	}
	r->tgl = calloc((size_t)m->nlayers, sizeof(*r->tgl));
	if (!r->tgl) {
		rc = sp_error(-ENOMEM, "rt_run_open: layers");
		goto fail;
	}
	rt_model_tg(m, r->tgl, &r->tgm);
	SP_CHECK_GOTO(tg_graph_build(&r->tgm, 1, &r->plan, &r->g), rc, fail);
	SP_CHECK_GOTO(state_fits(rt, &r->plan, &r->g), rc, fail);
	r->mo = &r->g.mobj[0];
	SP_CHECK_GOTO(layouts(r), rc, fail);
	const struct tg_graph *g = &r->g;
	for (int o = 0; o < g->nobj; o++) {
		int id;
		char name[32];
		snprintf(name, sizeof(name), "%s%d", tg_okind_name(g->obj[o].kind), o);
		SP_CHECK_GOTO(
		    rt_prog_obj(&r->prog, g->obj[o].bytes, vmm_kind_of(g->obj[o].kind), name, &id),
		    rc, fail);
		r->prog.obj[id].input = g->obj[o].kind == TG_O_INPUT;
	}
	int *pos = malloc((size_t)g->ntask * sizeof(int));
	r->targ = calloc((size_t)g->ntask, sizeof(*r->targ));
	struct rt_ref *refs = malloc((size_t)(g->nobj + 1) * sizeof(*refs));
	/* a task may list one dependency more than once (a boundary and a
	 * gradient from the same producer): size by the longest list */
	int maxdep = 1;
	for (int n = 0; n < g->ntask; n++)
		if (g->task[n].ndep > maxdep)
			maxdep = g->task[n].ndep;
	int *deps = malloc((size_t)maxdep * sizeof(int));
	if (!pos || !r->targ || !refs || !deps) {
		free(pos);
		free(refs);
		free(deps);
		rc = sp_error(-ENOMEM, "rt_run_open: %d tasks", g->ntask);
		goto fail;
	}
	for (int n = 0; n < g->ntask; n++)
		pos[g->order[n]] = n;
	for (int n = 0; n < g->ntask && !rc; n++) {
		const struct tg_task *t = &g->task[g->order[n]];
		int nr = 0;
		for (int i = 0; i < t->nread + t->nwrite; i++) {
			int o = i < t->nread ? t->read[i] : t->write[i - t->nread];
			int w = i >= t->nread, found = -1;
			for (int j = 0; j < nr; j++)
				if (refs[j].obj == o)
					found = j;
			if (found >= 0) {
				if (w)
					refs[found].mode = VMM_WRITE;
				continue;
			}
			refs[nr++] = (struct rt_ref){o, w ? VMM_OVERWRITE : VMM_READ};
		}
		for (int d = 0; d < t->ndep; d++)
			deps[d] = pos[t->dep[d]];
		r->targ[n] = (struct rt_run_task){r, t};
		struct rt_task tk = {.dev = t->dev < 0 ? RT_HOST : t->dev,
		                     .constrained = t->constrained || t->dev < 0,
		                     .arg = &r->targ[n],
		                     .flops = t->flops,
		                     .tg_task = t->id};
		static const char *const kn[] = {"fwd", "bwd", "upd", "allreduce", "loss", "norm"};
		snprintf(tk.name, sizeof(tk.name), "%s p%d mb%d+%d r%d", kn[t->kind], t->pack,
		         t->mb0, t->nmb, t->rep);
		if (g->tp > 1)
			snprintf(tk.name + strlen(tk.name), sizeof(tk.name) - strlen(tk.name),
			         " m%d", t->member);
		switch (t->kind) {
		case TG_FWD: tk.fn = fwd_task; break;
		case TG_BWD: tk.fn = bwd_task; break;
		case TG_LOSS: tk.fn = loss_task; break;
		case TG_NORM: tk.fn = norm_task; break;
		case TG_UPD:
			tk.fn = upd_task;
			tk.flags = RT_TASK_UPDATE;
			break;
		default: /* sums of G per pack; ZeRO-1's broadcasts of W after them */
			tk.fn = allreduce_task;
			tk.flags = RT_TASK_COLLECTIVE;
			/* one per pack, kind (sum or ZeRO-1's broadcast) and step of
			 * the program; the nodes' messages go by it modulo 16000,
			 * which two collectives in flight at once never share (a
			 * step's all-reduces end before those of the step two later
			 * can start: their forwards wait for its updates) */
			tk.coll_group =
			    ((2 * t->step + (t->root >= 0)) * r->mo->P + t->pack) * g->tp +
			    t->member;
			tk.coll_bcast = t->root >= 0;
			tk.coll_root = t->root;
			tk.constrained = 1;
			break;
		}
		if (t->tp_set >= 0) { /* its members run together, after the all-reduces' groups */
			tk.flags = RT_TASK_COLLECTIVE | RT_TASK_SET;
			tk.set_fn = t->kind == TG_FWD ? fwd_set : bwd_set;
			tk.coll_group = 2 * r->mo->nstep * r->mo->P * g->tp + t->tp_set;
			tk.constrained = 1;
		}
		int id;
		rc = rt_prog_task(&r->prog, &tk, refs, nr, deps, t->ndep, &id);
	}
	free(pos);
	free(refs);
	free(deps);
	if (rc < 0)
		goto fail;
	/* data-parallel replicas: a microbatch bound late to another device reads
	 * that device's weights and accumulates into its own replica's gradients */
	for (int pk = 0; pk < r->mo->P && r->mo->nrep > 1 && !rc; pk++) {
		int w[DEV_MAX], gr[DEV_MAX];
		for (int k = 0; k < r->mo->nrep; k++) {
			w[k] = r->mo->W[k * r->mo->P + pk];
			gr[k] = r->mo->G[k * r->mo->P + pk];
		}
		rc = rt_prog_replicas(&r->prog, w, r->mo->nrep, 0);
		if (rc == 0)
			rc = rt_prog_replicas(&r->prog, gr, r->mo->nrep, 1);
	}
	/* what the all-reduce sums (one replica too: the other nodes' gradients) */
	for (int i = 0; i < r->mo->nrep * r->mo->P * g->tp; i++) {
		r->prog.obj[r->mo->G[i]].dtype = m->gpt.dtype;
		if (r->mo->G2[i] >= 0)
			r->prog.obj[r->mo->G2[i]].dtype = m->gpt.dtype;
	}
	if (rc < 0)
		goto fail;
	SP_CHECK_GOTO(rt_prog_prepare(&r->prog), rc, fail);
	SP_CHECK_GOTO(rt_prog_bind(rt, &r->prog), rc, fail);
	uint64_t lbytes =
	    (uint64_t)r->mo->nstep * r->mo->nmb * plan->microbatch * m->loss_floats * sizeof(float);
	SP_CHECK_GOTO(dev_host_alloc(rt->dev, lbytes, (void **)&r->losses), rc, fail);
	r->step_opt = calloc((size_t)r->mo->nstep, sizeof(*r->step_opt));
	r->skip = calloc((size_t)r->prog.ntask + 1, 1);
	if (!r->step_opt || !r->skip) {
		rc = sp_error(-ENOMEM, "run: per-step state of %d steps", r->mo->nstep);
		goto fail;
	}
	/* initial state in the host pool: weights from the seed, optimizer state 0 */
	for (int i = 0; i < r->mo->nrep * r->mo->P * g->tp && !rc; i++) {
		int pk = i % r->mo->P, member = i / (r->mo->nrep * r->mo->P);
		/* W, 2BW's second version (the same weights), O: tg_sim_swap's order */
		int objs[3] = {r->mo->W[i], r->mo->Wnew[i], r->mo->O[i]};
		for (int j = 0; j < 3 && !rc; j++) {
			int which = j == 2;
			if (objs[j] < 0)
				continue;
			const struct rt_obj *o = &r->prog.obj[objs[j]];
			if (!o->vid)
				continue;
			void *p;
			struct dev_event *ready;
			SP_CHECK_GOTO(
			    vmm_acquire(rt->vmm, o->vid, VMM_HOST, VMM_OVERWRITE, &p, &ready), rc,
			    fail);
			if (rt->data) {
				if (which)
					memset(p, 0, o->bytes);
				for (int l = pack_lo(r, pk); l < pack_hi(r, pk) && !rc; l++)
					rc = which
					         ? rt_layer_init_optim(m, l, (char *)p + r->ooff[l],
					                               seed)
					         : rt_layer_init_member(
					               m, l, (char *)p + r->poff[l], seed, member);
			}
			int e = vmm_release(rt->vmm, o->vid, VMM_HOST, NULL);
			if (!rc)
				rc = e;
		}
	}
	if (rc < 0)
		goto fail;
	*out = r;
	return 0;
fail:
	rt_run_close(r);
	return rc;
}

void rt_run_close(struct rt_run *r)
{
	if (!r)
		return;
	if (r->losses && dev_host_free(r->rt->dev, r->losses) < 0)
		SP_WARN(RT, "%s", sp_last_error());
	rt_prog_unbind(r->rt, &r->prog);
	rt_prog_free(&r->prog);
	tg_graph_free(&r->g);
	free(r->tgl);
	free(r->targ);
	free(r->pack_of);
	free(r->poff);
	free(r->goff);
	free(r->ooff);
	free(r->soff);
	free(r->ioff);
	free(r->pp_off);
	free(r->rc_off);
	free(r->pp_size);
	free(r->rc_out);
	free(r->step_opt);
	free(r->skip);
	for (int i = 0; i < DEV_MAX; i++) {
		if (r->tp_done[i] && dev_event_destroy(r->tp_done[i]) < 0)
			SP_WARN(RT, "%s", sp_last_error());
		if (r->tp_pulled[i] && dev_event_destroy(r->tp_pulled[i]) < 0)
			SP_WARN(RT, "%s", sp_last_error());
	}
	free(r->members.layers);
	free(r);
}

/* The inputs and targets (from fn) of iterations iter..iter+nstep-1, written
 * into the host pool: step j's into its microbatches' objects. */
static int write_inputs(struct rt_run *r, rt_data_fn fn, int iter, int nstep)
{
	const struct tg_model_objs *mo = r->mo;
	struct vmm *v = r->rt->vmm;
	int mb = r->plan.microbatch;
	for (int kr = 0; kr < mo->nmb * nstep * r->g.tp; kr++) { /* each member's copy */
		int kk = kr % (mo->nmb * nstep), member = kr / (mo->nmb * nstep);
		int k = kk % mo->nmb, it = iter + kk / mo->nmb;
		uint64_t xv = r->prog.obj[tg_mo_member(mo, mo->X, kk, member)].vid,
		         yv = r->prog.obj[tg_mo_member(mo, mo->Y, kk, member)].vid;
		void *x = NULL, *y = NULL;
		struct dev_event *ready;
		int rc = 0;
		if (xv)
			SP_CHECK(vmm_acquire(v, xv, VMM_HOST, VMM_OVERWRITE, &x, &ready));
		if (yv && (rc = vmm_acquire(v, yv, VMM_HOST, VMM_OVERWRITE, &y, &ready)) < 0) {
			if (xv && vmm_release(v, xv, VMM_HOST, NULL) < 0) {
			}
			return rc;
		}
		if (r->rt->data && x && y)
			rc = fn(r->m, r->m->data_arg, it, r->m->sample0 + k * mb, mb, x, y);
		if (xv) {
			int e = vmm_release(v, xv, VMM_HOST, NULL);
			if (!rc)
				rc = e;
		}
		if (yv) {
			int e = vmm_release(v, yv, VMM_HOST, NULL);
			if (!rc)
				rc = e;
		}
		if (rc < 0)
			return rc;
	}
	return 0;
}

/* Step j's loss, summed in (node, microbatch, position) order: one process's
 * order. */
static double mean_loss(const struct rt_run *r, int j)
{
	double sum = 0;
	size_t n = (size_t)r->mo->nmb * r->plan.microbatch * r->m->loss_floats;
	if (!r->rt->data)
		return NAN;
	if (rt_nodes_sum_floats(r->rt, r->losses + (size_t)j * n, n, &sum) < 0)
		return NAN;
	return sum / ((double)batch_total(r->m) * r->m->loss_floats);
}

/* Steps j >= n of the program are skipped (NULL: none). */
static const uint8_t *skip_steps(struct rt_run *r, int n)
{
	if (n >= r->mo->nstep)
		return NULL;
	for (int i = 0; i < r->prog.ntask; i++)
		r->skip[i] = r->targ[i].t->step >= n;
	return r->skip;
}

/* 2BW: swaps the vmm objects of every W and Wnew (an involution): after an
 * odd number of steps of a program of several (W then holds what the next
 * step's passes read again), and around an evaluation. */
static void swap_versions(struct rt_run *r)
{
	for (int i = 0; i < r->mo->nrep * r->mo->P * r->g.tp; i++) {
		if (r->mo->Wnew[i] < 0)
			continue;
		struct rt_obj *a = &r->prog.obj[r->mo->W[i]], *b = &r->prog.obj[r->mo->Wnew[i]];
		uint64_t v = a->vid;
		a->vid = b->vid;
		b->vid = v;
	}
}

/* Tensor parallelism: the members' model follows the caller's between steps
 * (its optimizer settings, data and evaluation data, as a run without reads
 * them live); only its layers are the members'. Clipping turned on after the
 * run opened is refused, as at open. */
static int members_sync(struct rt_run *r)
{
	if (r->m != &r->members)
		return 0;
	struct rt_layer *layers = r->members.layers;
	r->members = *r->full;
	r->members.layers = layers;
	if (r->full->opt.grad_clip > 0)
		return sp_error(
		    -ENOTSUP,
		    "tensor parallel %d: gradient clipping is not built with it (it was "
		    "turned on after the run opened)",
		    r->plan.tp);
	return 0;
}

static int steps_begin(struct rt_run *r, int n, const float *lr)
{
	SP_CHECK(members_sync(r));
	SP_CHECK_ARG(n >= 1 && n <= r->mo->nstep, "run: %d steps at once, the program runs 1..%d",
	             n, r->mo->nstep);
	for (int j = 0; j < n; j++) {
		r->step_opt[j] = r->m->opt;
		if (lr)
			r->step_opt[j].lr = lr[j];
	}
	SP_CHECK(write_inputs(r, r->m->data, r->iter, n));
	r->step_base = r->step;
	r->step += n;
	r->prog.skip = skip_steps(r, n);
	return 0;
}

static void steps_end(struct rt_run *r, int n, double *loss)
{
	r->prog.skip = NULL;
	r->iter += n;
	for (int j = 0; j < n; j++) {
		r->last_loss = mean_loss(r, j);
		if (loss)
			loss[j] = r->last_loss;
	}
	if (r->mo->nstep > 1 && n % 2)
		swap_versions(r);
}

int rt_run_step_begin(struct rt_run *r)
{
	return steps_begin(r, 1, NULL);
}

void rt_run_step_end(struct rt_run *r, double *loss)
{
	steps_end(r, 1, loss);
}

int rt_run_steps(struct rt_run *r, int n, const float *lr, double *loss)
{
	SP_CHECK_ARG(r, "rt_run_steps: NULL run");
	SP_CHECK(steps_begin(r, n, lr));
	int rc = rt_exec_run(r->rt, &r->prog, r->iter);
	if (rc < 0) {
		r->prog.skip = NULL;
		r->step -= n;
		return rc;
	}
	steps_end(r, n, loss);
	return 0;
}

int rt_run_step(struct rt_run *r, double *loss)
{
	return rt_run_steps(r, 1, NULL, loss);
}

/* Program p (its skipped tasks aside) on device dev alone, each task issued in
 * order once its inputs are issued: a one-device plan whose device 0 has
 * failed (SHARP's plans, after recovery) still runs on the devices left. */
static int run_on(struct rt_ctx *rt, struct rt_prog *p, int iter, int dev)
{
	struct rt_xs *x;
	SP_CHECK(rt_xs_open(rt, p, iter, &x));
	int rc = 0, next = 0;
	for (;;) {
		while (rc == 0 && next < p->ntask) {
			if (rt_xs_state(x, next) == RT_XS_DONE) { /* skipped */
				next++;
				continue;
			}
			rc = rt_xs_issue(x, next++, dev);
		}
		if (rc == 0)
			rc = rt_xs_reap(x);
		int left = 0;
		for (int t = 0; t < p->ntask && !left; t++)
			left = rt_xs_state(x, t) != RT_XS_DONE;
		if (rc < 0 || !left)
			break;
		if (vmm_progress(rt->vmm) < 0)
			SP_INFO(RT, "%s", sp_last_error());
		struct dev_event *ev[DEV_MAX + 1];
		int nev = rt_xs_heads(x, ev, DEV_MAX + 1), idx;
		if (nev)
			rc = dev_event_wait_any(ev, nev, &idx);
	}
	char msg[SP_ERROR_MSG_MAX];
	snprintf(msg, sizeof(msg), "%s", sp_last_error());
	rt_xs_close(x); /* waits for what was issued */
	int e = vmm_sync(rt->vmm);
	if (rc < 0)
		return sp_error(rc, "%s", msg);
	if (e == 0)
		rt->st.iterations++; /* as rt_exec_run counts */
	return e;
}

static int read_obj(struct rt_run *r, const struct rt_obj *o, uint64_t off, uint64_t bytes,
                    void *out);

/* Layer l's bf16 weights at off of object o, widened to fp32 into out. */
static int read_widened(struct rt_run *r, int l, const struct rt_obj *o, uint64_t off, float *out)
{
	uint64_t n = rt_layer_nparams(&r->m->layers[l]);
	uint16_t *h = malloc(n * sizeof(uint16_t) + 1);
	if (!h)
		return sp_error(-ENOMEM, "state of model %s: out of memory", r->m->name);
	int rc = read_obj(r, o, off, n * sizeof(uint16_t), h);
	for (uint64_t k = 0; k < n && !rc; k++)
		out[k] = kn_bf16_to_f32(h[k]);
	free(h);
	return rc;
}

int rt_run_save(struct rt_run *r, void ***bufs)
{
	SP_CHECK_ARG(r && bufs, "rt_run_save: NULL argument");
	size_t n = 3 * (size_t)r->m->nlayers; /* RT_PARAMS_PREV: 2BW's, else none */
	if (!*bufs && !(*bufs = calloc(n, sizeof(void *))))
		return sp_error(-ENOMEM, "state of model %s", r->m->name);
	for (int l = 0; l < r->m->nlayers; l++)
		for (int w = RT_PARAMS; w <= RT_PARAMS_PREV; w++) {
			void **b = &(*bufs)[3 * l + w];
			uint64_t bytes = rt_run_state_bytes(r, l, (enum rt_state)w);
			if (!bytes)
				continue;
			int owner = rt_run_state_owner(r, l, (enum rt_state)w);
			int elsewhere = owner >= 0 && owner != r->plan.node_rank;
			/* ZeRO-1, another node's state: its optimizer state is not
			 * here, nothing to save; in bf16 its fp32 masters are not
			 * either, but the bf16 weights are, saved widened (writing
			 * them back rounds them to the same bits) */
			if (elsewhere && w != RT_PARAMS)
				continue;
			if (!*b && !(*b = malloc(bytes)))
				return sp_error(-ENOMEM, "state of model %s: %llu bytes",
				                r->m->name, (unsigned long long)bytes);
			int i = r->pack_of[l]; /* replica 0; its newest version (not O's masters) */
			const struct rt_obj *newest =
			    &r->prog.obj[r->mo->Wnew[i] >= 0 ? r->mo->Wnew[i] : r->mo->W[i]];
			if (elsewhere)
				SP_CHECK(read_widened(r, l, newest, r->poff[l], *b));
			else
				SP_CHECK(rt_run_read_state(r, l, (enum rt_state)w, *b));
		}
	return 0;
}

int rt_run_restore(struct rt_run *r, void *const *bufs)
{
	SP_CHECK_ARG(r && bufs, "rt_run_restore: NULL argument");
	for (int o = 0; o < r->prog.nobj; o++)
		if (r->prog.obj[o].vid)
			SP_CHECK(vmm_discard(r->rt->vmm, r->prog.obj[o].vid));
	for (int l = 0; l < r->m->nlayers; l++) /* PREV after PARAMS, which sets both */
		for (int w = RT_PARAMS; w <= RT_PARAMS_PREV; w++)
			if (bufs[3 * l + w])
				SP_CHECK(
				    rt_run_write_state(r, l, (enum rt_state)w, bufs[3 * l + w]));
	return 0;
}

void rt_run_save_free(const struct rt_run *r, void **bufs)
{
	for (int k = 0; bufs && k < 3 * r->m->nlayers; k++)
		free(bufs[k]);
	free(bufs);
}

int rt_run_eval(struct rt_run *r, int index, double *loss)
{
	SP_CHECK_ARG(r && index >= 0, "rt_run_eval: bad arguments");
	SP_CHECK(members_sync(r));
	SP_CHECK_ARG(r->m->eval_data, "rt_run_eval: model %s has no validation data", r->m->name);
	int n = r->prog.ntask;
	uint8_t *skip = calloc((size_t)n, 1);
	if (!skip)
		return sp_error(-ENOMEM, "rt_run_eval: out of memory");
	for (int i = 0; i < n; i++) { /* the first step's forwards */
		int k = r->targ[i].t->kind;
		skip[i] = (k != TG_FWD && k != TG_LOSS) || r->targ[i].t->step > 0;
	}
	int rc = write_inputs(r, r->m->eval_data, index, 1);
	int dev = 0; /* a one-device plan: the first device alive */
	while (r->plan.ndev == 1 && dev + 1 < r->rt->ndev && dev_failed(r->rt->dev, dev))
		dev++;
	if (rc == 0) {
		/* 2BW: the forwards read W, one update behind; evaluate the newest
		 * weights (a checkpoint's) instead, by giving the W objects the
		 * vmm objects of Wnew for this pass (no task of it touches Wnew) */
		swap_versions(r);
		r->prog.skip = skip;
		rc = dev ? run_on(r->rt, &r->prog, r->iter, dev)
		         : rt_exec_run(r->rt, &r->prog, r->iter);
		r->prog.skip = NULL;
		swap_versions(r);
	}
	free(skip);
	if (rc == 0 && loss)
		*loss = mean_loss(r, 0);
	return rc;
}

void rt_run_set_step(struct rt_run *r, int step)
{
	r->step = r->iter = step;
}

/* In bf16 (a layer with master_bytes) the parameters of the state are the
 * fp32 masters at the start of O, the optimizer state what follows them. */
uint64_t rt_run_state_bytes(const struct rt_run *r, int l, enum rt_state which)
{
	if (!r || l < 0 || l >= r->m->nlayers)
		return 0;
	const struct rt_layer *ly = &r->full->layers[l]; /* a shard's: the whole block's */
	if (which == RT_PARAMS_PREV)
		return r->mo->Wnew[r->pack_of[l]] >= 0 ? rt_layer_nparams(ly) * sizeof(float) : 0;
	if (which == RT_PARAMS)
		return ly->master_bytes ? ly->master_bytes : ly->param_bytes;
	return ly->optim_bytes - ly->master_bytes;
}

/* Replica rep's object (tensor parallelism: member mem's) and offset of layer
 * l's state. */
static const struct rt_obj *state_obj(const struct rt_run *r, int l, enum rt_state which, int rep,
                                      int mem, uint64_t *off)
{
	int i = rep * r->mo->P + r->pack_of[l];
	uint64_t master = r->m->layers[l].master_bytes;
	if (which == RT_PARAMS_PREV) { /* 2BW: the version the passes read */
		*off = r->poff[l];
		return &r->prog.obj[r->mo->W[i] + mem];
	}
	if (which == RT_PARAMS && !master) { /* 2BW: the newest version */
		*off = r->poff[l];
		return &r->prog.obj[(r->mo->Wnew[i] >= 0 ? r->mo->Wnew[i] : r->mo->W[i]) + mem];
	}
	*off = r->ooff[l] + (which == RT_PARAMS ? 0 : master);
	return &r->prog.obj[r->mo->O[i] + mem];
}

/* Tensor parallelism: member mem's piece of layer l's state `whole` (the
 * whole block's, llm.c's layout), as its object holds it, into piece
 * (to_piece), or back into whole; layers that are no shard: the whole. */
static void tp_piece(const struct rt_run *r, int l, enum rt_state which, int mem, void *whole,
                     void *piece, int to_piece)
{
	const struct rt_layer *ly = &r->m->layers[l];
	uint64_t np = rt_layer_nparams(ly), nfull = rt_layer_nparams(&r->full->layers[l]);
	uint64_t bytes = which == RT_OPTIM ? ly->optim_bytes - ly->master_bytes : np * 4;
	if (!tp_block(ly)) {
		if (to_piece)
			memcpy(piece, whole, bytes);
		else
			memcpy(whole, piece, bytes);
		return;
	}
	for (uint64_t h = 0; h < bytes / (np * 4); h++) /* AdamW: m, then v */
		kn_block_shard_copy(ly->gpt.C, ly->gpt.tp_shards, mem, sizeof(float),
		                    (float *)whole + h * nfull, (float *)piece + h * np, to_piece);
}

/* The bytes of member mem's piece of layer l's state. */
static uint64_t piece_bytes(const struct rt_run *r, int l, enum rt_state which)
{
	const struct rt_layer *ly = &r->m->layers[l];
	if (which == RT_OPTIM)
		return ly->optim_bytes - ly->master_bytes;
	return ly->master_bytes ? ly->master_bytes : rt_layer_nparams(ly) * sizeof(float);
}

/* Writes bytes of in at off of object o, through its host copy. */
static int write_host(struct rt_run *r, const struct rt_obj *o, uint64_t off, const void *in,
                      uint64_t bytes)
{
	void *p;
	struct dev_event *ready;
	SP_CHECK(vmm_acquire(r->rt->vmm, o->vid, VMM_HOST, VMM_WRITE, &p, &ready));
	memcpy((char *)p + off, in, bytes);
	return vmm_release(r->rt->vmm, o->vid, VMM_HOST, NULL);
}

/* 2BW: layer l's older version from fp32 in (rounded to bf16 in bf16), into
 * every replica's W. */
static int write_prev(struct rt_run *r, int l, const void *in)
{
	const struct rt_layer *ly = &r->m->layers[l];
	SP_CHECK_ARG(rt_run_state_bytes(r, l, RT_PARAMS_PREV),
	             "rt_run_write_state: layer %s has one weight version (not a 2bw plan)",
	             ly->name);
	uint64_t n = rt_layer_nparams(ly);
	uint16_t *w = NULL;
	if (rt_layer_dtype(ly) == KN_BF16) {
		if (!(w = malloc(n * sizeof(uint16_t) + 1)))
			return sp_error(-ENOMEM, "rt_run_write_state: %s", ly->name);
		for (uint64_t i = 0; i < n; i++)
			w[i] = kn_f32_to_bf16(((const float *)in)[i]);
	}
	int rc = 0;
	void *piece = tp_block(ly) ? malloc(piece_bytes(r, l, RT_PARAMS) + 1) : NULL;
	if (tp_block(ly) && !piece)
		rc = sp_error(-ENOMEM, "rt_run_write_state: %s", ly->name);
	for (int mem = 0; mem < r->g.tp && !rc; mem++) {
		if (piece) /* fp32 only */
			tp_piece(r, l, RT_PARAMS, mem, (void *)in, piece, 1);
		for (int rep = 0; rep < r->mo->nrep && !rc; rep++) {
			uint64_t off;
			const struct rt_obj *o = state_obj(r, l, RT_PARAMS_PREV, rep, mem, &off);
			rc = write_host(r, o, off,
			                piece ? piece
			                : w   ? (const void *)w
			                      : in,
			                ly->param_bytes);
		}
	}
	free(piece);
	free(w);
	return rc;
}

int rt_run_state_owner(const struct rt_run *r, int l, enum rt_state which)
{
	if (!r || l < 0 || l >= r->m->nlayers)
		return -1;
	if (which == RT_PARAMS_PREV)
		return -1; /* every node holds the weights */
	int in_o = which == RT_OPTIM || r->m->layers[l].master_bytes;
	return in_o && r->plan.zero && r->plan.nodes > 1 ? tg_pack_owner(&r->plan, r->pack_of[l])
	                                                 : -1;
}

int rt_run_write_state(struct rt_run *r, int l, enum rt_state which, const void *in)
{
	SP_CHECK_ARG(r && in && l >= 0 && l < r->m->nlayers, "rt_run_write_state: bad arguments");
	SP_CHECK_ARG(r->rt->data, "rt_run_write_state: the model backend holds no data");
	const struct rt_layer *ly = &r->m->layers[l];
	uint64_t bytes = rt_run_state_bytes(r, l, which), off;
	if (which == RT_PARAMS_PREV)
		return write_prev(r, l, in);
	int owner = rt_run_state_owner(r, l, which);
	if (owner >= 0 && owner != r->plan.node_rank) { /* ZeRO-1: another node's */
		if (which == RT_OPTIM)
			return 0;
		which = RT_PARAMS; /* bf16: the weights here, the masters there */
	}
	int masters_here = owner < 0 || owner == r->plan.node_rank;
	uint16_t *w = NULL; /* bf16 masters: the weights are their rounding */
	if (which == RT_PARAMS && ly->master_bytes && bytes) {
		uint64_t n = ly->master_bytes / sizeof(float);
		if (!(w = malloc(n * sizeof(uint16_t))))
			return sp_error(-ENOMEM, "rt_run_write_state: %s", ly->name);
		for (uint64_t i = 0; i < n; i++)
			w[i] = kn_f32_to_bf16(((const float *)in)[i]);
	}
	int rc = 0;
	/* tensor parallelism: each member's piece (every member holds the
	 * layers that are no shard: the whole state each) */
	void *piece = tp_block(ly) ? malloc(piece_bytes(r, l, which) + 1) : NULL;
	if (tp_block(ly) && !piece)
		rc = sp_error(-ENOMEM, "rt_run_write_state: %s", ly->name);
	for (int mem = 0; mem < r->g.tp && bytes && !rc; mem++) {
		const void *src = in;
		uint64_t n = bytes;
		if (piece) {
			tp_piece(r, l, which, mem, (void *)in, piece, 1);
			src = piece, n = piece_bytes(r, l, which);
		}
		for (int rep = 0; rep < r->mo->nrep && !rc; rep++) {
			const struct rt_obj *o = state_obj(r, l, which, rep, mem, &off);
			int i = rep * r->mo->P + r->pack_of[l];
			if (masters_here)
				rc = write_host(r, o, off, src, n);
			if (w && !rc)
				rc = write_host(r, &r->prog.obj[r->mo->W[i] + mem], r->poff[l], w,
				                ly->param_bytes);
			/* 2BW: both versions become these weights, as at step 0 (a
			 * caller with the older version writes RT_PARAMS_PREV next).
			 * In fp32 o was Wnew, in bf16 the rounding went to W above:
			 * the other one now */
			if (!rc && which == RT_PARAMS && r->mo->Wnew[i] >= 0)
				rc = write_host(
				    r, &r->prog.obj[(w ? r->mo->Wnew[i] : r->mo->W[i]) + mem],
				    r->poff[l], w ? (const void *)w : src, ly->param_bytes);
		}
	}
	free(piece);
	free(w);
	return rc;
}

int rt_run_read_params(struct rt_run *r, int l, void *out)
{
	return rt_run_read_state(r, l, RT_PARAMS, out);
}

int rt_run_read_state(struct rt_run *r, int l, enum rt_state which, void *out)
{
	SP_CHECK_ARG(r && out && l >= 0 && l < r->m->nlayers, "rt_run_read_state: bad arguments");
	SP_CHECK_ARG(r->rt->data, "rt_run_read_state: the model backend holds no data");
	int owner = rt_run_state_owner(r, l, which);
	if (owner >= 0 && owner != r->plan.node_rank)
		return sp_error(-ENODATA,
		                "rt_run_read_state: layer %d's %s is on node %d (ZeRO-1), not here "
		                "(node %d)",
		                l, which == RT_OPTIM ? "optimizer state" : "fp32 master weights",
		                owner, r->plan.node_rank);
	uint64_t off, bytes = rt_run_state_bytes(r, l, which);
	const struct rt_obj *o = state_obj(r, l, which, 0, 0, &off);
	if (!bytes)
		return 0;
	if (tp_block(&r->m->layers[l])) { /* the members' pieces, put together */
		uint64_t n = piece_bytes(r, l, which);
		void *piece = malloc(n + 1);
		if (!piece)
			return sp_error(-ENOMEM, "rt_run_read_state: layer %d", l);
		int rc = 0;
		for (int mem = 0; mem < r->g.tp && !rc; mem++) {
			o = state_obj(r, l, which, 0, mem, &off);
			rc = read_obj(r, o, off, n, piece);
			if (!rc)
				tp_piece(r, l, which, mem, out, piece, 0);
		}
		free(piece);
		return rc;
	}
	if (which == RT_PARAMS_PREV && rt_layer_dtype(&r->m->layers[l]) == KN_BF16)
		return read_widened(r, l, o, off, out); /* the bf16 weights, widened */
	return read_obj(r, o, off, bytes, out);
}

/* bytes at off of object o into out: through the host, else a device holding
 * it, else the disk. */
static int read_obj(struct rt_run *r, const struct rt_obj *o, uint64_t off, uint64_t bytes,
                    void *out)
{
	void *p;
	struct dev_event *ready;
	int rc = vmm_acquire(r->rt->vmm, o->vid, VMM_HOST, VMM_READ, &p, &ready);
	if (rc == 0) {
		memcpy(out, (char *)p + off, bytes);
		return vmm_release(r->rt->vmm, o->vid, VMM_HOST, NULL);
	}
	/* no room on the host (its dirty copies cannot go down to a failing
	 * disk): a device that holds the weights gives them directly ... */
	char why[SP_ERROR_MSG_MAX];
	snprintf(why, sizeof(why), "%s", sp_last_error());
	uint32_t where = vmm_obj_where(r->rt->vmm, o->vid);
	for (int d = 0; d < r->rt->ndev; d++) {
		if (!(where & (1u << d)) ||
		    vmm_acquire(r->rt->vmm, o->vid, d, VMM_READ, &p, &ready) < 0)
			continue;
		struct dev_stream *s = r->rt->compute[d];
		int e = ready ? dev_stream_wait_event(s, ready) : 0;
		if (e == 0)
			e = dev_memcpy_async(s, out, DEV_HOST, (char *)p + off, d, bytes);
		if (e == 0)
			e = dev_stream_sync(s);
		int e2 = vmm_release(r->rt->vmm, o->vid, d, NULL);
		return e < 0 ? e : e2;
	}
	/* ... or the disk, straight into a buffer of our own */
	char *buf = malloc(o->bytes);
	if (buf && vmm_read_disk(r->rt->vmm, o->vid, buf) == 0) {
		memcpy(out, buf + off, bytes);
		free(buf);
		return 0;
	}
	free(buf);
	return sp_error(rc, "%s", why);
}
