/* tests/runtime/test_tp.c — tensor parallelism end to end (issue 34):
 * blocks split over t = 2 and 4 emulated devices per pipeline stage, every
 * member's exchanges between its segments on the devices' streams, give the
 * bits of the reference loop in the tensor-parallel form (kn_model_config
 * .tp_form): every step's loss and every layer's final weights and AdamW
 * state (the members' pieces put together), for 1f1b, gpipe, interleaved and
 * 2bw (flush every step and every 2), 1 and 2 stages, under eviction on the
 * host backend (from 1.5x the largest task's working set down until the vmm
 * evicts). Also: the widened graph (members, devices, sets) validates; a
 * state written and read back through the members is the same; bad plans
 * (data-parallel schedules, recomputation, a model not in tp form, t not
 * dividing the devices) are refused with one line. */
#include "kernels/kernels.h"
#include "runtime/runtime.h"
#include "tests/test.h"

#include <inttypes.h>
#include <string.h>

#define STEPS 3

static struct kn_model_config cfg = {.maxT = 8, .V = 64, .L = 4, .NH = 4, .C = 32, .tp_form = 1};
static const int T = 8, BATCH = 8;

static struct rt_ctx *open_rt(int ndev, uint64_t budget)
{
	struct sp_params sp;
	sp_params_defaults(&sp);
	struct rt_config c;
	CHECK_OK(rt_config_from_params(&sp, &c));
	c.dev.backend = DEV_BACKEND_HOST;
	c.dev.ndevices = ndev;
	c.dev.device_mem = 64 << 20;
	c.vmm.device_mem = budget;
	c.vmm.host_mem = 64 << 20;
	c.vmm.max_objects = 8192;
	c.threads = 1;
	struct rt_ctx *rt;
	CHECK_OK(rt_open(&c, &rt));
	return rt;
}

struct ref_result {
	double loss[STEPS];
	float *w[16], *o[16];
};

static void reference(const struct rt_model *m, int mb, int twobw, struct ref_result *out)
{
	struct rt_reference *r;
	CHECK_OK(rt_reference_open(m, 1, mb, 42, &r));
	if (twobw)
		CHECK_OK(rt_reference_set_2bw(r));
	for (int s = 0; s < STEPS; s++)
		CHECK_OK(rt_reference_step(r, s, &out->loss[s]));
	for (int l = 0; l < m->nlayers; l++) {
		const struct rt_layer *ly = &m->layers[l];
		out->w[l] = malloc(ly->param_bytes);
		out->o[l] = malloc(ly->optim_bytes);
		memcpy(out->w[l], r->params[l], ly->param_bytes);
		memcpy(out->o[l], r->optim[l], ly->optim_bytes);
	}
	rt_reference_close(r);
}

static const char *describe(const struct tg_plan *p)
{
	static char s[96];
	snprintf(s, sizeof(s), "%s, %d stage(s) x tp %d, %d packs%s", tg_sched_name(p->sched),
	         p->ndev / p->tp, p->tp, p->npacks, p->flush_every > 1 ? ", flush every 2" : "");
	return s;
}

static int run(const struct rt_model *m, const struct tg_plan *plan, uint64_t budget,
               const struct ref_result *ref, int64_t *evictions)
{
	struct rt_ctx *rt = open_rt(plan->ndev, budget);
	struct rt_run *run;
	CHECK_OK(rt_run_open(rt, m, plan, 42, &run));
	for (int s = 0; s < STEPS;) {
		int n = plan->flush_every > 1 && s + 2 <= STEPS ? 2 : 1;
		double loss[2];
		int rc = rt_run_steps(run, n, NULL, loss);
		if (rc == -ENOMEM && s == 0) {
			rt_run_close(run);
			rt_close(rt);
			return rc;
		}
		CHECK_MSG(rc == 0, "%s: %s", describe(plan), sp_last_error());
		for (int j = 0; j < n; j++, s++)
			CHECK_MSG(loss[j] == ref->loss[s],
			          "%s, budget %" PRIu64 ": step %d loss %.9g, "
			          "reference %.9g",
			          describe(plan), budget, s, loss[j], ref->loss[s]);
	}
	for (int l = 0; l < m->nlayers; l++) {
		const struct rt_layer *ly = &m->layers[l];
		CHECK(rt_run_state_bytes(run, l, RT_PARAMS) == ly->param_bytes);
		CHECK(rt_run_state_bytes(run, l, RT_OPTIM) == ly->optim_bytes);
		void *w = malloc(ly->param_bytes), *o = malloc(ly->optim_bytes);
		CHECK_OK(rt_run_read_params(run, l, w));
		CHECK_OK(rt_run_read_state(run, l, RT_OPTIM, o));
		CHECK_MSG(!memcmp(w, ref->w[l], ly->param_bytes), "%s: layer %s weights differ",
		          describe(plan), ly->name);
		CHECK_MSG(!memcmp(o, ref->o[l], ly->optim_bytes),
		          "%s: layer %s AdamW state "
		          "differs",
		          describe(plan), ly->name);
		free(w), free(o);
	}
	struct vmm_stats st;
	vmm_stats_get(rt->vmm, &st);
	*evictions = st.evictions.total;
	printf("  %-44s budget %7" PRIu64 ": %4" PRId64 " evictions, %7" PRIu64 " B exchanged\n",
	       describe(plan), budget, st.evictions.total, rt->st.tp_bytes);
	rt_run_close(run);
	rt_close(rt);
	return 0;
}

