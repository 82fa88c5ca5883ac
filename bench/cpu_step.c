/* bench/cpu_step.c — one fp32 training step of a GPT-2 on spill's CPU kernels
 * (forward, backward, AdamW through kn_layer_*_cpu, the path `spill train` and
 * the demo run on the host backend) against the same step in PyTorch
 * (bench/cpu_step_torch.py: same shapes, GELU approximate='tanh', AdamW), both
 * at one thread (kn_cpu_set_threads(1), torch.set_num_threads(1)).
 *
 * Side by side: for each config, ROUNDS rounds of (spill `steps` steps, then
 * torch `steps` steps; torch waits on a pipe while spill runs); R = spill time /
 * torch time per round, the median reported; R_cpu the same on process CPU
 * time, steadier than wall time on a shared machine. Prints a table, writes JSON with
 * the machine to argv[1] (python command in argv[2]; "" skips torch; argv[3], if
 * given, runs only the config of that name: for profiling); the last line is
 * `cpu_step_vs_torch=R` (the largest median R over the configs).
 */
#include "bench/bench.h"
#include "kernels/kernels.h"

#include <stdint.h>
#include <sys/wait.h>
#include <time.h>

#define ROUNDS 7

struct cfg {
	const char *name;
	int B, T, C, NH, V, L, steps;
};

/* tiny: `spill train`'s default preset (and the demo's shape); gpt2-ish: GPT-2
 * small's width and heads at a shorter sequence, 2 layers, a 8K vocabulary. */
static const struct cfg cfgs[] = {
    {"tiny", 16, 64, 128, 4, 256, 4, 4},
    {"gpt2-ish", 4, 256, 768, 12, 8192, 2, 1},
};
#define NCFG (int)(sizeof(cfgs) / sizeof(cfgs[0]))

struct layer {
	enum kn_layer_kind kind;
	struct kn_layer_desc d;
	struct kn_layer_mem mem;
	float *out, *dout; /* forward output and its gradient (B,T,C); head: losses */
};

struct model {
	struct kn_model_config kc;
	int B, T, n;
	struct layer *l; /* embedding, L blocks, head */
	int *tokens, *targets;
};

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double cpu_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void *zalloc(uint64_t bytes)
{
	void *p = NULL;
	if (posix_memalign(&p, 64, bytes ? bytes : 64)) {
		fprintf(stderr, "cpu_step: out of memory (%llu bytes)\n",
		        (unsigned long long)bytes);
		exit(1);
	}
	memset(p, 0, bytes);
	return p;
}

static uint64_t rng_next(uint64_t *s)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 0x2545F4914F6CDD1DULL;
}

static float rng_unif(uint64_t *s) /* [-1, 1) */
{
	return (float)((rng_next(s) >> 40) / 16777216.0 * 2.0 - 1.0);
}

