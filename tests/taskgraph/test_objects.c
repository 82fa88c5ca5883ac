/* tests/taskgraph/test_objects.c — the executor's view of a graph: every task's
 * read and write sets follow the order documented in taskgraph.h, rebuilt here
 * from the per-model object table (mobj) for every schedule; task replicas;
 * targets read by the last pack and LOSS; BWD reads its input with or without
 * recompute; FWD/LOSS/BWD unconstrained in DP modes; stash and work sizes of a
 * 3-layer pack; tg_graph_min_capacity on a
 * hand-computed case. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "taskgraph/taskgraph.h"
#include "tests/test.h"

#define MAXL 1024

/* The documented order, from the table; first[rep*P+pk] tracks the G chain. */
static void expect(const struct tg_model_objs *mo, const struct tg_task *t, int *first, int *r,
                   int *nr, int *w, int *nw)
{
	int P = mo->P, pk = t->pack, i = t->rep * P + pk;
	int tp = mo->tie_pack[pk], it = t->rep * P + tp;
	*nr = *nw = 0;
	switch (t->kind) {
	case TG_FWD:
		r[(*nr)++] = mo->W[i];
		if (tp >= 0)
			r[(*nr)++] = mo->W[it];
		for (int k = t->mb0; k < t->mb0 + t->nmb; k++) {
			r[(*nr)++] = pk ? mo->B[k * P + pk - 1] : mo->X[k];
			if (pk == P - 1)
				r[(*nr)++] = mo->Y[k];
			w[(*nw)++] = mo->S[k * P + pk];
			w[(*nw)++] = mo->B[k * P + pk];
		}
		break;
	case TG_LOSS:
		for (int k = t->mb0; k < t->mb0 + t->nmb; k++) {
			r[(*nr)++] = mo->B[k * P + P - 1];
			r[(*nr)++] = mo->Y[k];
			w[(*nw)++] = mo->B[k * P + P - 1];
			w[(*nw)++] = mo->L[k];
		}
		break;
	case TG_BWD:
		r[(*nr)++] = mo->W[i];
		if (tp >= 0)
			r[(*nr)++] = mo->W[it];
		if (!first[i])
			r[(*nr)++] = mo->G[i];
		w[(*nw)++] = mo->G[i]; /* the tied gradient is in its own G */
		first[i] = 0;
		break;
	case TG_ALLREDUCE:
		r[(*nr)++] = mo->G[i];
		w[(*nw)++] = mo->G[i];
		break;
	case TG_UPD: /* 2BW: the step is the newest version's, W its copy before it
		      * (read too: kept until the UPD, should the step fail there) */
		r[(*nr)++] = mo->Wnew[i] >= 0 ? mo->Wnew[i] : mo->W[i];
		r[(*nr)++] = mo->G[i];
		r[(*nr)++] = mo->O[i];
		if (mo->Wnew[i] >= 0)
			r[(*nr)++] = mo->W[i];
		for (int q = 0; q < P; q++) /* the packs tied to this one: their G */
			if (q != pk && mo->tie_pack[q] == pk)
				r[(*nr)++] = mo->G[t->rep * P + q];
		w[(*nw)++] = mo->Wnew[i] >= 0 ? mo->Wnew[i] : mo->W[i];
		w[(*nw)++] = mo->O[i];
		if (mo->Wnew[i] >= 0)
			w[(*nw)++] = mo->W[i];
		break;
	}
}

