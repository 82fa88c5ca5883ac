/* examples/graph.c — a raw task graph: your own objects and tasks, run by
 * spill's executor on devices whose memory holds only part of the objects.
 *
 * A vector of CHUNKS chunks is smoothed STAGES times: stage k computes chunk i
 * of its output from chunks i-1, i, i+1 of its input (a 3-point stencil, with
 * the ends clamped), so every task reads three objects and writes one, and
 * each stage's objects die once the next stage has read them. The tasks may
 * run on any device (SPILL_ANY_DEVICE): the executor binds each to a device at
 * run time, brings its chunks in (evicting others, by their next use in the
 * known order) and discards the dead ones. A last stage's output is read back
 * and compared with the same computation in plain host memory.
 *
 * Build against an installed spill:
 *   cc -O2 graph.c $(pkg-config --cflags --libs spill) -o graph
 * Run: ./graph   (exits 1 on a wrong number or when nothing was evicted) */
#include <spill.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHUNKS 16
#define N      (64 * 1024) /* floats per chunk (256 KiB) */
#define STAGES 4

struct stencil_args {
	const float *l, *c, *r; /* left, centre, right input chunks (l/r may be c) */
	float *out;
};

static void stencil(const void *a)
{
	const struct stencil_args *s = a;
	for (int i = 0; i < N; i++) {
		float left = i ? s->c[i - 1] : s->l[N - 1];
		float right = i < N - 1 ? s->c[i + 1] : s->r[0];
		s->out[i] = 0.25f * left + 0.5f * s->c[i] + 0.25f * right;
	}
}

/* refs: 0 = out, then the distinct inputs; arg: which of them is l, c, r */
struct task_arg {
	int l, c, r;
};

static int run_stencil(const struct spill_launch *l, void *arg)
{
	const struct task_arg *t = arg;
	struct stencil_args a = {spill_launch_ptr(l, t->l), spill_launch_ptr(l, t->c),
	                         spill_launch_ptr(l, t->r), spill_launch_ptr(l, 0)};
	return spill_launch(spill_launch_stream(l), stencil, NULL, &a, sizeof(a), 4.0 * N,
	                    16.0 * N);
}

int main(void)
{
	/* 4 emulated GPUs that each hold 8 chunks: the graph has 80 */
	struct spill_options opt = {.backend = "host",
	                            .devices = 4,
	                            .device_mem = 64 << 20,
	                            .budget = 8 * N * sizeof(float),
	                            .host_mem = 64 << 20};
	struct spill_ctx *ctx;
	struct spill_graph *g;
	if (spill_open(&opt, &ctx) < 0 || spill_graph_create(ctx, &g) < 0) {
		fprintf(stderr, "graph: %s\n", spill_last_error());
		return 1;
	}
	int obj[STAGES + 1][CHUNKS], task[STAGES][CHUNKS], ntask = 0;
	static struct task_arg args[STAGES][CHUNKS];
	int rc = 0;
	for (int k = 0; k <= STAGES && !rc; k++)
		for (int i = 0; i < CHUNKS && !rc; i++) {
			char name[32];
			snprintf(name, sizeof(name), "x%d.%d", k, i);
			unsigned flags = k == STAGES ? SPILL_OBJ_OUTPUT : 0;
			rc = spill_graph_obj(g, N * sizeof(float), SPILL_KIND_ACTIVATION, name,
			                     flags, &obj[k][i]);
		}
	for (int k = 0; k < STAGES && !rc; k++)
		for (int i = 0; i < CHUNKS && !rc; i++) {
			int l = i ? i - 1 : 0, r = i < CHUNKS - 1 ? i + 1 : CHUNKS - 1;
			/* writes chunk i of stage k + 1, reads chunks l..r of stage k, after
			 * the tasks that wrote them */
			struct spill_ref refs[4] = {{obj[k + 1][i], SPILL_OVERWRITE}};
			int n = 1, at[CHUNKS], deps[3], nd = 0;
			for (int j = l; j <= r; j++) {
				at[j] = n;
				refs[n++] = (struct spill_ref){obj[k][j], SPILL_READ};
				if (k > 0)
					deps[nd++] = task[k - 1][j];
			}
			args[k][i] = (struct task_arg){at[l], at[i], at[r]};
			char name[32];
			snprintf(name, sizeof(name), "stencil %d.%d", k, i);
			struct spill_task_desc d = {.name = name,
			                            .device = SPILL_ANY_DEVICE,
			                            .refs = refs,
			                            .nrefs = n,
			                            .deps = deps,
			                            .ndeps = nd,
			                            .fn = run_stencil,
			                            .arg = &args[k][i],
			                            .flops = 4.0 * N};
			rc = spill_graph_task(g, &d, &task[k][i]);
			ntask += rc == 0;
		}
	/* the input: a step function */
	static float x[CHUNKS][N], y[CHUNKS][N];
	for (int i = 0; i < CHUNKS && !rc; i++) {
		for (int j = 0; j < N; j++)
			x[i][j] = i < CHUNKS / 2 ? 1.0f : 0.0f;
		rc = spill_graph_write(g, obj[0][i], x[i], sizeof(x[i]));
	}
	if (rc == 0)
		rc = spill_graph_run(g, 1);
	if (rc < 0) {
		fprintf(stderr, "graph: %s\n", spill_last_error());
		spill_graph_destroy(g);
		spill_close(ctx);
		return 1;
	}
	/* the same in host memory */
	for (int k = 0; k < STAGES; k++) {
		for (int i = 0; i < CHUNKS; i++) {
			int l = i ? i - 1 : 0, r = i < CHUNKS - 1 ? i + 1 : CHUNKS - 1;
			struct stencil_args a = {x[l], x[i], x[r], y[i]};
			stencil(&a);
		}
		memcpy(x, y, sizeof(x));
	}
	int wrong = 0;
	static float got[N];
	for (int i = 0; i < CHUNKS && !rc; i++) {
		rc = spill_graph_read(g, obj[STAGES][i], got, sizeof(got));
		for (int j = 0; j < N && !rc; j++)
			wrong += got[j] != x[i][j];
	}
	struct spill_stats st;
	rc = rc ? rc : spill_stats(ctx, &st);
	printf("graph: %d tasks on %d devices; %.1f MiB to the devices, %.1f MiB back, %llu "
	       "evictions, %llu discards, %llu tasks bound away from device 0\n",
	       ntask, spill_device_count(ctx), st.total[SPILL_LINK_H2D] / 1048576.0,
	       st.total[SPILL_LINK_D2H] / 1048576.0, (unsigned long long)st.evictions,
	       (unsigned long long)st.discards, (unsigned long long)st.late_bound);
	spill_graph_destroy(g);
	spill_close(ctx);
	int ok = rc == 0 && !wrong && st.evictions > 0;
	printf("%d wrong numbers: %s\n", wrong, ok ? "ok" : "FAILED");
	return ok ? 0 : 1;
}
