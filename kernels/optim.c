/* kernels/optim.c — the optimizers, CPU: AdamW with torch.optim.AdamW's order of operations
 * (decoupled decay first, then moments, then the bias-corrected step), so one
 * step matches torch to rounding. Scalars are formed in double as torch does.
 *
 * A call splits [0, N) into chunks whose boundaries fall on 64-byte lines of the
 * parameters, runs chunk 0 itself and the others on a small persistent pool of
 * worker threads (kn_cpu_threads() - 1 of them, started on first use), and runs the
 * widest loop the CPU has (optim_simd.c). Every element's result is the same bits
 * whatever the thread count and the loop (optim_impl.h): only the speed changes.
 * One caller at a time owns the pool; a call that finds it busy (another stream's
 * update) runs alone on its own thread, so optimizer threads never exceed the
 * count set and no call waits for another.
 */
#include "kernels/internal.h"
#include "kernels/optim_impl.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>

/* ---- scalar loops: the reference every path matches bit for bit ---- */
static void adamw_scalar(float *p, const float *g, float *m, float *v, long n,
                         const struct kn_adamw_coef *c)
{
	const float decay = c->decay, step = c->step, bc2_sqrt = c->bc2_sqrt, eps = c->eps;
	const float b1 = c->b1, b2 = c->b2, c1 = c->c1, c2 = c->c2, gs = c->gs;
	for (long i = 0; i < n; i++) {
		float gi = g[i] * gs;
		float pi = p[i] * decay;
		float mi = m[i] * b1 + c1 * gi;
		float vi = v[i] * b2 + c2 * gi * gi;
		float denom = sqrtf(vi) / bc2_sqrt + eps;
		p[i] = pi - step * (mi / denom);
		m[i] = mi;
		v[i] = vi;
	}
}

static void sgd_scalar(float *p, const float *g, float *buf, long n, const struct kn_sgd_coef *c)
{
	const float lr = c->lr, mu = c->mu, wd = c->wd, gs = c->gs;
	if (buf) {
		for (long i = 0; i < n; i++) {
			float d = g[i] * gs + wd * p[i];
			d = buf[i] * mu + d;
			buf[i] = d;
			p[i] = p[i] - lr * d;
		}
		return;
	}
	for (long i = 0; i < n; i++) {
		float d = g[i] * gs + wd * p[i];
		p[i] = p[i] - lr * d;
	}
}

const struct kn_optim_path kn_optim_scalar_path = {"scalar", adamw_scalar, sgd_scalar};

/* ---- path choice: once, from the CPU's features; tests may force one ---- */
static const struct kn_optim_path *optim_auto;
static pthread_once_t optim_auto_once = PTHREAD_ONCE_INIT;
static int optim_forced_isa = -1;
static int optim_forced_threads;
static long optim_forced_min_chunk;

static const struct kn_optim_path *optim_path_of(enum kn_optim_isa isa)
{
	switch (isa) {
	case KN_OPTIM_AVX2: return &kn_optim_avx2_path;
	case KN_OPTIM_AVX512: return &kn_optim_avx512_path;
	default: return &kn_optim_scalar_path;
	}
}

int kn_optim_isa_supported(enum kn_optim_isa isa)
{
	if (isa == KN_OPTIM_SCALAR)
		return 1;
	if (isa < 0 || isa >= KN_OPTIM_NISA || !optim_path_of(isa)->adamw)
		return 0;
#if defined(__x86_64__) || defined(__i386__)
	__builtin_cpu_init();
	if (isa == KN_OPTIM_AVX2)
		return __builtin_cpu_supports("avx2");
	return __builtin_cpu_supports("avx512f");
#else
	return 0;
#endif
}

static void optim_auto_pick(void)
{
	optim_auto = &kn_optim_scalar_path;
	for (int isa = KN_OPTIM_NISA - 1; isa > KN_OPTIM_SCALAR; isa--)
		if (kn_optim_isa_supported(isa)) {
			optim_auto = optim_path_of(isa);
			break;
		}
}

const struct kn_optim_path *kn_optim_path_get(void)
{
	if (optim_forced_isa >= 0)
		return optim_path_of(optim_forced_isa);
	pthread_once(&optim_auto_once, optim_auto_pick);
	return optim_auto;
}

int kn_optim_tune(int isa, int threads, long min_chunk)
{
	if (isa < -1 || isa >= KN_OPTIM_NISA || threads < 0 || threads > KN_OPTIM_MAX_THREADS ||
	    min_chunk < 0)
		return sp_error(-EINVAL, "kn_optim_tune: isa %d, threads %d, min_chunk %ld", isa,
		                threads, min_chunk);
	if (isa >= 0 && !kn_optim_isa_supported(isa))
		return sp_error(-ENOTSUP, "kn_optim_tune: this CPU or build has no %s path",
		                optim_path_of(isa)->name);
	optim_forced_isa = isa;
	optim_forced_threads = threads;
	optim_forced_min_chunk = min_chunk;
	return 0;
}

