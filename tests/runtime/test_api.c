/* tests/runtime/test_api.c — include/spill.h's errors are values: bad use is
 * -EINVAL with a message that says what is wrong; a budget too small for a
 * plan is -ENOMEM naming the task, the device, the bytes and the smallest
 * budget that would fit; a task callback's error stops the run with that
 * error and the graph runs again once the cause is gone; a disk fault injected
 * with SPILL_DISK_FAULT during a training step surfaces as the step's error
 * and every layer's weights stay readable; SPILL_THREADS reaches the CPU
 * kernels. (Leaks: this runs under ASAN too.) */
#include "include/spill.h"
#include "common/error.h"
#include "kernels/kernels.h"
#include "tests/test.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define EXPECT(call, err, text)                                                              \
	do {                                                                                 \
		int rc_ = (call);                                                            \
		CHECK_MSG(rc_ == (err), "%s: %d, expected %d (%s)", #call, rc_, (err),       \
		          spill_last_error());                                               \
		CHECK_MSG(strstr(spill_last_error(), (text)), "%s: message '%s' lacks '%s'", \
		          #call, spill_last_error(), (text));                                \
	} while (0)

static struct spill_ctx *open_host(uint64_t budget, const char *disk)
{
	struct spill_options o = {.backend = "host",
	                          .devices = 2,
	                          .device_mem = 64 << 20,
	                          .budget = budget,
	                          .host_mem = disk ? 2 << 20 : 64 << 20,
	                          .disk_path = disk,
	                          .threads = 1};
	struct spill_ctx *c;
	CHECK_MSG(spill_open(&o, &c) == 0, "%s", spill_last_error());
	return c;
}

static int fail_at = -1, calls;

static void add_one(const void *a)
{
	float *x = *(float *const *)a;
	x[0] += 1;
}

static int task_fn(const struct spill_launch *l, void *arg)
{
	if (calls++ == fail_at)
		return -EPROTO;
	float *x = spill_launch_ptr(l, 0);
	return spill_launch(spill_launch_stream(l), add_one, NULL, &x, sizeof(x), 1, 4);
}

static void graphs(void)
{
	struct spill_ctx *c = open_host(0, NULL);
	struct spill_graph *g;
	CHECK_OK(spill_graph_create(c, &g));
	int a, b, id;
	EXPECT(spill_graph_obj(g, 0, SPILL_KIND_ACTIVATION, "z", 0, &a), -EINVAL, "zero bytes");
	EXPECT(spill_graph_obj(g, 4, (enum spill_kind)42, "k", 0, &a), -EINVAL, "kind 42");
	EXPECT(spill_graph_obj(g, 4, SPILL_KIND_WEIGHT, "f", 64, &a), -EINVAL, "flags");
	CHECK_OK(spill_graph_obj(g, 4096, SPILL_KIND_WEIGHT, "a", SPILL_OBJ_OUTPUT, &a));
	CHECK_OK(spill_graph_obj(g, 4096, SPILL_KIND_WEIGHT, "b", 0, &b));
	struct spill_ref ra = {a, SPILL_WRITE};
	struct spill_task_desc d = {
	    .name = "t", .device = 5, .refs = &ra, .nrefs = 1, .fn = task_fn};
	EXPECT(spill_graph_task(g, &d, &id), -EINVAL, "device 5 is not in 0..1");
	d.device = SPILL_ANY_DEVICE;
	d.fn = NULL;
	EXPECT(spill_graph_task(g, &d, &id), -EINVAL, "no callback");
	d.fn = task_fn;
	struct spill_ref bad = {7, SPILL_READ};
	d.refs = &bad;
	EXPECT(spill_graph_task(g, &d, &id), -EINVAL, "object 7");
	d.refs = &ra;
	int dep = 3;
	d.deps = &dep;
	d.ndeps = 1;
	CHECK_OK(spill_graph_task(g, &d, &id)); /* a forward dependency: refused at run */
	EXPECT(spill_graph_run(g, 1), -EINVAL, "dependencies must be earlier tasks");
	spill_graph_destroy(g);

	/* a callback's error stops the run; the graph runs again afterwards */
	CHECK_OK(spill_graph_create(c, &g));
	CHECK_OK(spill_graph_obj(g, 4096, SPILL_KIND_WEIGHT, "a", SPILL_OBJ_OUTPUT, &a));
	d.deps = NULL;
	d.ndeps = 0;
	for (int i = 0; i < 4; i++)
		CHECK_OK(spill_graph_task(g, &d, &id));
	float x = 0;
	CHECK_OK(spill_graph_write(g, a, &x, sizeof(x)));
	EXPECT(spill_graph_read(g, a, &x, 8192), -EINVAL, "8192 bytes");
	calls = 0;
	fail_at = 2;
	EXPECT(spill_graph_run(g, 1), -EPROTO, "task 2 (t)");
	CHECK_OK(spill_graph_read(g, a, &x, sizeof(x)));
	CHECK_MSG(x == 2, "after the failed run: %g, the two tasks before it ran", (double)x);
	fail_at = -1;
	CHECK_OK(spill_graph_run(g, 2));
	CHECK_OK(spill_graph_read(g, a, &x, sizeof(x)));
	CHECK_MSG(x == 10, "after two more runs: %g", (double)x);
	spill_graph_destroy(g);
	spill_close(c);
}

/* Token streams for the API's data callbacks: a deterministic function of
 * (iteration, sample, split), vocab 64, T 8. */
static int token_batch(int split, int iter, int s0, int n, void *in, void *tg)
{
	int32_t *x = in, *y = tg;
	for (int k = 0; k < n; k++)
		for (int t = 0; t < 8; t++) {
			int v = (iter * 7 + (s0 + k) * 3 + t * (split + 1)) % 64;
			x[k * 8 + t] = v;
			y[k * 8 + t] = (v + split + 1) % 64;
		}
	return 0;
}
static int tokens(void *arg, int iter, int s0, int n, void *in, void *tg)
{
	(void)arg;
	return token_batch(0, iter, s0, n, in, tg);
}
static int tokens_val(void *arg, int iter, int s0, int n, void *in, void *tg)
{
	(void)arg;
	return token_batch(1, iter, s0, n, in, tg);
}

static void models(void)
{
	struct spill_options o = {.backend = "nonsense"};
	struct spill_ctx *c;
	EXPECT(spill_open(&o, &c), -EINVAL, "nonsense");
	c = open_host(0, NULL);
	struct spill_gpt_config gc = {
	    .layers = 2, .heads = 2, .channels = 32, .vocab = 64, .seq = 8, .batch = 6, .seed = 1};
	struct spill_model *m;
	CHECK_OK(spill_model_gpt(c, &gc, &m));
	struct spill_plan p = {.schedule = "round-robin"};
	EXPECT(spill_model_plan(m, &p), -EINVAL, "unknown schedule 'round-robin'");
	p = (struct spill_plan){.schedule = "dp-swap", .microbatch = 4};
	EXPECT(spill_model_plan(m, &p), -EINVAL, "batch 6 is not a multiple of microbatch 4");
	p = (struct spill_plan){.schedule = "gpipe", .microbatch = -1};
	EXPECT(spill_model_plan(m, &p), -EINVAL, "negative");
	float w[4];
	EXPECT(spill_model_read_params(m, 0, w, sizeof(w)), -EINVAL, "bytes of parameters");
	EXPECT(spill_model_read_params(m, 99, w, sizeof(w)), -EINVAL, "bad arguments");
	spill_model_destroy(m);
	/* the optimizer by name: plain SGD trains with no optimizer state */
	struct spill_gpt_config sg = gc;
	sg.optimizer = "adam";
	EXPECT(spill_model_gpt(c, &sg, &m), -EINVAL, "unknown optimizer 'adam'");
	sg.optimizer = "adamw";
	sg.momentum = 0.5f;
	EXPECT(spill_model_gpt(c, &sg, &m), -EINVAL, "momentum is an SGD setting");
	sg.optimizer = "sgd";
	sg.momentum = 0;
	sg.lr = 1.0f;
	CHECK_OK(spill_model_gpt(c, &sg, &m));
	p = (struct spill_plan){.schedule = "gpipe", .microbatch = 2};
	CHECK_OK(spill_model_plan(m, &p));
	double l0 = 0, l1 = 0;
	for (int s = 0; s < 12; s++) {
		double loss;
		CHECK_OK(spill_model_step(m, &loss));
		if (!s)
			l0 = loss;
		l1 = loss;
	}
	printf("plain SGD through the API: loss %.4f -> %.4f\n", l0, l1);
	CHECK(l1 < l0);
	spill_model_destroy(m);
	/* clipping and a learning rate set per step: two plans, the same bits; a
	 * threshold far below the gradients' norm changes the run */
	struct spill_gpt_config cc = gc;
	cc.grad_clip = -1;
	EXPECT(spill_model_gpt(c, &cc, &m), -EINVAL, "grad_clip");
	double losses[3][6];
	for (int v = 0; v < 3; v++) {
		cc.grad_clip = v < 2 ? 0.01f : 0;
		cc.weight_decay = 0.1f;
		CHECK_OK(spill_model_gpt(c, &cc, &m));
		p = (struct spill_plan){.schedule = v == 1 ? "1f1b" : "gpipe", .microbatch = 1};
		CHECK_OK(spill_model_plan(m, &p));
		EXPECT(spill_model_set_lr(m, 0), -EINVAL, "lr");
		for (int s = 0; s < 6; s++) {
			CHECK_OK(spill_model_set_lr(m, 1e-3f * (s + 1)));
			CHECK_OK(spill_model_step(m, &losses[v][s]));
		}
		spill_model_destroy(m);
	}
	CHECK(!memcmp(losses[0], losses[1], sizeof(losses[0])));
	CHECK_MSG(losses[0][5] != losses[2][5], "clip 0.01 changed nothing (%.9g)", losses[0][5]);
	printf("clip 0.01, lr warming up through the API: loss %.4f -> %.4f, the same on 2 plans\n",
	       losses[0][0], losses[0][5]);
	/* a checkpoint through the API: model a's state after 3 steps written
	 * into model b (another plan), which then continues as a does, bit for
	 * bit; validation batches leave the state alone */
	{
		struct spill_gpt_config dc = gc;
		dc.data = tokens;
		dc.eval_data = tokens_val;
		dc.grad_clip = 0.5f;
		struct spill_model *a, *b;
		CHECK_OK(spill_model_gpt(c, &dc, &a));
		CHECK_OK(spill_model_gpt(c, &dc, &b));
		p = (struct spill_plan){.schedule = "gpipe", .microbatch = 2};
		CHECK_OK(spill_model_plan(a, &p));
		p = (struct spill_plan){.schedule = "1f1b", .microbatch = 2, .update_on_cpu = 1};
		CHECK_OK(spill_model_plan(b, &p));
		double la, lb, ea, ea2;
		for (int s = 0; s < 3; s++)
			CHECK_OK(spill_model_step(a, &la));
		CHECK_OK(spill_model_eval(a, 0, &ea));
		for (int l = 0; l < spill_model_layers(a); l++)
			for (int which = 0; which < 2; which++) {
				enum spill_state st = (enum spill_state)which;
				size_t n = spill_model_state_bytes(a, l, st);
				void *buf = malloc(n + 1);
				CHECK_OK(spill_model_read_state(a, l, st, buf, n));
				CHECK_OK(spill_model_write_state(b, l, st, buf, n));
				EXPECT(spill_model_write_state(b, l, st, buf, n + 4), -EINVAL,
				       "bytes");
				free(buf);
			}
		CHECK_OK(spill_model_set_step(b, 3));
		CHECK_OK(spill_model_eval(b, 0, &ea2));
		CHECK_MSG(ea == ea2, "eval after the copy: %.9g vs %.9g", ea2, ea);
		for (int s = 0; s < 3; s++) {
			CHECK_OK(spill_model_step(a, &la));
			CHECK_OK(spill_model_step(b, &lb));
			/* another plan, the same microbatch: the same bits */
			CHECK_MSG(la == lb, "step %d: %.9g vs %.9g", s + 4, la, lb);
		}
		printf("state copied through the API: eval %.6f on both, step 6 %.7f / %.7f\n", ea,
		       la, lb);
		spill_model_destroy(a);
		spill_model_destroy(b);
		struct spill_gpt_config nc = gc;
		nc.eval_data = tokens_val;
		EXPECT(spill_model_gpt(c, &nc, &a), -EINVAL, "eval_data needs data");
		CHECK_OK(spill_model_gpt(c, &gc, &a));
		EXPECT(spill_model_eval(a, 0, &ea), -EINVAL, "no eval_data");
		spill_model_destroy(a);
	}
	/* bf16 mixed precision by name: the parameters read are the fp32 masters */
	struct spill_gpt_config bc = gc;
	bc.precision = "fp16";
	EXPECT(spill_model_gpt(c, &bc, &m), -EINVAL, "unknown precision 'fp16' (fp32, bf16)");
	bc.precision = "bf16";
	CHECK_OK(spill_model_gpt(c, &bc, &m));
	p = (struct spill_plan){.schedule = "gpipe", .microbatch = 2, .update_on_cpu = 1};
	CHECK_OK(spill_model_plan(m, &p));
	for (int s = 0; s < 12; s++) {
		double loss;
		CHECK_OK(spill_model_step(m, &loss));
		if (!s)
			l0 = loss;
		l1 = loss;
	}
	printf("bf16 through the API: loss %.4f -> %.4f\n", l0, l1);
	CHECK(l1 < l0);
	size_t nb = spill_model_param_bytes(m, 1);
	float *mw = malloc(nb);
	CHECK_OK(spill_model_read_params(m, 1, mw, nb));
	CHECK(nb == 4 * (size_t)(12 * 32 * 32 + 13 * 32)); /* a block's parameters, fp32 */
	CHECK(mw[0] != 1.0f); /* ln1w, trained away from its initial 1 */
	free(mw);
	spill_model_destroy(m);
	spill_close(c);

	/* a budget below the plan's largest layer: refused when packing (greedy
	 * packs) or when the executor meets the task (one layer per pack) */
	for (int packs = 0; packs <= 4; packs += 4) {
		c = open_host(64 << 10, NULL);
		CHECK_OK(spill_model_gpt(c, &gc, &m));
		p = (struct spill_plan){.schedule = "1f1b", .microbatch = 1, .packs = packs};
		int rc = spill_model_plan(m, &p);
		if (rc == 0)
			rc = spill_model_step(m, NULL);
		CHECK_MSG(rc == -ENOMEM, "%d: %s", rc, spill_last_error());
		const char *e = spill_last_error();
		CHECK_MSG(strstr(e, packs ? "task" : "layer") && strstr(e, "device ") &&
		              strstr(e, "needs") && strstr(e, "smallest device budget"),
		          "%s", e);
		printf("too small a budget, %s: %s\n",
		       packs ? "one layer per pack" : "greedy packs", e);
		spill_model_destroy(m);
		spill_close(c);
	}
}

/* A disk fault in the middle of training: the error comes back from the step
 * and the weights are still there, from the host, a device or the disk itself
 * (when every write fails, the host pool cannot make room for a layer whose
 * only copy is on disk). */
static void disk_fault(void)
{
	char dir[] = "/tmp/spill-test-api-XXXXXX";
	CHECK(mkdtemp(dir));
	for (int fault = 0; fault < 3; fault++) {
		/* the 3rd disk write fails with EIO, or every one from the 3rd on */
		if (fault)
			setenv("SPILL_DISK_FAULT", fault == 1 ? "write:3:EIO" : "write:3+:EIO", 1);
		else
			unsetenv("SPILL_DISK_FAULT");
		struct spill_ctx *c = open_host(2 << 20, dir);
		struct spill_gpt_config gc = {.layers = 4,
		                              .heads = 2,
		                              .channels = 64,
		                              .vocab = 256,
		                              .seq = 16,
		                              .batch = 4,
		                              .seed = 1};
		struct spill_model *m;
		CHECK_OK(spill_model_gpt(c, &gc, &m));
		struct spill_plan p = {.schedule = "harmony-pp", .microbatch = 1};
		int rc = spill_model_plan(m, &p);
		for (int s = 0; s < 3 && rc == 0; s++)
			rc = spill_model_step(m, NULL);
		struct spill_stats st;
		CHECK_OK(spill_stats(c, &st));
		printf("disk fault %s: %d (%s); %.1f KiB written to disk\n", fault ? "on" : "off",
		       rc, rc ? spill_last_error() : "ok", st.total[SPILL_LINK_H2DISK] / 1024.0);
		CHECK_MSG(st.total[SPILL_LINK_H2DISK] > 0, "the disk tier was not used");
		if (fault)
			CHECK_MSG(rc == -EIO, "%d: %s", rc, spill_last_error());
		else
			CHECK_OK(rc);
		/* every layer's weights come back, finite */
		CHECK(spill_model_layers(m) == gc.layers + 2); /* embedding, blocks, head */
		for (int l = 0; l < spill_model_layers(m); l++) {
			size_t n = spill_model_param_bytes(m, l);
			float *w = malloc(n);
			CHECK_MSG(spill_model_read_params(m, l, w, n) == 0, "layer %d: %s", l,
			          spill_last_error());
			for (size_t i = 0; i < n / sizeof(float); i++)
				CHECK_MSG(isfinite(w[i]), "layer %d [%zu] = %g", l, i,
				          (double)w[i]);
			free(w);
		}
		/* a passing fault passes: training goes on */
		if (fault == 1)
			CHECK_MSG(spill_model_step(m, NULL) == 0, "after the fault: %s",
			          spill_last_error());
		spill_model_destroy(m);
		spill_close(c);
	}
	unsetenv("SPILL_DISK_FAULT");
	rmdir(dir);
}

/* SPILL_THREADS reaches the CPU kernels when a context opens (it used to be
 * parsed and documented, and applied nowhere); the options override it. */
static void threads(void)
{
	setenv("SPILL_THREADS", "3", 1);
	struct spill_options o = {.backend = "host"};
	struct spill_ctx *c;
	CHECK_OK(spill_open(&o, &c));
	CHECK_MSG(kn_cpu_threads() == 3, "SPILL_THREADS=3, kernels use %d", kn_cpu_threads());
	spill_close(c);
	o.threads = 2;
	CHECK_OK(spill_open(&o, &c));
	CHECK(kn_cpu_threads() == 2);
	spill_close(c);
	unsetenv("SPILL_THREADS");
}

int main(void)
{
	threads();
	graphs();
	models();
	disk_fault();
	TEST_PASS();
}
