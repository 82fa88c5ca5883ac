/* tests/runtime/test_exec.c — the executor on raw programs (host backend).
 *
 * A chain of L tasks, each out_i = in_i + w_i (elementwise, in fp32 words),
 * with the weights in the host pool at the start, run on 2 emulated devices
 * whose budget holds a few objects: fixed devices, alternating devices (P2P)
 * and late-bound tasks; with and without prefetch, one and several
 * iterations. The result equals the sum computed on the host, evictions
 * happened, dead activations were discarded (never written back), and the
 * vmm's bytes equal the device layer's. Bad programs are -EINVAL naming the
 * task; a callback's error stops the run with that error; a budget smaller
 * than a task's working set is -ENOMEM naming the task and the smallest
 * budget. */
#include "runtime/runtime.h"
#include "tests/test.h"

#include <inttypes.h>
#include <string.h>

#define L   12
#define N   (16 * 1024) /* floats per object */
#define OBJ (N * sizeof(float))

struct add_args {
	float *out;
	const float *a, *b;
	size_t n;
};

static void add_cpu(const void *p)
{
	const struct add_args *a = p;
	for (size_t i = 0; i < a->n; i++)
		a->out[i] = (a->a ? a->a[i] : 0) + a->b[i];
}
static const struct dev_kernel add_kernel = {"add", add_cpu, NULL};

static int fail_at = -1;

/* refs: [0] weight, [1] input (or the weight again for task 0: none), last: output */
static int add_task(const struct rt_launch *l, void *arg)
{
	int i = (int)(intptr_t)arg;
	if (i == fail_at)
		return sp_error(-EIO, "injected failure in task %d", i);
	struct add_args a = {.b = l->ptr[0], .n = N};
	if (l->task->nref == 3) {
		a.a = l->ptr[1];
		a.out = l->ptr[2];
	} else {
		a.out = l->ptr[1];
	}
	return dev_launch(l->s, &add_kernel, &a, sizeof(a), (struct dev_cost){N, 3.0 * OBJ, 0});
}

static struct rt_ctx *open_rt(int ndev, uint64_t budget, int lookahead, int late)
{
	struct sp_params sp;
	sp_params_defaults(&sp);
	struct rt_config c;
	CHECK_OK(rt_config_from_params(&sp, &c));
	c.dev.backend = DEV_BACKEND_HOST;
	c.dev.ndevices = ndev;
	c.dev.device_mem = 8 << 20;
	c.vmm.device_mem = budget;
	c.vmm.host_mem = 64 << 20;
	c.exec.lookahead = lookahead;
	c.exec.late_binding = late;
	c.threads = 1;
	struct rt_ctx *rt;
	CHECK_OK(rt_open(&c, &rt));
	return rt;
}

/* mode 0: all on device 0; 1: alternating devices; 2: unconstrained */
static void build(struct rt_prog *p, int mode, int *w, int *a)
{
	rt_prog_init(p);
	char name[32];
	for (int i = 0; i < L; i++) {
		snprintf(name, sizeof(name), "w%d", i);
		CHECK_OK(rt_prog_obj(p, OBJ, VMM_KIND_WEIGHT, name, &w[i]));
		snprintf(name, sizeof(name), "a%d", i);
		CHECK_OK(rt_prog_obj(p, OBJ, VMM_KIND_INTERMEDIATE, name, &a[i]));
	}
	for (int i = 0; i < L; i++) {
		struct rt_ref refs[3];
		int n = 0, dep = i - 1, t;
		refs[n++] = (struct rt_ref){w[i], VMM_READ};
		if (i)
			refs[n++] = (struct rt_ref){a[i - 1], VMM_READ};
		refs[n++] = (struct rt_ref){a[i], VMM_OVERWRITE};
		struct rt_task tk = {.dev = mode == 1 ? i % 2 : 0,
		                     .constrained = mode != 2,
		                     .fn = add_task,
		                     .arg = (void *)(intptr_t)i,
		                     .tg_task = -1};
		snprintf(tk.name, sizeof(tk.name), "add%d", i);
		CHECK_OK(rt_prog_task(p, &tk, refs, n, &dep, i ? 1 : 0, &t));
		CHECK(t == i);
	}
	p->obj[a[L - 1]].keep = 1; /* the result, read on the host after each iteration */
	CHECK_OK(rt_prog_prepare(p));
}

static void host_write(struct rt_ctx *rt, uint64_t vid, float base)
{
	void *ptr;
	struct dev_event *ready;
	CHECK_OK(vmm_acquire(rt->vmm, vid, VMM_HOST, VMM_OVERWRITE, &ptr, &ready));
	float *f = ptr;
	for (int i = 0; i < N; i++)
		f[i] = base + (float)(i % 97);
	CHECK_OK(vmm_release(rt->vmm, vid, VMM_HOST, NULL));
}

static void check_result(struct rt_ctx *rt, uint64_t vid)
{
	void *ptr;
	struct dev_event *ready;
	CHECK_OK(vmm_acquire(rt->vmm, vid, VMM_HOST, VMM_READ, &ptr, &ready));
	const float *f = ptr;
	for (int i = 0; i < N; i++) {
		float want = 0;
		for (int k = 0; k < L; k++)
			want += (float)k + (float)(i % 97);
		CHECK_MSG(f[i] == want, "word %d: %g, want %g", i, f[i], want);
	}
	CHECK_OK(vmm_release(rt->vmm, vid, VMM_HOST, NULL));
}

