/* train/sample.c — `spill sample`: text from a GPT-2's weights.
 *
 * The simplest correct forward: the kernels' CPU layers (kn_layer_forward_cpu:
 * the embedding and the blocks, the same code the trainer runs) over the whole
 * context at batch 1 for every new token, then the final layernorm and the
 * tied LM head (kn_layernorm_forward_cpu, kn_matmul_forward_cpu) at the last
 * position only. No KV cache: token i costs a forward of min(i, positions)
 * positions, fine for short outputs. Sampling (temperature, top-k) draws with
 * splitmix64 from the seed, so the output is a function of the weights, the
 * prompt, the settings and the CPU thread count.
 */
#include "train/internal.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng_next(uint64_t *s)
{
	uint64_t x = (*s += 0x9e3779b97f4a7c15ull);
	x = (x ^ x >> 30) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ x >> 27) * 0x94d049bb133111ebull;
	return x ^ x >> 31;
}

struct cand {
	float logit;
	int id;
};

static int cand_cmp(const void *a, const void *b)
{
	const struct cand *x = a, *y = b;
	if (x->logit != y->logit)
		return x->logit > y->logit ? -1 : 1;
	return x->id - y->id; /* ties: the smaller id first */
}

/* The next token from V logits (c: scratch of V). */
static int pick(const float *logits, int V, const struct tr_sample_config *c, struct cand *cd,
                uint64_t *rng)
{
	for (int i = 0; i < V; i++)
		cd[i] = (struct cand){logits[i], i};
	qsort(cd, (size_t)V, sizeof(*cd), cand_cmp);
	if (c->temperature == 0)
		return cd[0].id;
	int k = c->top_k > 0 && c->top_k < V ? c->top_k : V;
	double sum = 0, u;
	for (int i = 0; i < k; i++)
		sum += exp(((double)cd[i].logit - cd[0].logit) / c->temperature);
	u = (double)(rng_next(rng) >> 11) * 0x1.0p-53 * sum;
	for (int i = 0; i < k; i++) {
		u -= exp(((double)cd[i].logit - cd[0].logit) / c->temperature);
		if (u < 0)
			return cd[i].id;
	}
	return cd[k - 1].id;
}

/* The prompt as tokens (*n of them, malloc'd in *out with room for more). */
static int prompt_tokens(const struct tr_sample_config *c, int V, int room, int **out, int *n)
{
	const char *p = c->prompt && *c->prompt ? c->prompt : NULL;
	size_t len = p ? strlen(p) : 1;
	int *t = malloc((len + (size_t)room) * sizeof(int)), k = 0;
	if (!t)
		return sp_error(-ENOMEM, "sample: out of memory");
	if (V == 256) {
		for (size_t i = 0; p && i < len; i++)
			t[k++] = (unsigned char)p[i];
		if (!p)
			t[k++] = '\n';
	} else if (!p) {
		t[k++] = V > 50256 ? 50256 : 0; /* GPT-2's <|endoftext|> */
	} else {
		for (const char *s = p; *s;) {
			if (isspace((unsigned char)*s) || *s == ',') {
				s++;
				continue;
			}
			char *end;
			errno = 0;
			long x = strtol(s, &end, 10);
			if (end == s || errno || x < 0 || x >= V) {
				free(t);
				return sp_error(
				    -EINVAL,
				    "--prompt: '%.20s' is not a token id below %d (the "
				    "vocabulary is not bytes: give ids, spill has no BPE "
				    "tokenizer)",
				    s, V);
			}
			t[k++] = (int)x;
			s = end;
		}
		if (!k) {
			free(t);
			return sp_error(-EINVAL, "--prompt: no token ids");
		}
	}
	*out = t;
	*n = k;
	return 0;
}

static void emit(FILE *f, int V, int tok, int first)
{
	if (V == 256)
		fputc(tok, f);
	else
		fprintf(f, first ? "%d" : " %d", tok);
}