static void check_orders(const struct tg_model *md, const struct tg_plan *p, int last_tie)
{
	struct tg_graph g;
	CHECK_OK(tg_graph_build(md, 1, p, &g));
	CHECK_OK(tg_graph_validate(&g));
	CHECK(g.nmodels == 1 && g.mobj[0].id == md->id && g.mobj[0].P == p->npacks);
	const struct tg_model_objs *mo = &g.mobj[0];
	for (int pk = 0; pk < mo->P; pk++)
		CHECK(mo->tie_pack[pk] == (pk == mo->P - 1 ? last_tie : -1));
	int dp = p->sched == TG_DP_SWAP || p->sched == TG_HARMONY_DP;
	CHECK(mo->nrep == (dp ? p->ndev : 1) && mo->nmb == mo->nrep * mo->mper);
	static int first[MAXL], r[MAXL], w[MAXL];
	static char wseen[1 << 16];
	CHECK(g.nobj <= (int)sizeof(wseen));
	memset(wseen, 0, sizeof(wseen));
	for (int i = 0; i < mo->nrep * mo->P; i++) {
		first[i] = 1;
		CHECK(g.obj[mo->W[i]].kind == TG_O_WEIGHT && g.obj[mo->G[i]].kind == TG_O_GRAD &&
		      g.obj[mo->O[i]].kind == TG_O_OPT);
		/* two weight versions in 2BW, of the same bytes; one elsewhere */
		CHECK((p->sched == TG_2BW) == (mo->Wnew[i] >= 0));
		CHECK(mo->Wnew[i] < 0 || (g.obj[mo->Wnew[i]].kind == TG_O_WEIGHT &&
		                          g.obj[mo->Wnew[i]].bytes == g.obj[mo->W[i]].bytes));
	}
	for (int k = 0; k < mo->nmb; k++)
		CHECK(g.obj[mo->X[k]].kind == TG_O_INPUT && g.obj[mo->Y[k]].kind == TG_O_INPUT &&
		      g.obj[mo->L[k]].kind == TG_O_WORK);
	for (int id = 0; id < g.ntask; id++) { /* ids are emission order: the G chain's */
		const struct tg_task *t = &g.task[id];
		CHECK(t->id == id && t->model == md->id);
		CHECK(t->rep >= 0 && t->rep < mo->nrep);
		/* late binding: DP modes leave FWD, LOSS and BWD free; the rest is fixed */
		int fixed = !dp || t->kind == TG_UPD || t->kind == TG_ALLREDUCE;
		CHECK_MSG(t->constrained == fixed, "%s task %d kind %d constrained %d",
		          tg_sched_name(p->sched), id, t->kind, t->constrained);
		if (t->dev >= 0) /* the predicted placement: the replica's GPU, or pack mod N */
			CHECK(t->dev == (dp ? t->rep : t->pack % p->ndev));
		if (dp && t->mb0 >= 0 && (t->kind == TG_FWD || t->kind == TG_BWD))
			CHECK(t->mb0 / mo->mper == t->rep && t->rep == t->dev);
		int nr, nw;
		expect(mo, t, first, r, &nr, w, &nw);
		if (t->kind == TG_BWD) { /* per microbatch part, after the chain part */
			int P = mo->P, pk = t->pack;
			for (int k = t->mb0; k < t->mb0 + t->nmb; k++) {
				r[nr++] = mo->S[k * P + pk];
				r[nr++] = pk == P - 1 ? mo->B[k * P + pk] : mo->D[k * P + pk + 1];
				r[nr++] = pk ? mo->B[k * P + pk - 1] : mo->X[k]; /* always */
				if (pk == P - 1)
					r[nr++] = mo->Y[k];
				if (pk)
					w[nw++] = mo->D[k * P + pk];
			}
		}
		if (t->kind == TG_FWD || t->kind == TG_BWD) { /* a fresh work object, last */
			CHECK(t->work >= 0 && g.obj[t->work].kind == TG_O_WORK && !wseen[t->work]);
			wseen[t->work] = 1;
			w[nw++] = t->work;
		} else {
			CHECK(t->work == -1);
		}
		CHECK_MSG(nr == t->nread && nw == t->nwrite,
		          "task %d kind %d: %d/%d reads %d/%d writes", id, t->kind, t->nread, nr,
		          t->nwrite, nw);
		CHECK_MSG(!memcmp(r, t->read, (size_t)nr * sizeof(int)), "task %d reads", id);
		CHECK_MSG(!memcmp(w, t->write, (size_t)nw * sizeof(int)), "task %d writes", id);
	}
	/* the targets: read by exactly the last pack's FWD and BWD and by LOSS */
	for (int k = 0; k < mo->nmb; k++) {
		int seen[5] = {0};
		for (int id = 0; id < g.ntask; id++)
			for (int i = 0; i < g.task[id].nread; i++)
				if (g.task[id].read[i] == mo->Y[k]) {
					CHECK(g.task[id].pack == mo->P - 1);
					seen[g.task[id].kind]++;
				}
		CHECK(seen[TG_FWD] == 1 && seen[TG_BWD] == 1 && seen[TG_LOSS] == 1 &&
		      !seen[TG_UPD] && !seen[TG_ALLREDUCE]);
	}
	tg_graph_free(&g);
}