static void model_create(const struct cfg *c, struct model *m)
{
	m->kc = (struct kn_model_config){
	    .maxT = c->T, .V = c->V, .L = c->L, .NH = c->NH, .C = c->C, .dtype = KN_F32};
	m->B = c->B, m->T = c->T, m->n = c->L + 2;
	m->l = calloc((size_t)m->n, sizeof(*m->l));
	size_t bt = (size_t)c->B * c->T;
	m->tokens = zalloc(bt * sizeof(int));
	m->targets = zalloc(bt * sizeof(int));
	uint64_t s = 42;
	for (size_t i = 0; i < bt; i++) {
		m->tokens[i] = (int)(rng_next(&s) % (uint64_t)c->V);
		m->targets[i] = (int)(rng_next(&s) % (uint64_t)c->V);
	}
	size_t C = c->C;
	for (int i = 0; i < m->n; i++) {
		struct layer *y = &m->l[i];
		y->kind = i == 0          ? KN_LAYER_EMBEDDING
		          : i == m->n - 1 ? KN_LAYER_HEAD
		                          : KN_LAYER_BLOCK;
		if (kn_layer_describe(&m->kc, y->kind, c->B, c->T, &y->d) < 0) {
			fprintf(stderr, "cpu_step: %s\n", sp_last_error());
			exit(1);
		}
		y->mem.params = zalloc(y->d.param_bytes);
		y->mem.grads = zalloc(y->d.grad_bytes);
		y->mem.optim = zalloc(y->d.optim_bytes);
		y->mem.stash = y->d.stash_bytes ? zalloc(y->d.stash_bytes) : NULL;
		y->mem.work = y->d.work_bytes ? zalloc(y->d.work_bytes) : NULL;
		y->out = zalloc(y->d.output_bytes);
		y->dout = zalloc(bt * C * sizeof(float));
		/* GPT-2-like: matrices ~ U(-0.035, 0.035), layernorm weights 1, biases 0 */
		float *p = y->mem.params;
		size_t np = y->d.param_bytes / sizeof(float);
		if (y->kind == KN_LAYER_HEAD) {
			for (size_t k = 0; k < C; k++)
				p[k] = 1.0f;
		} else if (y->kind == KN_LAYER_EMBEDDING) {
			for (size_t k = 0; k < np; k++)
				p[k] = 0.035f * rng_unif(&s);
		} else {
			size_t sz[KN_BLOCK_NPARAMS], off = 0;
			kn_block_param_sizes(c->C, sz);
			for (int t = 0; t < KN_BLOCK_NPARAMS; t++) {
				int mat = t == 2 || t == 4 || t == 8 || t == 10,
				    lnw = t == 0 || t == 6;
				for (size_t k = 0; k < sz[t]; k++)
					p[off + k] = mat   ? 0.035f * rng_unif(&s)
					             : lnw ? 1.0f
					                   : 0.0f;
				off += sz[t];
			}
		}
	}
	struct layer *head = &m->l[m->n - 1];
	head->mem.tied = m->l[0].mem.params;
	head->mem.tied_grad = m->l[0].mem.grads;
}

static void model_free(struct model *m)
{
	for (int i = 0; i < m->n; i++) {
		struct layer *y = &m->l[i];
		free(y->mem.params), free(y->mem.grads), free(y->mem.optim);
		free(y->mem.stash), free(y->mem.work), free(y->out), free(y->dout);
	}
	free(m->l), free(m->tokens), free(m->targets);
}

