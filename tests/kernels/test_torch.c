/* tests/kernels/test_torch.c — a whole transformer block and a 2-layer GPT-2,
 * forward + backward + 3 AdamW steps on the CPU kernels (and the block again
 * with 3 steps of SGD with momentum through kn_layer_update_cpu), against PyTorch (CPU,
 * fp32) run by tests/kernels/torch_ref.py through Debian's /usr/bin/python3, else python3.
 * Data goes through raw files in a temp directory. Every compared tensor (block
 * output, input gradient, losses, every parameter gradient, parameters after 3
 * steps) must agree to max|a-b|/max|b| < 1e-5. Skips (77) without torch. */
#include "tests/kernels/util.h"
#include "tests/test.h"

#include <limits.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* the interpreter: Debian's python3, else python3 on PATH (a GPU machine's may be the
 * one with torch) */
static const char *PY = "/usr/bin/python3";
#define TOL 1e-5

/* AdamW hyper-parameters. eps is 1e-3 rather than torch's 1e-8 on purpose: an
 * element whose gradient is at the level of fp32 rounding (the key bias's
 * gradient is exactly 0 in exact arithmetic, softmax ignoring a shift of a row)
 * gets an update of about +-lr whose sign rounding decides, and elements with
 * gradients 1e-3 below their tensor's largest amplify rounding by as much, so
 * with eps = 1e-8 no two fp32 implementations agree to 1e-5 after 3 steps.
 * A larger eps bounds that amplification; the formula tested is the same. */
static const float LR = 1e-3f, BETA1 = 0.9f, BETA2 = 0.95f, EPS = 1e-3f, WD = 0.1f;
static const int STEPS = 3;
static const float SGD_LR = 1e-3f, SGD_MOMENTUM = 0.9f;
static double worst;

static const char *find_script(void)
{
	static char path[PATH_MAX + 64];
	const char *rel = "tests/kernels/torch_ref.py";
	if (access(rel, R_OK) == 0)
		return rel;
	/* from the executable: build/<variant>/tests/kernels/test_torch */
	char exe[PATH_MAX - 64];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n > 0) {
		exe[n] = 0;
		for (int up = 0; up < 4; up++) {
			char *s = strrchr(exe, '/');
			if (!s)
				break;
			*s = 0;
		}
		char *s = strrchr(exe, '/');
		if (s) {
			*s = 0;
			snprintf(path, sizeof(path), "%s/%s", exe, rel);
			if (access(path, R_OK) == 0)
				return path;
		}
	}
	return NULL;
}

static int imports_torch(const char *py)
{
	char cmd[256];
	snprintf(cmd, sizeof(cmd), "%s -c 'import torch, numpy' >/dev/null 2>&1", py);
	return system(cmd) == 0;
}