/* ---- one call's work, split in chunks ---- */
struct optim_job {
	const struct kn_optim_path *path;
	int adamw; /* else SGD */
	float *p;
	const float *g;
	float *s1, *s2; /* AdamW m and v; SGD buf (or NULL) and unused */
	const void *coef;
	long bound[KN_OPTIM_MAX_THREADS + 1]; /* chunk k is [bound[k], bound[k+1]) */
};

static void optim_job_run(const struct optim_job *j, int part)
{
	long lo = j->bound[part], n = j->bound[part + 1] - lo;
	if (n <= 0)
		return;
	if (j->adamw)
		j->path->adamw(j->p + lo, j->g + lo, j->s1 + lo, j->s2 + lo, n, j->coef);
	else
		j->path->sgd(j->p + lo, j->g + lo, j->s1 ? j->s1 + lo : NULL, n, j->coef);
}

/* ---- the pool: workers 1..nworkers run chunk w of each job posted ----
 * Under lock: a job is posted by bumping gen; each worker whose index is below
 * nparts runs its chunk and decrements pending; the owner (busy) waits for 0. */
static struct {
	pthread_mutex_t lock;
	pthread_cond_t work, done;
	int nworkers;
	int busy;
	int nparts;
	int pending;
	unsigned long gen;
	const struct optim_job *job;
	unsigned long start_gen[KN_OPTIM_MAX_THREADS];
} pool = {.lock = PTHREAD_MUTEX_INITIALIZER,
          .work = PTHREAD_COND_INITIALIZER,
          .done = PTHREAD_COND_INITIALIZER};
static pthread_once_t pool_atfork_once = PTHREAD_ONCE_INIT;

static void *pool_worker(void *arg)
{
	int part = (int)(intptr_t)arg;
	pthread_mutex_lock(&pool.lock);
	unsigned long seen = pool.start_gen[part];
	for (;;) {
		while (pool.gen == seen)
			pthread_cond_wait(&pool.work, &pool.lock);
		seen = pool.gen;
		if (part >= pool.nparts)
			continue;
		const struct optim_job *j = pool.job;
		pthread_mutex_unlock(&pool.lock);
		optim_job_run(j, part);
		pthread_mutex_lock(&pool.lock);
		if (--pool.pending == 0)
			pthread_cond_signal(&pool.done);
	}
	return NULL;
}

/* fork keeps the calling thread only: the child starts over without workers */
static void pool_prefork(void)
{
	pthread_mutex_lock(&pool.lock);
}
static void pool_postfork_parent(void)
{
	pthread_mutex_unlock(&pool.lock);
}
static void pool_postfork_child(void)
{
	pool.nworkers = pool.busy = pool.nparts = pool.pending = 0;
	pool.job = NULL;
	pthread_cond_init(&pool.work, NULL);
	pthread_cond_init(&pool.done, NULL);
	pthread_mutex_unlock(&pool.lock);
}
static void pool_atfork(void)
{
	pthread_atfork(pool_prefork, pool_postfork_parent, pool_postfork_child);
}

/* Starts workers up to want (under lock); keeps going with fewer if it cannot. */
static void pool_grow(int want)
{
	pthread_once(&pool_atfork_once, pool_atfork);
	while (pool.nworkers < want) {
		int w = pool.nworkers + 1;
		pool.start_gen[w] = pool.gen;
		pthread_t t;
		pthread_attr_t at;
		pthread_attr_init(&at);
		pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
		int e = pthread_create(&t, &at, pool_worker, (void *)(intptr_t)w);
		pthread_attr_destroy(&at);
		if (e)
			break;
		pool.nworkers = w;
	}
}

static int optim_threads(void)
{
	int t = optim_forced_threads ? optim_forced_threads : kn_cpu_threads();
	return t < 1 ? 1 : t > KN_OPTIM_MAX_THREADS ? KN_OPTIM_MAX_THREADS : t;
}

/* Splits [0, n) in nparts chunks cut on 64-byte lines of p (16 floats). */
static void optim_split(struct optim_job *j, long n, int nparts)
{
	long off = (long)(((uintptr_t)j->p / sizeof(float)) & 15);
	j->bound[0] = 0;
	for (int k = 1; k < nparts; k++) {
		long b = n / nparts * k + n % nparts * k / nparts;
		b = ((b + off + 15) & ~15L) - off;
		j->bound[k] = b < j->bound[k - 1] ? j->bound[k - 1] : b > n ? n : b;
	}
	j->bound[nparts] = n;
}

