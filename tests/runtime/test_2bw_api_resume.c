/* tests/runtime/test_2bw_api_resume.c — a 2bw model checkpointed and resumed
 * through the public API, as include/spill.h documents it: every state
 * spill_model_read_state gives (SPILL_STATE_PARAMS, _OPTIM, and under 2bw
 * _PARAMS_PREV, the older weight version the next step's passes read) written
 * in enum order into a fresh model, then spill_model_set_step, continues the
 * run bit for bit; under 1f1b first (the recipe itself is right). An
 * adversary's test: before SPILL_STATE_PARAMS_PREV existed the resumed 2bw
 * run restarted the delay (writing PARAMS sets both versions), with no error. */
#include "include/spill.h"
#include "common/error.h"
#include "tests/test.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct spill_ctx *open_host(void)
{
	struct spill_options o = {.backend = "host",
	                          .devices = 2,
	                          .device_mem = 64 << 20,
	                          .host_mem = 64 << 20,
	                          .threads = 1};
	struct spill_ctx *c;
	CHECK_MSG(spill_open(&o, &c) == 0, "%s", spill_last_error());
	return c;
}

static struct spill_model *model(struct spill_ctx *c, const char *sched)
{
	struct spill_gpt_config gc = {
	    .layers = 2, .heads = 2, .channels = 32, .vocab = 64, .seq = 8, .batch = 4, .seed = 1};
	struct spill_model *m;
	CHECK_OK(spill_model_gpt(c, &gc, &m));
	struct spill_plan p = {.schedule = sched, .devices = 2, .microbatch = 1, .packs = 2};
	CHECK_MSG(spill_model_plan(m, &p) == 0, "%s", spill_last_error());
	return m;
}

/* Steps 0..5 uninterrupted, and a run resumed after step 3 from the state the
 * API gives: 1 when the resumed losses are the uninterrupted ones. */
static int resumes(const char *sched, double *want, double *got)
{
	struct spill_ctx *c = open_host();
	struct spill_model *a = model(c, sched), *b = model(c, sched), *r = model(c, sched);
	double la[6], l;
	for (int s = 0; s < 6; s++)
		CHECK_OK(spill_model_step(a, &la[s]));
	for (int s = 0; s < 3; s++)
		CHECK_OK(spill_model_step(b, &l));
	int L = spill_model_layers(b);
	for (int i = 0; i < L; i++)
		for (int w = SPILL_STATE_PARAMS; w <= SPILL_STATE_PARAMS_PREV; w++) {
			size_t n = spill_model_state_bytes(b, i, (enum spill_state)w);
			void *buf = malloc(n + 4);
			CHECK_OK(spill_model_read_state(b, i, (enum spill_state)w, buf, n));
			CHECK_OK(spill_model_write_state(r, i, (enum spill_state)w, buf, n));
			free(buf);
		}
	CHECK_OK(spill_model_set_step(r, 3));
	int same = 1;
	for (int s = 3; s < 6; s++) {
		CHECK_OK(spill_model_step(r, &l));
		if (l != la[s])
			same = 0;
		if (s == 3) {
			*want = la[s];
			*got = l;
		}
	}
	spill_model_destroy(a);
	spill_model_destroy(b);
	spill_model_destroy(r);
	spill_close(c);
	return same;
}

int main(void)
{
	double w, g;
	CHECK_MSG(resumes("1f1b", &w, &g), "1f1b resumed through the API: step 3 %.9g, not %.9g", g,
	          w);
	printf("1f1b: resumed through the public API bit for bit\n");
	int ok = resumes("2bw", &w, &g);
	printf("2bw: resumed through the public API, step 3 loss %.9g, uninterrupted %.9g\n", g, w);
	CHECK_MSG(ok,
	          "2bw resumed through spill_model_read_state/write_state/set_step (spill.h's "
	          "recipe) does not continue the run: step 3 loss %.9g, uninterrupted %.9g",
	          g, w);
	TEST_PASS();
}