static int run_python(const char *script, const char *dir)
{
	pid_t pid = fork();
	if (pid == 0) {
		execlp(PY, PY, script, dir, (char *)NULL);
		_exit(127);
	}
	int st = 0;
	if (pid < 0 || waitpid(pid, &st, 0) < 0)
		return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static float *read_ref(const char *dir, const char *file, size_t off, size_t n)
{
	float *ref = malloc(n * sizeof(float));
	CHECK(ref);
	char path[1024];
	snprintf(path, sizeof(path), "%s/%s", dir, file);
	FILE *f = fopen(path, "rb");
	CHECK_MSG(f, "cannot open %s", path);
	CHECK(fseek(f, (long)(off * sizeof(float)), SEEK_SET) == 0);
	CHECK_MSG(fread(ref, sizeof(float), n, f) == n, "%s: short read", path);
	fclose(f);
	return ref;
}

static void compare(const char *what, const float *got, const char *dir, const char *file,
                    size_t off, size_t n)
{
	float *ref = read_ref(dir, file, off, n);
	double e = tk_rel_err(got, ref, n);
	worst = e > worst ? e : worst;
	printf("  %-28s n=%-7zu rel err %.3e\n", what, n, e);
	CHECK_MSG(e < TOL, "%s: relative error %.3e >= %.0e", what, e, TOL);
	free(ref);
}

static const char *block_names[KN_BLOCK_NPARAMS] = {"ln1w",     "ln1b",     "qkvw",    "qkvb",
                                                    "attprojw", "attprojb", "ln2w",    "ln2b",
                                                    "fcw",      "fcb",      "fcprojw", "fcprojb"};

static void write_config(const char *dir, const char *mode, int B, int T, int C, int NH, int V,
                         int maxT, int L, int sgd)
{
	char cfg[512];
	int n = snprintf(cfg, sizeof(cfg),
	                 "%s %d %d %d %d %d %d %d %.9g %.9g %.9g %.9g %.9g %d %s %.9g\n", mode, B,
	                 T, C, NH, V, maxT, L, (double)(sgd ? SGD_LR : LR), (double)BETA1,
	                 (double)BETA2, (double)EPS, (double)WD, STEPS, sgd ? "sgd" : "adamw",
	                 (double)(sgd ? SGD_MOMENTUM : 0));
	CHECK(tk_write(dir, "config.txt", cfg, (size_t)n) == 0);
}

/* sgd: the update is SGD with momentum through the layer path (which picks
 * the decayed tensors itself), else AdamW per tensor. */
static void test_block(const char *script, const char *dir, int sgd)
{
	const int B = 2, T = 8, C = 32, NH = 4;
	const struct g2_exec *ex = &tk_cpu_exec;
	size_t np = g2_block_nparams(C), btc = (size_t)B * T * C;
	float *params = calloc(np, 4), *grads = calloc(np, 4), *m = calloc(np, 4),
	      *v = calloc(np, 4);
	float *x = calloc(btc, 4), *dy = calloc(btc, 4), *dx = calloc(btc, 4);
	float *y0 = calloc(btc, 4), *dx0 = calloc(btc, 4), *g0 = calloc(np, 4);
	CHECK(params && grads && m && v && x && dy && dx && y0 && dx0 && g0);
	struct tk_rng r = {0x5eed1234abcdULL};
	tk_init_block(&r, params, C);
	tk_fill(&r, x, btc, 1.0f, 0);
	tk_fill(&r, dy, btc, 1.0f, 0);
	write_config(dir, "block", B, T, C, NH, 0, T, 1, sgd);
	CHECK(tk_write(dir, "params.bin", params, np * 4) == 0);
	CHECK(tk_write(dir, "x.bin", x, btc * 4) == 0);
	CHECK(tk_write(dir, "dy.bin", dy, btc * 4) == 0);

	struct g2_block_acts acts;
	struct g2_scratch s;
	CHECK(g2_block_acts_alloc(ex, &acts, B, T, C, NH) == 0);
	CHECK(g2_scratch_alloc(ex, &s, B, T, C, NH) == 0);
	float *p[KN_BLOCK_NPARAMS], *g[KN_BLOCK_NPARAMS];
	size_t sz[KN_BLOCK_NPARAMS];
	g2_block_split(params, C, p);
	g2_block_split(grads, C, g);
	kn_block_param_sizes(C, sz);
	float losses[3];
	for (int step = 0; step < STEPS; step++) {
		g2_zero(ex, grads, np);
		g2_zero(ex, dx, btc);
		g2_block_forward(ex, p, &acts, &s, x, B, T, C, NH);
		double loss = 0;
		for (size_t i = 0; i < btc; i++)
			loss += (double)acts.out[i] * dy[i];
		losses[step] = (float)loss;
		g2_block_backward(ex, p, g, &acts, &s, x, dy, dx, B, T, C, NH);
		if (step == 0) {
			memcpy(y0, acts.out, btc * 4);
			memcpy(dx0, dx, btc * 4);
			memcpy(g0, grads, np * 4);
		}
		if (sgd) {
			struct kn_model_config cfg = {.maxT = T, .V = 8, .L = 1, .NH = NH, .C = C};
			struct kn_layer_mem mem = {.params = params, .grads = grads, .optim = m};
			struct kn_optim_hparams h = {.lr = SGD_LR,
			                             .weight_decay = WD,
			                             .t = step + 1,
			                             .kind = KN_SGD,
			                             .momentum = SGD_MOMENTUM};
			CHECK_OK(kn_layer_update_cpu(&cfg, KN_LAYER_BLOCK, &mem, &h));
			continue;
		}
		for (int i = 0; i < KN_BLOCK_NPARAMS; i++) {
			int decay = i == G2_QKVW || i == G2_PROJW || i == G2_FCW || i == G2_FCPROJW;
			struct kn_adamw_args a = {.params = p[i],
			                          .grads = g[i],
			                          .m = m + (p[i] - params),
			                          .v = v + (p[i] - params),
			                          .N = (long)sz[i],
			                          .lr = LR,
			                          .beta1 = BETA1,
			                          .beta2 = BETA2,
			                          .eps = EPS,
			                          .weight_decay = decay ? WD : 0.0f,
			                          .t = step + 1};
			CHECK_OK(kn_adamw_check(&a));
			kn_adamw_cpu(&a);
		}
	}
	int rc = run_python(script, dir);
	CHECK_MSG(rc == 0, "%s %s exited %d", PY, script, rc);
	printf("block B=%d T=%d C=%d NH=%d, %s:\n", B, T, C, NH,
	       sgd ? "SGD with momentum (layer update)" : "AdamW");
	compare("losses (3 steps)", losses, dir, "ref_losses.bin", 0, STEPS);
	compare("y", y0, dir, "ref_out.bin", 0, btc);
	compare("dx", dx0, dir, "ref_dx.bin", 0, btc);
	size_t off = 0;
	for (int i = 0; i < KN_BLOCK_NPARAMS; i++) {
		char what[64];
		snprintf(what, sizeof(what), "grad %s", block_names[i]);
		compare(what, g0 + off, dir, "ref_grads.bin", off, sz[i]);
		snprintf(what, sizeof(what), "param %s after %d steps", block_names[i], STEPS);
		compare(what, params + off, dir, "ref_params.bin", off, sz[i]);
		off += sz[i];
	}
	g2_block_acts_free(ex, &acts);
	g2_scratch_free(ex, &s);
	free(params), free(grads), free(m), free(v), free(x), free(dy), free(dx);
	free(y0), free(dx0), free(g0);
}

struct name_ctx {
	const char *dir;
	const float *got;
	const char *file;
	int idx, L;
};

static void compare_tensor(void *ctx, size_t off, size_t n, int decay)
{
	struct name_ctx *c = ctx;
	(void)decay;
	char what[64];
	int i = c->idx++;
	if (i == 0)
		snprintf(what, sizeof(what), "%s wte", c->file + 4);
	else if (i == 1)
		snprintf(what, sizeof(what), "%s wpe", c->file + 4);
	else if (i - 2 < c->L * KN_BLOCK_NPARAMS)
		snprintf(what, sizeof(what), "%s h%d.%s", c->file + 4, (i - 2) / KN_BLOCK_NPARAMS,
		         block_names[(i - 2) % KN_BLOCK_NPARAMS]);
	else
		snprintf(what, sizeof(what), "%s lnf%s", c->file + 4,
		         i - 2 == c->L * KN_BLOCK_NPARAMS ? "w" : "b");
	compare(what, c->got + off, c->dir, c->file, off, n);
}

static void test_model(const char *script, const char *dir)
{
	struct kn_model_config cfg = {.maxT = 16, .V = 64, .L = 2, .NH = 4, .C = 32};
	const int B = 2, T = 8;
	const struct g2_exec *ex = &tk_cpu_exec;
	struct g2_model m;
	CHECK(g2_model_create(ex, &cfg, B, T, &m) == 0);
	struct tk_rng r = {0xfeedbeef1234ULL};
	tk_init_model(&r, &m);
	for (int i = 0; i < B * T; i++) {
		m.tokens[i] = (int)(tk_u32(&r) % (uint32_t)cfg.V);
		m.targets[i] = (int)(tk_u32(&r) % (uint32_t)cfg.V);
	}
	write_config(dir, "model", B, T, cfg.C, cfg.NH, cfg.V, cfg.maxT, cfg.L, 0);
	CHECK(tk_write(dir, "params.bin", m.params, m.nparams * 4) == 0);
	CHECK(tk_write(dir, "tokens.bin", m.tokens, (size_t)B * T * 4) == 0);
	CHECK(tk_write(dir, "targets.bin", m.targets, (size_t)B * T * 4) == 0);
	float losses[3], *g0 = malloc(m.nparams * 4), *out0 = malloc((size_t)B * T * 4);
	CHECK(g0 && out0);
	for (int step = 0; step < STEPS; step++) {
		g2_zero(ex, m.grads, m.nparams);
		g2_model_forward(ex, &m);
		losses[step] = (float)tk_mean_loss(&m);
		g2_model_backward(ex, &m);
		if (step == 0) {
			memcpy(g0, m.grads, m.nparams * 4);
			memcpy(out0, m.losses, (size_t)B * T * 4);
		}
		g2_model_update(ex, &m, LR, BETA1, BETA2, EPS, WD, step + 1);
	}
	int rc = run_python(script, dir);
	CHECK_MSG(rc == 0, "%s %s exited %d", PY, script, rc);
	printf("model L=%d C=%d NH=%d V=%d maxT=%d, B=%d T=%d: losses %.6f %.6f %.6f\n", cfg.L,
	       cfg.C, cfg.NH, cfg.V, cfg.maxT, B, T, losses[0], losses[1], losses[2]);
	compare("losses (3 steps)", losses, dir, "ref_losses.bin", 0, STEPS);
	compare("per-position losses", out0, dir, "ref_out.bin", 0, (size_t)B * T);
	struct name_ctx gc = {dir, g0, "ref_grads.bin", 0, cfg.L};
	g2_model_tensors(&cfg, compare_tensor, &gc);
	struct name_ctx pc = {dir, m.params, "ref_params.bin", 0, cfg.L};
	g2_model_tensors(&cfg, compare_tensor, &pc);
	free(g0);
	free(out0);
	g2_model_destroy(ex, &m);
}

static char tmp_dir[] = "/tmp/spill-kn-torch-XXXXXX";

static void rm_dir(void)
{
	const char *dir = tmp_dir;
	const char *files[] = {"config.txt",    "params.bin",     "x.bin",         "dy.bin",
	                       "tokens.bin",    "targets.bin",    "ref_out.bin",   "ref_dx.bin",
	                       "ref_grads.bin", "ref_params.bin", "ref_losses.bin"};
	char path[1024];
	for (size_t i = 0; i < SP_ARRAY_SIZE(files); i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, files[i]);
		unlink(path);
	}
	rmdir(dir);
}

int main(void)
{
	if (!imports_torch(PY)) {
		PY = "python3";
		if (!imports_torch(PY))
			TEST_SKIP("neither /usr/bin/python3 nor python3 imports torch and numpy");
	}
	const char *script = find_script();
	CHECK_MSG(script, "tests/kernels/torch_ref.py not found (run from the repo root)");
	CHECK_OK(kn_cpu_set_threads(1));
	CHECK(mkdtemp(tmp_dir));
	atexit(rm_dir); /* also on a failed CHECK */
	const char *dir = tmp_dir;
	test_block(script, dir, 0);
	test_block(script, dir, 1);
	test_model(script, dir);
	printf("max relative error vs PyTorch: %.3e (tolerance %.0e)\n", worst, TOL);
	TEST_PASS();
}