int tr_sample(const struct tr_sample_config *c)
{
	SP_CHECK_ARG(c && c->path, "tr_sample: no weights");
	if (c->tokens < 1 || !(c->temperature >= 0) || c->top_k < 0)
		return sp_error(-EINVAL, "sample: --tokens must be >= 1, --temperature and --top-k "
		                         ">= 0");
	SP_CHECK(kn_cpu_set_threads(c->threads));
	FILE *out = c->out ? c->out : stdout;
	struct tr_weights w;
	SP_CHECK(tr_weights_load(c->path, &w));
	int rc = 0, n = 0, *tok = NULL, C = w.channels, V = w.vocab, maxT = w.positions;
	struct kn_model_config kc = {
	    .maxT = maxT, .V = V, .L = w.layers, .NH = w.heads, .C = C, .dtype = KN_F32};
	struct kn_layer_desc de, db;
	void *stash = NULL, *work = NULL;
	float *x = NULL, *y = NULL, *hn = NULL, *logits = NULL;
	struct cand *cd = NULL;
	SP_CHECK_GOTO(kn_layer_describe(&kc, KN_LAYER_EMBEDDING, 1, maxT, &de), rc, out);
	SP_CHECK_GOTO(kn_layer_describe(&kc, KN_LAYER_BLOCK, 1, maxT, &db), rc, out);
	SP_CHECK_GOTO(prompt_tokens(c, V, c->tokens, &tok, &n), rc, out);
	stash = calloc(1, db.stash_bytes + de.stash_bytes + 64);
	work = calloc(1, db.work_bytes + de.work_bytes + 64);
	x = malloc((size_t)maxT * C * sizeof(float));
	y = malloc((size_t)maxT * C * sizeof(float));
	hn = malloc((size_t)C * sizeof(float));
	logits = malloc((size_t)V * sizeof(float));
	cd = malloc((size_t)V * sizeof(*cd));
	if (!stash || !work || !x || !y || !hn || !logits || !cd) {
		rc = sp_error(-ENOMEM, "sample: out of memory");
		goto out;
	}
	for (int i = 0; i < n; i++)
		emit(out, V, tok[i], i == 0);
	uint64_t rng = c->seed, cnt;
	for (int g = 0; g < c->tokens; g++) {
		int T = n < maxT ? n : maxT;
		const int *ctx = tok + (n - T);
		struct kn_layer_mem mem = {.params = w.p, .stash = stash, .work = work};
		struct kn_layer_io io = {.in = ctx, .out = x};
		SP_CHECK_GOTO(kn_layer_forward_cpu(&kc, KN_LAYER_EMBEDDING, 1, T, &mem, &io), rc,
		              out);
		for (int l = 1; l <= w.layers; l++) {
			mem.params = w.p + tr_weights_layer(&w, l, &cnt);
			io = (struct kn_layer_io){.in = x, .out = y};
			SP_CHECK_GOTO(kn_layer_forward_cpu(&kc, KN_LAYER_BLOCK, 1, T, &mem, &io),
			              rc, out);
			float *s = x;
			x = y;
			y = s;
		}
		const float *head = w.p + tr_weights_layer(&w, w.layers + 1, &cnt);
		float mean, rstd;
		struct kn_layernorm_fwd_args ln = {.dtype = KN_F32,
		                                   .out = hn,
		                                   .mean = &mean,
		                                   .rstd = &rstd,
		                                   .inp = x + (size_t)(T - 1) * C,
		                                   .weight = head,
		                                   .bias = head + C,
		                                   .B = 1,
		                                   .T = 1,
		                                   .C = C};
		kn_layernorm_forward_cpu(&ln);
		struct kn_matmul_fwd_args mm = {.dtype = KN_F32,
		                                .out = logits,
		                                .inp = hn,
		                                .weight = w.p, /* wte: the tied head */
		                                .bias = NULL,
		                                .B = 1,
		                                .T = 1,
		                                .C = C,
		                                .OC = V};
		kn_matmul_forward_cpu(&mm);
		tok[n] = pick(logits, V, c, cd, &rng);
		emit(out, V, tok[n], 0);
		n++;
		fflush(out);
	}
	fputc('\n', out);
	fflush(out);
out:
	free(cd);
	free(logits);
	free(hn);
	free(x);
	free(y);
	free(work);
	free(stash);
	free(tok);
	tr_weights_free(&w);
	return rc;
}