int main(void)
{
	struct tg_layer L[4];
	for (int i = 0; i < 4; i++)
		L[i] = (struct tg_layer){.name = "l",
		                         .param_bytes = 100 + i,
		                         .grad_bytes = 10,
		                         .opt_bytes = 40,
		                         .stash_bytes_per_sample = 7,
		                         .out_bytes_per_sample = 3,
		                         .fwd_flops_per_sample = 1,
		                         .bwd_flops_per_sample = 2};
	struct tg_model md = {.id = 3,
	                      .nlayers = 4,
	                      .layers = L,
	                      .in_bytes_per_sample = 5,
	                      .target_bytes_per_sample = 13,
	                      .loss_bytes_per_sample = 11};
	/* packs {0}, {1, 2}, {3}; tie 1: layer 3 (last pack) to layer 0 (pack 0), as
	 * GPT-2's LM head to the token embedding; tie 2: layer 2 to layer 1, inside a pack */
	for (int tie = 0; tie < 3; tie++)
		for (int s = 0; s < TG_NSCHED; s++)
			for (int rec = 0; rec < 2; rec++)
				for (int grp = 1; grp <= 2; grp++) {
					L[3].tied = tie == 1;
					L[3].tied_layer = 0;
					L[2].tied = tie == 2;
					L[2].tied_layer = 1;
					int dp = s == TG_DP_SWAP || s == TG_HARMONY_DP;
					struct tg_plan p = {.sched = s,
					                    .ndev = 2,
					                    .npacks = 3,
					                    .pack_end = {1, 3, 4},
					                    .microbatch = 2,
					                    .group = grp,
					                    .recompute = rec};
					md.batch = 4 * p.microbatch * (dp ? p.ndev : 1);
					check_orders(&md, &p, tie == 1 ? 0 : -1);
				}
	L[3].tied = L[2].tied = 0;

	/* one 3-layer pack, microbatch 2 (by hand, per the rules in taskgraph.h):
	 * stash = 2 * (7+9+2 stash + 3+5 interior outputs; layer 2's 100 is the boundary) = 52
	 * layer work 50+4*2 = 58, 10+30*2 = 70, 0+1*2 = 2: FWD work 70
	 * BWD work = 70 + 2 * 2 * max(3, 5) = 90; with recompute the stash again and the
	 * last layer's output, + 52 + 2*100 = 342, stash 0, and FWD work 70 + 52 = 122
	 * (the forward's stash as scratch) */
	struct tg_layer T[3] = {{.name = "a",
	                         .stash_bytes_per_sample = 7,
	                         .out_bytes_per_sample = 3,
	                         .work_bytes = 50,
	                         .work_bytes_per_sample = 4},
	                        {.name = "b",
	                         .stash_bytes_per_sample = 9,
	                         .out_bytes_per_sample = 5,
	                         .work_bytes = 10,
	                         .work_bytes_per_sample = 30},
	                        {.name = "c",
	                         .stash_bytes_per_sample = 2,
	                         .out_bytes_per_sample = 100,
	                         .work_bytes_per_sample = 1}};
	struct tg_model three = {.nlayers = 3, .layers = T, .batch = 2};
	for (int rec = 0; rec < 2; rec++) {
		struct tg_plan p = {.sched = TG_1F1B,
		                    .ndev = 1,
		                    .npacks = 1,
		                    .pack_end = {3},
		                    .microbatch = 2,
		                    .group = 1,
		                    .recompute = rec};
		struct tg_graph g;
		CHECK_OK(tg_graph_build(&three, 1, &p, &g));
		uint64_t fw = 0, bw = 0;
		for (int i = 0; i < g.ntask; i++) {
			if (g.task[i].kind == TG_FWD)
				fw = g.obj[g.task[i].work].bytes;
			if (g.task[i].kind == TG_BWD)
				bw = g.obj[g.task[i].work].bytes;
		}
		uint64_t st = g.obj[g.mobj[0].S[0]].bytes;
		printf("3-layer pack, recompute %d: stash %llu, FWD work %llu, BWD work %llu\n",
		       rec, (unsigned long long)st, (unsigned long long)fw, (unsigned long long)bw);
		CHECK(st == (rec ? 0 : 52) && fw == (rec ? 122u : 70u) && bw == (rec ? 342u : 90u));
		CHECK(g.obj[g.mobj[0].B[0]].bytes == 200);
		tg_graph_free(&g);
	}

	/* min capacity by hand: 2 layers, a pack each, one device, one microbatch of 1,
	 * input 5, target 13, logits 11, work 0. FWD0 W0+X+S0+B0 = 100+5+7+3 = 115;
	 * FWD1 W1+B0+Y+S1+B1 = 101+3+13+7+3 = 127; LOSS B1+Y+L = 3+13+11 = 27;
	 * BWD1 W1+S1+B1+B0+Y+G1+D1 = 101+7+3+3+13+10+3 = 140 (it reads its input B0 and
	 * the targets); BWD0 W0+S0+D1+X+G0 = 100+7+3+5+10 = 125; UPD W+G+O = 100+10+40 =
	 * 150 (pack 0), 151 (pack 1). */
	struct tg_model two = {.id = 0,
	                       .nlayers = 2,
	                       .layers = L,
	                       .batch = 1,
	                       .in_bytes_per_sample = 5,
	                       .target_bytes_per_sample = 13,
	                       .loss_bytes_per_sample = 11};
	struct tg_plan p = {.sched = TG_DP_SWAP,
	                    .ndev = 1,
	                    .npacks = 2,
	                    .pack_end = {1, 2},
	                    .microbatch = 1,
	                    .group = 1};
	struct tg_graph g;
	CHECK_OK(tg_graph_build(&two, 1, &p, &g));
	int at = -2;
	uint64_t cap = tg_graph_min_capacity(&g, &at);
	printf("min capacity %llu (task %d, kind %d pack %d)\n", (unsigned long long)cap, at,
	       g.task[at].kind, g.task[at].pack);
	CHECK(cap == 151 && g.task[at].kind == TG_UPD && g.task[at].pack == 1);
	struct tg_swap sw;
	CHECK_OK(tg_sim_swap(&g, cap, 0, &sw)); /* it runs at exactly that capacity */
	CHECK(tg_sim_swap(&g, cap - 1, 0, &sw) == -ENOMEM);
	p.upd_cpu = 1; /* host tasks do not count: the largest device task is BWD1 */
	tg_graph_free(&g);
	CHECK_OK(tg_graph_build(&two, 1, &p, &g));
	cap = tg_graph_min_capacity(&g, &at);
	CHECK(cap == 140 && g.task[at].kind == TG_BWD && g.task[at].pack == 1);
	tg_graph_free(&g);
	CHECK(tg_graph_min_capacity(NULL, &at) == 0 && at == -1);
	TEST_PASS();
}