static void optim_run(struct optim_job *j, long n)
{
	long min_chunk = optim_forced_min_chunk ? optim_forced_min_chunk : KN_OPTIM_MIN_CHUNK;
	long most = n / min_chunk;
	int nparts = optim_threads();
	if (most < nparts)
		nparts = most < 1 ? 1 : (int)most;
	optim_split(j, n, nparts);
	if (nparts == 1) {
		optim_job_run(j, 0);
		return;
	}
	pthread_mutex_lock(&pool.lock);
	if (pool.busy) { /* another stream's update owns the pool: run alone */
		pthread_mutex_unlock(&pool.lock);
		for (int k = 0; k < nparts; k++)
			optim_job_run(j, k);
		return;
	}
	pool.busy = 1;
	pool_grow(nparts - 1);
	int posted = pool.nworkers + 1 < nparts ? pool.nworkers + 1 : nparts;
	pool.job = j;
	pool.nparts = posted;
	pool.pending = posted - 1;
	pool.gen++;
	if (pool.pending)
		pthread_cond_broadcast(&pool.work);
	pthread_mutex_unlock(&pool.lock);
	optim_job_run(j, 0);
	for (int k = posted; k < nparts; k++) /* chunks of workers that did not start */
		optim_job_run(j, k);
	pthread_mutex_lock(&pool.lock);
	while (pool.pending)
		pthread_cond_wait(&pool.done, &pool.lock);
	pool.busy = 0;
	pool.job = NULL;
	pool.nparts = 0;
	pthread_mutex_unlock(&pool.lock);
}

void kn_adamw_cpu(const struct kn_adamw_args *a)
{
	double bc1 = 1.0 - pow((double)a->beta1, a->t);
	double bc2 = 1.0 - pow((double)a->beta2, a->t);
	struct kn_adamw_coef c = {.decay = (float)(1.0 - (double)a->lr * a->weight_decay),
	                          .step = (float)((double)a->lr / bc1),
	                          .bc2_sqrt = (float)sqrt(bc2),
	                          .eps = a->eps,
	                          .b1 = a->beta1,
	                          .b2 = a->beta2,
	                          .c1 = (float)(1.0 - (double)a->beta1),
	                          .c2 = (float)(1.0 - (double)a->beta2),
	                          .gs = kn_clip_scale(&a->clip)};
	struct optim_job j = {.path = kn_optim_path_get(),
	                      .adamw = 1,
	                      .p = a->params,
	                      .g = a->grads,
	                      .s1 = a->m,
	                      .s2 = a->v,
	                      .coef = &c};
	optim_run(&j, a->N);
}

/* SGD, in torch.optim.SGD's order: decay into the gradient, then momentum,
 * then the step. */
void kn_sgd_cpu(const struct kn_sgd_args *a)
{
	struct kn_sgd_coef c = {
	    .lr = a->lr, .mu = a->momentum, .wd = a->weight_decay, .gs = kn_clip_scale(&a->clip)};
	struct optim_job j = {.path = kn_optim_path_get(),
	                      .adamw = 0,
	                      .p = a->params,
	                      .g = a->grads,
	                      .s1 = a->buf,
	                      .coef = &c};
	optim_run(&j, a->N);
}

uint64_t kn_optim_state_bytes(enum kn_optimizer kind, float momentum, uint64_t nparams)
{
	if (kind == KN_SGD)
		return momentum != 0 ? 4 * nparams : 0;
	return 8 * nparams;
}

/* Mixed precision: the same steps on the fp32 master with the bf16 gradient
 * widened (exact), then the bf16 weight rounded from the master. */
void kn_adamw_mixed_cpu(const struct kn_adamw_mixed_args *a)
{
	float *p = a->master, *m = a->m, *v = a->v;
	const uint16_t *g = a->grads;
	uint16_t *w = a->params;
	double bc1 = 1.0 - pow((double)a->beta1, a->t);
	double bc2 = 1.0 - pow((double)a->beta2, a->t);
	float decay = (float)(1.0 - (double)a->lr * a->weight_decay);
	float step = (float)((double)a->lr / bc1);
	float bc2_sqrt = (float)sqrt(bc2);
	float b1 = a->beta1, b2 = a->beta2, eps = a->eps;
	float c1 = (float)(1.0 - (double)a->beta1), c2 = (float)(1.0 - (double)a->beta2);
	float gs = kn_clip_scale(&a->clip);
	for (long i = 0; i < a->N; i++) {
		float gi = kn_bf16_to_f32(g[i]) * gs;
		float pi = p[i] * decay;
		float mi = m[i] * b1 + c1 * gi;
		float vi = v[i] * b2 + c2 * gi * gi;
		float denom = sqrtf(vi) / bc2_sqrt + eps;
		p[i] = pi - step * (mi / denom);
		m[i] = mi;
		v[i] = vi;
		w[i] = kn_f32_to_bf16(p[i]);
	}
}

void kn_sgd_mixed_cpu(const struct kn_sgd_mixed_args *a)
{
	float *p = a->master, *buf = a->buf;
	const uint16_t *g = a->grads;
	uint16_t *w = a->params;
	float lr = a->lr, mu = a->momentum, wd = a->weight_decay, gs = kn_clip_scale(&a->clip);
	for (long i = 0; i < a->N; i++) {
		float d = kn_bf16_to_f32(g[i]) * gs + wd * p[i];
		if (buf) {
			d = buf[i] * mu + d;
			buf[i] = d;
		}
		p[i] = p[i] - lr * d;
		w[i] = kn_f32_to_bf16(p[i]);
	}
}