/* The largest working set of one member's task under plan. */
static uint64_t working_set(const struct rt_model *m, const struct tg_plan *p)
{
	struct rt_model mm;
	CHECK_OK(rt_model_gpt_members(m, p->tp, &mm));
	struct tg_layer tl[16];
	struct tg_model tm;
	rt_model_tg(&mm, tl, &tm);
	struct tg_graph g;
	CHECK_OK(tg_graph_build(&tm, 1, p, &g));
	CHECK_OK(tg_graph_validate(&g));
	CHECK(g.ndev == p->ndev && g.tp == p->tp);
	int sets = 0;
	for (int i = 0; i < g.ntask; i++) {
		const struct tg_task *t = &g.task[i];
		CHECK(t->member == i % p->tp);
		CHECK(t->dev < 0 || t->dev % p->tp == t->member);
		sets += t->tp_set >= 0 && t->member == 0;
	}
	CHECK(sets > 0);
	uint64_t ws = tg_graph_min_capacity(&g, NULL);
	tg_graph_free(&g);
	free(mm.layers);
	return ws;
}

static void transparency(const struct rt_model *m, int quick)
{
	static const int scheds[] = {TG_1F1B, TG_GPIPE, TG_INTERLEAVED, TG_2BW, TG_2BW};
	int cases = 0;
	for (int tp = 2; tp <= 4; tp *= 2)
		for (int stages = 1; stages <= 2; stages++)
			for (int si = 0; si < 5; si++) {
				int s = scheds[si];
				if (quick && tp == 4 && stages == 2 && si > 1)
					continue;
				struct tg_plan p = {.sched = s,
				                    .ndev = stages * tp,
				                    .tp = tp,
				                    .npacks =
				                        s == TG_INTERLEAVED ? 2 * stages : stages,
				                    .microbatch = 2,
				                    .group = 1,
				                    .flush_every = si == 4 ? 2 : 0};
				if (s == TG_INTERLEAVED && stages == 1)
					continue; /* one device a stage: nothing to interleave */
				for (int i = 0; i < p.npacks; i++)
					p.pack_end[i] = m->nlayers * (i + 1) / p.npacks;
				struct ref_result ref;
				reference(m, p.microbatch, s == TG_2BW, &ref);
				uint64_t ws = working_set(m, &p), b = ws * 3 / 2;
				int64_t ev = 0;
				int rc = run(m, &p, b, &ref, &ev);
				while (rc == 0 && ev == 0 && b > ws / 2) {
					b = b * 7 / 8;
					rc = run(m, &p, b, &ref, &ev);
				}
				CHECK_MSG(ev > 0, "%s: no evictions", describe(&p));
				for (int l = 0; l < m->nlayers; l++)
					free(ref.w[l]), free(ref.o[l]);
				cases++;
			}
	printf("%d plans bit-identical to the tp-form reference\n", cases);
}

/* A state written through the members reads back the same, and reaches
 * every member: a step from it matches the reference's from it. */
static void state_round_trip(const struct rt_model *m)
{
	struct tg_plan p = {
	    .sched = TG_1F1B, .ndev = 4, .tp = 2, .npacks = 2, .microbatch = 2, .group = 1};
	p.pack_end[0] = 3, p.pack_end[1] = 6;
	struct rt_ctx *rt = open_rt(4, 64 << 20);
	struct rt_run *run;
	CHECK_OK(rt_run_open(rt, m, &p, 7, &run));
	for (int l = 0; l < m->nlayers; l++) {
		uint64_t n = rt_run_state_bytes(run, l, RT_PARAMS);
		float *w = malloc(n), *back = malloc(n);
		for (uint64_t i = 0; i < n / 4; i++)
			w[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
		CHECK_OK(rt_run_write_state(run, l, RT_PARAMS, w));
		CHECK_OK(rt_run_read_params(run, l, back));
		CHECK_MSG(!memcmp(w, back, n), "layer %s: state written and read back differs",
		          m->layers[l].name);
		free(w), free(back);
	}
	rt_run_close(run);
	rt_close(rt);
}

static void bad_plans(struct rt_model *m)
{
	struct rt_ctx *rt = open_rt(4, 64 << 20);
	struct rt_run *run;
	struct tg_plan p = {
	    .sched = TG_DP_SWAP, .ndev = 4, .tp = 2, .npacks = 1, .microbatch = 1, .group = 1};
	p.pack_end[0] = m->nlayers;
	CHECK(rt_run_open(rt, m, &p, 1, &run) == -EINVAL);
	CHECK(strstr(sp_last_error(), "dp-swap") != NULL);
	p.sched = TG_1F1B, p.tp = 3;
	CHECK(rt_run_open(rt, m, &p, 1, &run) == -EINVAL);
	CHECK(strstr(sp_last_error(), "tensor parallel 3") != NULL);
	p.tp = 2, p.recompute = 1;
	CHECK(rt_run_open(rt, m, &p, 1, &run) == -ENOTSUP);
	CHECK(strstr(sp_last_error(), "recomputation") != NULL);
	p.recompute = 0;
	struct kn_model_config plain = cfg;
	plain.tp_form = 0;
	struct rt_model pm;
	CHECK_OK(rt_model_gpt(&plain, T, BATCH, &pm));
	CHECK(rt_run_open(rt, &pm, &p, 1, &run) == -EINVAL);
	CHECK(strstr(sp_last_error(), "tp_form") != NULL);
	rt_model_free(&pm);
	rt_close(rt);
}

int main(int argc, char **argv)
{
	int quick = argc > 1 && !strcmp(argv[1], "quick");
	struct rt_model m;
	CHECK_OK(rt_model_gpt(&cfg, T, BATCH, &m));
	m.opt.weight_decay = 0.1f;
	bad_plans(&m);
	state_round_trip(&m);
	transparency(&m, quick);
	rt_model_free(&m);
	TEST_PASS();
}
