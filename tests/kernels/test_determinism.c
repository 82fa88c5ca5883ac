/* tests/kernels/test_determinism.c — the CPU kernels are bit-exact run to run
 * for a fixed thread count: two runs of 2 training steps of a small GPT-2
 * (forward, backward, AdamW) from the same start give identical losses,
 * gradients and parameters (compared with memcmp), with 1 and with 2 threads. */
#include "tests/kernels/util.h"
#include "tests/test.h"

#include <string.h>

static void run(int threads, float losses[2], float *params, float *grads, size_t np)
{
	const struct g2_exec *ex = &tk_cpu_exec;
	struct kn_model_config cfg = {.maxT = 64, .V = 256, .L = 2, .NH = 4, .C = 64};
	struct g2_model m;
	CHECK_OK(kn_cpu_set_threads(threads));
	CHECK(kn_cpu_threads() == threads);
	CHECK(g2_model_create(ex, &cfg, 4, 64, &m) == 0);
	CHECK(m.nparams == np);
	struct tk_rng r = {42};
	tk_init_model(&r, &m);
	for (int i = 0; i < m.B * m.T; i++) {
		m.tokens[i] = (int)(tk_u32(&r) % (uint32_t)cfg.V);
		m.targets[i] = (int)(tk_u32(&r) % (uint32_t)cfg.V);
	}
	for (int step = 0; step < 2; step++) {
		g2_zero(ex, m.grads, m.nparams);
		g2_model_forward(ex, &m);
		losses[step] = (float)tk_mean_loss(&m);
		g2_model_backward(ex, &m);
		g2_model_update(ex, &m, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, step + 1);
	}
	memcpy(params, m.params, np * 4);
	memcpy(grads, m.grads, np * 4);
	g2_model_destroy(ex, &m);
}

int main(void)
{
	struct kn_model_config cfg = {.maxT = 64, .V = 256, .L = 2, .NH = 4, .C = 64};
	size_t np = g2_model_nparams(&cfg);
	float *p[2], *g[2], l[2][2];
	for (int i = 0; i < 2; i++) {
		p[i] = malloc(np * 4);
		g[i] = malloc(np * 4);
		CHECK(p[i] && g[i]);
	}
	float *p1 = malloc(np * 4);
	CHECK(p1);
	for (int threads = 1; threads <= 2; threads++) {
		run(threads, l[0], p[0], g[0], np);
		if (threads == 1)
			memcpy(p1, p[0], np * 4);
		else /* information only: the contract is per thread count */
			printf("1 vs 2 threads: parameters %s\n",
			       memcmp(p1, p[0], np * 4) == 0 ? "identical" : "differ");
		run(threads, l[1], p[1], g[1], np);
		printf("threads %d: losses %.7f %.7f / %.7f %.7f\n", threads, l[0][0], l[0][1],
		       l[1][0], l[1][1]);
		CHECK(l[0][0] == l[1][0] && l[0][1] == l[1][1]);
		CHECK_MSG(memcmp(g[0], g[1], np * 4) == 0, "gradients differ (threads %d)",
		          threads);
		CHECK_MSG(memcmp(p[0], p[1], np * 4) == 0, "parameters differ (threads %d)",
		          threads);
	}
	for (int i = 0; i < 2; i++)
		free(p[i]), free(g[i]);
	free(p1);
	TEST_PASS();
}