#define CHECKED(call)                                                                  \
	do {                                                                           \
		if ((call) < 0) {                                                      \
			fprintf(stderr, "cpu_step: %s: %s\n", #call, sp_last_error()); \
			exit(1);                                                       \
		}                                                                      \
	} while (0)

/* One training step: zero grads, forward, backward, AdamW. Returns the mean loss. */
static double model_step(struct model *m, int t)
{
	struct kn_model_config *kc = &m->kc;
	int B = m->B, T = m->T, n = m->n;
	size_t btc = (size_t)B * T * kc->C;
	for (int i = 0; i < n; i++)
		CHECKED(kn_layer_zero_grad_cpu(kc, m->l[i].kind, &m->l[i].mem));
	for (int i = 0; i < n; i++) {
		struct layer *y = &m->l[i];
		struct kn_layer_io io = {.in = i ? (const void *)m->l[i - 1].out : m->tokens,
		                         .out = y->out,
		                         .targets = m->targets};
		CHECKED(kn_layer_forward_cpu(kc, y->kind, B, T, &y->mem, &io));
	}
	for (int i = n - 1; i >= 0; i--) {
		struct layer *y = &m->l[i];
		if (i)
			memset(m->l[i - 1].dout, 0, btc * sizeof(float));
		struct kn_layer_io io = {.in = i ? (const void *)m->l[i - 1].out : m->tokens,
		                         .targets = m->targets,
		                         .dout = y->dout,
		                         .din = i ? m->l[i - 1].dout : NULL,
		                         .dloss = 1.0f / (float)(B * T)};
		CHECKED(kn_layer_backward_cpu(kc, y->kind, B, T, &y->mem, &io));
	}
	struct kn_optim_hparams h = {.lr = 1e-4f,
	                             .beta1 = 0.9f,
	                             .beta2 = 0.95f,
	                             .eps = 1e-8f,
	                             .weight_decay = 0.1f,
	                             .t = t,
	                             .kind = KN_ADAMW};
	for (int i = 0; i < n; i++)
		CHECKED(kn_layer_update_cpu(kc, m->l[i].kind, &m->l[i].mem, &h));
	const float *losses = m->l[n - 1].out;
	double s = 0;
	for (int i = 0; i < B * T; i++)
		s += losses[i];
	return s / (B * T);
}

/* The torch co-process: python reading "N" lines on its stdin (a FIFO pair). */
struct torch_proc {
	FILE *to, *from;
	pid_t pid;
	char why[256];
};

static int torch_start(struct torch_proc *tp, const char *py, const struct cfg *c)
{
	memset(tp, 0, sizeof(*tp));
	if (!py || !*py) {
		snprintf(tp->why, sizeof(tp->why), "no python given");
		return -1;
	}
	int in[2], out[2];
	if (pipe(in) || pipe(out)) {
		snprintf(tp->why, sizeof(tp->why), "pipe failed");
		return -1;
	}
	tp->pid = fork();
	if (tp->pid == 0) {
		dup2(in[0], 0), dup2(out[1], 1);
		close(in[0]), close(in[1]), close(out[0]), close(out[1]);
		char a[6][16];
		int v[6] = {c->B, c->T, c->C, c->NH, c->V, c->L};
		for (int i = 0; i < 6; i++)
			snprintf(a[i], sizeof(a[i]), "%d", v[i]);
		setenv("OMP_NUM_THREADS", "1", 1);
		execlp(py, py, "bench/cpu_step_torch.py", a[0], a[1], a[2], a[3], a[4], a[5],
		       (char *)NULL);
		_exit(127);
	}
	close(in[0]), close(out[1]);
	tp->to = fdopen(in[1], "w");
	tp->from = fdopen(out[0], "r");
	char line[256] = "";
	if (!fgets(line, sizeof(line), tp->from) || strncmp(line, "ready", 5)) {
		line[strcspn(line, "\n")] = '\0';
		snprintf(tp->why, sizeof(tp->why), "%s", *line ? line : "cpu_step_torch.py failed");
		fclose(tp->to), fclose(tp->from);
		tp->to = tp->from = NULL;
		return -1;
	}
	return 0;
}

/* Runs n torch steps; returns their wall seconds, *cpu their CPU seconds (0, 0 on failure). */
static double torch_steps(struct torch_proc *tp, int n, double *cpu)
{
	char line[256];
	fprintf(tp->to, "%d\n", n);
	fflush(tp->to);
	double s = 0;
	*cpu = 0;
	if (!fgets(line, sizeof(line), tp->from) || sscanf(line, "torch_s %lf %lf", &s, cpu) != 2)
		return 0;
	return s;
}

static void torch_stop(struct torch_proc *tp)
{
	if (tp->to)
		fclose(tp->to), fclose(tp->from);
	if (tp->pid > 0)
		waitpid(tp->pid, NULL, 0);
}

struct result {
	double spill_ms, torch_ms, ratio, ratio_cpu, loss;
};

int main(int argc, char **argv)
{
	const char *json = argc > 1 ? argv[1] : "bench/results/cpu_step.json";
	const char *py = argc > 2 ? argv[2] : "python3";
	const char *only = argc > 3 ? argv[3] : NULL;
	if (kn_cpu_set_threads(1) < 0)
		return 1;
	struct result res[NCFG];
	char why[256] = "";
	printf("one fp32 training step (forward, backward, AdamW), 1 thread, median of %d "
	       "rounds\n",
	       ROUNDS);
	printf("%-9s %3s %4s %4s %3s %5s %2s %10s %10s %8s %8s\n", "config", "B", "T", "C", "NH",
	       "V", "L", "spill ms", "torch ms", "ratio", "R_cpu");
	for (int k = 0; k < NCFG; k++) {
		const struct cfg *c = &cfgs[k];
		res[k] = (struct result){0};
		if (only && strcmp(only, c->name))
			continue;
		struct model m;
		model_create(c, &m);
		struct torch_proc tp;
		int have_torch = torch_start(&tp, py, c) == 0;
		if (!have_torch)
			snprintf(why, sizeof(why), "%s", tp.why);
		int t = 1;
		res[k].loss = model_step(&m, t++); /* warm-up */
		double sp[ROUNDS], tt[ROUNDS], r[ROUNDS], rc[ROUNDS];
		for (int i = 0; i < ROUNDS; i++) {
			double t0 = now_s(), c0 = cpu_s(), tc = 0;
			for (int s = 0; s < c->steps; s++)
				model_step(&m, t++);
			sp[i] = (now_s() - t0) / c->steps;
			double sc = (cpu_s() - c0) / c->steps;
			tt[i] = have_torch ? torch_steps(&tp, c->steps, &tc) / c->steps : 0;
			tc /= c->steps;
			r[i] = tt[i] > 0 ? sp[i] / tt[i] : 0;
			rc[i] = tc > 0 ? sc / tc : 0;
		}
		torch_stop(&tp);
		res[k].spill_ms = 1e3 * bench_median(sp, ROUNDS);
		res[k].torch_ms = 1e3 * bench_median(tt, ROUNDS);
		res[k].ratio = bench_median(r, ROUNDS);
		res[k].ratio_cpu = bench_median(rc, ROUNDS);
		printf("%-9s %3d %4d %4d %3d %5d %2d %10.2f %10.2f %8.3f %8.3f\n", c->name, c->B,
		       c->T, c->C, c->NH, c->V, c->L, res[k].spill_ms, res[k].torch_ms,
		       res[k].ratio, res[k].ratio_cpu);
		fflush(stdout);
		model_free(&m);
	}
	if (*why)
		printf("PyTorch: not available (%s)\n", why);
	double worst = 0, worst_cpu = 0;
	for (int k = 0; k < NCFG; k++) {
		worst = res[k].ratio > worst ? res[k].ratio : worst;
		worst_cpu = res[k].ratio_cpu > worst_cpu ? res[k].ratio_cpu : worst_cpu;
	}
	FILE *f = fopen(json, "w");
	if (f) {
		fprintf(f, "{\n  \"bench\": \"cpu_step\",\n");
		bench_machine_json(f);
		fprintf(f, "  \"threads\": 1,\n  \"rounds\": %d,\n  \"configs\": [\n", ROUNDS);
		for (int k = 0; k < NCFG; k++) {
			const struct cfg *c = &cfgs[k];
			fprintf(
			    f,
			    "    {\"name\": \"%s\", \"B\": %d, \"T\": %d, \"C\": %d, \"NH\": %d, "
			    "\"V\": %d, \"L\": %d, \"spill_ms\": %.4f, \"torch_ms\": %.4f, "
			    "\"ratio\": %.4f}%s\n",
			    c->name, c->B, c->T, c->C, c->NH, c->V, c->L, res[k].spill_ms,
			    res[k].torch_ms, res[k].ratio, k + 1 < NCFG ? "," : "");
		}
		fprintf(f,
		        "  ],\n  \"cpu_step_vs_torch\": %.4f,\n  \"cpu_step_vs_torch_cpu_time\": "
		        "%.4f,\n"
		        "  \"target\": 1.0\n}\n",
		        worst, worst_cpu);
		fclose(f);
	}
	printf("cpu_step_vs_torch=%.3f cpu_time=%.3f\n", worst, worst_cpu);
	return 0;
}