static void run(int ndev, int mode, int lookahead, int iters)
{
	struct rt_ctx *rt = open_rt(ndev, 5 * OBJ, lookahead, mode == 2);
	struct rt_prog p;
	int w[L], a[L];
	build(&p, mode, w, a);
	CHECK_OK(rt_prog_bind(rt, &p));
	for (int i = 0; i < L; i++)
		host_write(rt, p.obj[w[i]].vid, (float)i);
	for (int it = 0; it < iters; it++) {
		CHECK_OK(rt_exec_run(rt, &p, it));
		check_result(rt, p.obj[a[L - 1]].vid);
	}
	struct vmm_stats st;
	vmm_stats_get(rt->vmm, &st);
	uint64_t act_d2h = 0;
	for (int d = 0; d < ndev; d++)
		act_d2h += vmm_link_bytes(rt->vmm, d, VMM_HOST, VMM_KIND_INTERMEDIATE);
	printf("%d device(s), mode %d, lookahead %d: %" PRId64 " evictions, %" PRIu64
	       " prefetches, %" PRIu64 " discards, %" PRIu64 " late-bound, H2D %" PRIu64
	       " P2P %" PRIu64 ", activations D2H %" PRIu64 "\n",
	       ndev, mode, lookahead, st.evictions.total, rt->st.prefetches, rt->st.discards,
	       rt->st.late_bound, vmm_xfer_bytes(rt->vmm, VMM_XFER_H2D),
	       vmm_xfer_bytes(rt->vmm, VMM_XFER_P2P), act_d2h);
	CHECK(st.evictions.total > 0);
	CHECK(rt->st.discards > 0);
	/* activations die after their reader: only the result (read on the host)
	 * moves on one device; across devices a few can be evicted between their
	 * writer and their reader's copy */
	uint64_t allowed = (uint64_t)iters * (mode == 0 ? OBJ : L * OBJ / 3);
	CHECK_MSG(act_d2h <= allowed, "activations written back: %" PRIu64, act_d2h);
	uint64_t w_d2h = 0;
	for (int d = 0; d < ndev; d++)
		w_d2h += vmm_link_bytes(rt->vmm, d, VMM_HOST, VMM_KIND_WEIGHT);
	CHECK_MSG(w_d2h == 0, "weights (read only) written back: %" PRIu64, w_d2h);
	CHECK(dev_copied_bytes(rt->dev, DEV_COPY_H2D) == vmm_xfer_bytes(rt->vmm, VMM_XFER_H2D));
	rt_prog_unbind(rt, &p);
	rt_prog_free(&p);
	rt_close(rt);
}

static void errors(void)
{
	struct rt_ctx *rt = open_rt(1, 5 * OBJ, 2, 0);
	struct rt_prog p;
	int w[L], a[L];
	/* a callback's error stops the run with it; nothing is left pinned */
	build(&p, 0, w, a);
	CHECK_OK(rt_prog_bind(rt, &p));
	for (int i = 0; i < L; i++)
		host_write(rt, p.obj[w[i]].vid, (float)i);
	fail_at = 5;
	int rc = rt_exec_run(rt, &p, 0);
	CHECK_MSG(rc == -EIO && strstr(sp_last_error(), "injected failure in task 5") &&
	              strstr(sp_last_error(), "add5"),
	          "rc %d: %s", rc, sp_last_error());
	fail_at = -1;
	CHECK_OK(rt_exec_run(rt, &p, 1)); /* usable again */
	check_result(rt, p.obj[a[L - 1]].vid);
	rt_prog_unbind(rt, &p);
	rt_prog_free(&p);
	rt_close(rt);

	/* a budget below one task's working set */
	rt = open_rt(1, 2 * OBJ, 2, 0);
	build(&p, 0, w, a);
	CHECK_OK(rt_prog_bind(rt, &p));
	rc = rt_exec_run(rt, &p, 0);
	CHECK_MSG(rc == -ENOMEM && strstr(sp_last_error(), "add1") &&
	              strstr(sp_last_error(), "smallest device budget") &&
	              strstr(sp_last_error(), "192.00 KiB"),
	          "rc %d: %s", rc, sp_last_error());
	rt_prog_unbind(rt, &p);
	rt_prog_free(&p);

	/* bad programs */
	rt_prog_init(&p);
	int o, t;
	CHECK_OK(rt_prog_obj(&p, OBJ, VMM_KIND_WEIGHT, "x", &o));
	struct rt_ref r2[2] = {{o, VMM_READ}, {o, VMM_WRITE}};
	struct rt_task tk = {.dev = 0, .constrained = 1, .fn = add_task, .tg_task = -1};
	snprintf(tk.name, sizeof(tk.name), "twice");
	CHECK_OK(rt_prog_task(&p, &tk, r2, 2, NULL, 0, &t));
	CHECK(rt_prog_prepare(&p) == -EINVAL && strstr(sp_last_error(), "twice"));
	rt_prog_free(&p);
	rt_prog_init(&p);
	CHECK_OK(rt_prog_obj(&p, OBJ, VMM_KIND_WEIGHT, "x", &o));
	int dep = 0;
	CHECK_OK(rt_prog_task(&p, &tk, r2, 1, &dep, 1, &t));
	CHECK(rt_prog_prepare(&p) == -EINVAL && strstr(sp_last_error(), "earlier"));
	rt_prog_free(&p);
	rt_close(rt);
}

int main(void)
{
	run(1, 0, 0, 2);
	run(1, 0, 3, 2);
	run(2, 1, 0, 1);
	run(2, 1, 3, 3);
	run(2, 2, 3, 3);
	errors();
	TEST_PASS();
}
