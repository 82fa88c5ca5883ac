/* kernels/tp.c — a GPT-2 block in the tensor-parallel form (kernels.h,
 * "tensor parallelism"): shard sizes and layouts, the copy between a block
 * and its shards, and the three segments of a member's forward and backward
 * as kernel sequences (kn_runner: CPU or a stream).
 *
 * Member ranges (fp32, nc = 4/t chunks, cw = C/4, bt = B*T, btc = bt*C):
 *   stash: ln1 btc | qkv nc x (bt, 3cw) (a chunk's q|k|v) | att nc x (B, NH/4,
 *          T, T) | atty nc x (bt, cw) | res2 btc | ln2 btc | fch nc x (bt, C) |
 *          fch_gelu nc x (bt, C) | ln1_mean, ln1_rstd, ln2_mean, ln2_rstd (bt)
 *          (t = 1: the plain block's bytes, chunk-major inside)
 *   work:  attention ws (one chunk's) | slots t x btc | partials nc x btc |
 *          sum btc (forward: a projection's sum; backward: dres2, which lives
 *          from segment 0 to 1) | backward: dln2 btc, dfch nc x (bt, C),
 *          dfch_gelu nc x (bt, C), dattproj btc, datty nc x (bt, cw),
 *          dqkv nc x (bt, 3cw)
 */
#include "kernels/internal.h"

int kn_block_tp_check(const struct kn_model_config *cfg, int t)
{
	SP_CHECK(kn_model_config_check(cfg));
	if (t != 1 && t != 2 && t != 4)
		return sp_error(-EINVAL, "tensor parallel %d: 1, 2 or 4 devices per block", t);
	if (cfg->NH % KN_TP_CHUNKS || cfg->C % KN_TP_CHUNKS)
		return sp_error(-EINVAL,
		                "the tensor-parallel form: NH = %d heads and C = %d channels must "
		                "be multiples of %d (its fixed chunks)",
		                cfg->NH, cfg->C, KN_TP_CHUNKS);
	if (cfg->dtype != KN_F32)
		return sp_error(-ENOTSUP, "tensor parallel %d: fp32 only (bf16 is not built)", t);
	return 0;
}

void kn_block_shard_param_sizes(int C, int t, size_t out[KN_BLOCK_NPARAMS])
{
	kn_block_param_sizes(C, out);
	int cut[KN_BLOCK_NPARAMS] = {0, 0, 1, 1, 1, 0, 0, 0, 1, 1, 1, 0};
	for (int i = 0; i < KN_BLOCK_NPARAMS; i++)
		if (cut[i])
			out[i] /= (size_t)t;
}

/* The sizes of one member's ranges (bytes). */
struct kn_tp_sizes {
	uint64_t params, stash, ws, work;
};

static void kn_tp_sizes(const struct kn_model_config *cfg, int t, int B, int T,
                        struct kn_tp_sizes *z)
{
	uint64_t C = cfg->C, bt = (uint64_t)B * T, btc = bt * C, nc = KN_TP_CHUNKS / t;
	size_t n[KN_BLOCK_NPARAMS];
	kn_block_shard_param_sizes(cfg->C, t, n);
	z->params = 0;
	for (int i = 0; i < KN_BLOCK_NPARAMS; i++)
		z->params += 4 * n[i];
	uint64_t att = kn_attention_att_bytes(KN_F32, B, T, cfg->NH / KN_TP_CHUNKS);
	/* ln1, res2, ln2; per chunk qkv 3/4, atty 1/4, fch 1, fch_gelu 1 (x btc) */
	z->stash = 4 * (3 * btc + nc * (3 * btc / 4 + btc / 4 + 2 * btc)) + nc * att + 16 * bt;
	z->ws = kn_attention_ws_bytes(KN_F32, B, T, cfg->C / KN_TP_CHUNKS, cfg->NH / KN_TP_CHUNKS);
	/* slots, partials, sum; dln2, dfch, dfch_gelu, dattproj, datty, dqkv */
	z->work = z->ws + 4 * (t * btc + nc * btc + btc) +
	          4 * (btc + nc * 2 * btc + btc + nc * btc / 4 + nc * 3 * btc / 4);
}

int kn_block_tp_describe(const struct kn_model_config *cfg, int t, int B, int T,
                         struct kn_layer_desc *out)
{
	SP_CHECK(kn_block_tp_check(cfg, t));
	struct kn_model_config plain = *cfg;
	plain.tp_form = plain.tp_shards = 0;
	SP_CHECK(kn_layer_describe(&plain, KN_LAYER_BLOCK, B, T, out));
	struct kn_tp_sizes z;
	kn_tp_sizes(cfg, t, B, T, &z);
	double C = cfg->C, btc = (double)B * T * C, att = (double)B * cfg->NH * T * T;
	out->param_bytes = out->grad_bytes = z.params;
	out->optim_bytes = z.params * 2; /* m and v */
	out->stash_bytes = z.stash;
	out->work_bytes = z.work;
	/* the GEMMs and attention split t ways; LayerNorms, residuals, the
	 * projections' biases and the sums are every member's */
	double gemm = 24 * btc * C, attn = 4 * btc * T, elem = 60 * btc + 5 * att;
	out->fwd_flops = (gemm + attn) / t + elem + 2 * btc * t;
	out->bwd_flops = 2 * (gemm + attn) / t + 2 * elem + 2 * btc * t;
	return 0;
}

float *kn_block_tp_slots(const struct kn_model_config *cfg, int t, int B, int T, void *work)
{
	struct kn_tp_sizes z;
	kn_tp_sizes(cfg, t, B, T, &z);
	return work ? (float *)((char *)work + z.ws) : NULL;
}

/* Copies rows x cols elements between a and b (row strides lda, ldb). */
static void copy2d(char *a, size_t lda, char *b, size_t ldb, size_t rows, size_t cols, size_t e,
                   int a_to_b)
{
	for (size_t i = 0; i < rows; i++) {
		char *pa = a + i * lda * e, *pb = b + i * ldb * e;
		if (a_to_b)
			memcpy(pb, pa, cols * e);
		else
			memcpy(pa, pb, cols * e);
	}
}

void kn_block_shard_copy(int C, int t, int r, size_t esize, void *full, void *shard, int to_shard)
{
	size_t nf[KN_BLOCK_NPARAMS], ns[KN_BLOCK_NPARAMS], c = (size_t)C, ct = c / t;
	kn_block_param_sizes(C, nf);
	kn_block_shard_param_sizes(C, t, ns);
	char *f = full, *s = shard;
	for (int i = 0; i < KN_BLOCK_NPARAMS; i++) {
		switch (i) {
		case 2: /* qkvw: the q, k and v rows of the shard's heads */
			for (int p = 0; p < 3; p++)
				copy2d(f + ((p * c + r * ct) * c) * esize, c,
				       s + p * ct * c * esize, c, ct, c, esize, to_shard);
			break;
		case 3: /* qkvb */
			for (int p = 0; p < 3; p++)
				copy2d(f + (p * c + r * ct) * esize, 0, s + p * ct * esize, 0, 1,
				       ct, esize, to_shard);
			break;
		case 4: /* attprojw (C, C): its input columns */
			copy2d(f + r * ct * esize, c, s, ct, c, ct, esize, to_shard);
			break;
		case 8: /* fcw (4C, C): its rows; fcb */
		case 9: {
			size_t per = ns[i];
			copy2d(f + r * per * esize, 0, s, 0, 1, per, esize, to_shard);
			break;
		}
		case 10: /* fcprojw (C, 4C): its input columns */
			copy2d(f + r * 4 * ct * esize, 4 * c, s, 4 * ct, c, 4 * ct, esize,
			       to_shard);
			break;
		default: copy2d(f, 0, s, 0, 1, nf[i], esize, to_shard);
		}
		f += nf[i] * esize;
		s += ns[i] * esize;
	}
}

/* A member's pointers (module comment's layout). */
struct kn_tp_ptrs {
	float *p[KN_BLOCK_NPARAMS], *g[KN_BLOCK_NPARAMS];
	float *ln1, *qkv, *att, *atty, *res2, *ln2, *fch, *fch_gelu;
	float *ln1_mean, *ln1_rstd, *ln2_mean, *ln2_rstd;
	float *ws, *slots, *part, *sum;
	float *dln2, *dfch, *dfch_gelu, *dattproj, *datty, *dqkv, *dend;
	long att_chunk; /* floats of one chunk's att */
};

static float *take(float **cur, uint64_t floats)
{
	float *p = *cur;
	*cur += floats;
	return p;
}

static void kn_tp_layout(const struct kn_model_config *cfg, int t, int B, int T,
                         const struct kn_layer_mem *mem, struct kn_tp_ptrs *q)
{
	uint64_t C = cfg->C, bt = (uint64_t)B * T, btc = bt * C, nc = KN_TP_CHUNKS / t;
	size_t n[KN_BLOCK_NPARAMS], off = 0;
	kn_block_shard_param_sizes(cfg->C, t, n);
	for (int i = 0; i < KN_BLOCK_NPARAMS; i++) {
		q->p[i] = (float *)mem->params + off;
		q->g[i] = mem->grads ? (float *)mem->grads + off : NULL;
		off += n[i];
	}
	q->att_chunk = (long)(kn_attention_att_bytes(KN_F32, B, T, cfg->NH / KN_TP_CHUNKS) / 4);
	float *s = mem->stash;
	q->ln1 = take(&s, btc);
	q->qkv = take(&s, nc * 3 * btc / 4);
	q->att = take(&s, nc * (uint64_t)q->att_chunk);
	q->atty = take(&s, nc * btc / 4);
	q->res2 = take(&s, btc);
	q->ln2 = take(&s, btc);
	q->fch = take(&s, nc * btc);
	q->fch_gelu = take(&s, nc * btc);
	q->ln1_mean = take(&s, bt);
	q->ln1_rstd = take(&s, bt);
	q->ln2_mean = take(&s, bt);
	q->ln2_rstd = take(&s, bt);
	struct kn_tp_sizes z;
	kn_tp_sizes(cfg, t, B, T, &z);
	q->ws = mem->work;
	float *w = (float *)((char *)mem->work + z.ws);
	q->slots = take(&w, t * btc);
	q->part = take(&w, nc * btc);
	q->sum = take(&w, btc);
	q->dln2 = take(&w, btc);
	q->dfch = take(&w, nc * btc);
	q->dfch_gelu = take(&w, nc * btc);
	q->dattproj = take(&w, btc);
	q->datty = take(&w, nc * btc / 4);
	q->dqkv = take(&w, nc * 3 * btc / 4);
	q->dend = w;
}

static int gemm(const struct kn_runner *r, float *c, int ldc, const float *a, int lda, int ta,
                const float *b, int ldb, int tb, int M, int N, int K, float beta, const float *bias)
{
	struct kn_gemm_args g = {.c = c,
	                         .a = a,
	                         .b = b,
	                         .bias = bias,
	                         .trans_a = ta,
	                         .trans_b = tb,
	                         .M = M,
	                         .N = N,
	                         .K = K,
	                         .lda = lda,
	                         .ldb = ldb,
	                         .ldc = ldc,
	                         .beta = beta};
	KN_RUN(r, gemm, g);
	return 0;
}

static int colsum(const struct kn_runner *r, float *out, const float *in, int M, int N, int ld)
{
	struct kn_colsum_args a = {.out = out, .in = in, .M = M, .N = N, .ld = ld};
	KN_RUN(r, colsum, a);
	return 0;
}

static int tree(const struct kn_runner *r, float *out, const float *in, int n, long N,
                const float *bias, int OC)
{
	struct kn_tree_sum_args a = {
	    .out = out, .in = in, .bias = bias, .stride = N, .N = N, .n = n, .OC = OC};
	KN_RUN(r, tree_sum, a);
	return 0;
}

static int kn_tp_validate(const char *fn, const struct kn_model_config *cfg, int t, int rank,
                          int seg, int B, int T, const struct kn_layer_mem *mem,
                          const struct kn_layer_io *io, int dir)
{
	SP_CHECK(kn_block_tp_check(cfg, t));
	if (rank < 0 || rank >= t || seg < 0 || seg >= KN_TP_SEGS)
		return sp_error(-EINVAL, "kn_block_tp %s: member %d of %d, segment %d of %d", fn,
		                rank, t, seg, KN_TP_SEGS);
	if (B <= 0 || T <= 0 || T > cfg->maxT)
		return sp_error(-EINVAL, "kn_block_tp %s: B = %d, T = %d (maxT %d)", fn, B, T,
		                cfg->maxT);
	if (!mem || !mem->params || !mem->stash || !mem->work || (dir && !mem->grads))
		return sp_error(-EINVAL, "kn_block_tp %s: params, stash, work%s are needed", fn,
		                dir ? ", grads" : "");
	if (!io || !io->in || (!dir && seg == 2 && !io->out) ||
	    (dir && (!io->dout || (seg && !io->din))))
		return sp_error(-EINVAL, "kn_block_tp %s: io->in, %s needed", fn,
		                dir ? "dout, din" : "out");
	return 0;
}

int kn_block_tp_forward_run(const struct kn_runner *r, const struct kn_model_config *cfg, int t,
                            int rank, int seg, int B, int T, const struct kn_layer_mem *mem,
                            const struct kn_layer_io *io)
{
	SP_CHECK(kn_tp_validate("forward", cfg, t, rank, seg, B, T, mem, io, 0));
	struct kn_tp_ptrs q;
	kn_tp_layout(cfg, t, B, T, mem, &q);
	int C = cfg->C, bt = B * T, nc = KN_TP_CHUNKS / t, cw = C / KN_TP_CHUNKS, ct = C / t;
	long btc = (long)bt * C;
	const float *x = io->in;
	float *mine = q.slots + (long)rank * btc;
	if (seg == 0) {
		struct kn_layernorm_fwd_args ln1 = {.out = q.ln1,
		                                    .mean = q.ln1_mean,
		                                    .rstd = q.ln1_rstd,
		                                    .inp = x,
		                                    .weight = q.p[0],
		                                    .bias = q.p[1],
		                                    .B = B,
		                                    .T = T,
		                                    .C = C};
		KN_RUN(r, layernorm_forward, ln1);
		for (int j = 0; j < nc; j++) {
			float *qkv = q.qkv + (long)j * bt * 3 * cw, *y = q.atty + (long)j * bt * cw;
			for (int p = 0; p < 3; p++) /* q, k, v of the chunk's heads */
				SP_CHECK(gemm(r, qkv + p * cw, 3 * cw, q.ln1, C, 0,
				              q.p[2] + (long)(p * ct + j * cw) * C, C, 1, bt, cw, C,
				              0, q.p[3] + p * ct + j * cw));
			struct kn_attention_fwd_args at = {.out = y,
			                                   .att = q.att + j * q.att_chunk,
			                                   .ws = q.ws,
			                                   .inp = qkv,
			                                   .B = B,
			                                   .T = T,
			                                   .C = cw,
			                                   .NH = cfg->NH / KN_TP_CHUNKS};
			KN_RUN(r, attention_forward, at);
			/* attproj's partial over the chunk's input columns */
			SP_CHECK(gemm(r, q.part + j * btc, C, y, cw, 0, q.p[4] + j * cw, ct, 1, bt,
			              C, cw, 0, NULL));
		}
		return tree(r, mine, q.part, nc, btc, NULL, 0);
	}
	if (seg == 1) {
		SP_CHECK(tree(r, q.sum, q.slots, t, btc, q.p[5], C));
		struct kn_residual_fwd_args r2 = {.out = q.res2, .a = x, .b = q.sum, .N = btc};
		KN_RUN(r, residual_forward, r2);
		struct kn_layernorm_fwd_args ln2 = {.out = q.ln2,
		                                    .mean = q.ln2_mean,
		                                    .rstd = q.ln2_rstd,
		                                    .inp = q.res2,
		                                    .weight = q.p[6],
		                                    .bias = q.p[7],
		                                    .B = B,
		                                    .T = T,
		                                    .C = C};
		KN_RUN(r, layernorm_forward, ln2);
		for (int j = 0; j < nc; j++) {
			float *h = q.fch + j * btc, *hg = q.fch_gelu + j * btc;
			SP_CHECK(gemm(r, h, C, q.ln2, C, 0, q.p[8] + (long)j * C * C, C, 1, bt, C,
			              C, 0, q.p[9] + (long)j * C));
			struct kn_gelu_fwd_args ge = {.out = hg, .inp = h, .N = btc};
			KN_RUN(r, gelu_forward, ge);
			SP_CHECK(gemm(r, q.part + j * btc, C, hg, C, 0, q.p[10] + (long)j * C,
			              4 * ct, 1, bt, C, C, 0, NULL));
		}
		return tree(r, mine, q.part, nc, btc, NULL, 0);
	}
	SP_CHECK(tree(r, q.sum, q.slots, t, btc, q.p[11], C));
	struct kn_residual_fwd_args r3 = {.out = io->out, .a = q.res2, .b = q.sum, .N = btc};
	KN_RUN(r, residual_forward, r3);
	return 0;
}

int kn_block_tp_backward_run(const struct kn_runner *r, const struct kn_model_config *cfg, int t,
                             int rank, int seg, int B, int T, const struct kn_layer_mem *mem,
                             const struct kn_layer_io *io)
{
	SP_CHECK(kn_tp_validate("backward", cfg, t, rank, seg, B, T, mem, io, 1));
	struct kn_tp_ptrs q;
	kn_tp_layout(cfg, t, B, T, mem, &q);
	int C = cfg->C, bt = B * T, nc = KN_TP_CHUNKS / t, cw = C / KN_TP_CHUNKS, ct = C / t;
	long btc = (long)bt * C;
	const float *dout = io->dout;
	float *mine = q.slots + (long)rank * btc, *dres2 = q.sum;
	if (seg == 0) {
		struct kn_grad_zero_args z = {.x = dres2, .N = (long)(q.dend - dres2)};
		KN_RUN(r, grad_zero, z);
		struct kn_grad_accumulate_args acc = {.dst = dres2, .src = dout, .N = btc};
		KN_RUN(r, grad_accumulate, acc);
		SP_CHECK(colsum(r, q.g[11], dout, bt, C, C)); /* fcprojb, replicated */
		for (int j = 0; j < nc; j++) {
			float *dhg = q.dfch_gelu + j * btc, *dh = q.dfch + j * btc;
			SP_CHECK(gemm(r, dhg, C, dout, C, 0, q.p[10] + (long)j * C, 4 * ct, 0, bt,
			              C, C, 1, NULL));
			SP_CHECK(gemm(r, q.g[10] + (long)j * C, 4 * ct, dout, C, 1,
			              q.fch_gelu + j * btc, C, 0, C, C, bt, 1, NULL));
			struct kn_gelu_bwd_args ge = {
			    .dinp = dh, .inp = q.fch + j * btc, .dout = dhg, .N = btc};
			KN_RUN(r, gelu_backward, ge);
			SP_CHECK(gemm(r, q.g[8] + (long)j * C * C, C, dh, C, 1, q.ln2, C, 0, C, C,
			              bt, 1, NULL));
			SP_CHECK(colsum(r, q.g[9] + (long)j * C, dh, bt, C, C));
			/* dln2's partial over the chunk's hidden columns */
			SP_CHECK(gemm(r, q.part + j * btc, C, dh, C, 0, q.p[8] + (long)j * C * C, C,
			              0, bt, C, C, 0, NULL));
		}
		return tree(r, mine, q.part, nc, btc, NULL, 0);
	}
	if (seg == 1) {
		SP_CHECK(tree(r, q.dln2, q.slots, t, btc, NULL, 0));
		struct kn_layernorm_bwd_args ln2 = {.dinp = dres2,
		                                    .dweight = q.g[6],
		                                    .dbias = q.g[7],
		                                    .dout = q.dln2,
		                                    .inp = q.res2,
		                                    .weight = q.p[6],
		                                    .mean = q.ln2_mean,
		                                    .rstd = q.ln2_rstd,
		                                    .B = B,
		                                    .T = T,
		                                    .C = C};
		KN_RUN(r, layernorm_backward, ln2);
		struct kn_residual_bwd_args r2 = {
		    .da = io->din, .db = q.dattproj, .dout = dres2, .N = btc};
		KN_RUN(r, residual_backward, r2);
		SP_CHECK(colsum(r, q.g[5], q.dattproj, bt, C, C)); /* attprojb, replicated */
		for (int j = 0; j < nc; j++) {
			float *dy = q.datty + (long)j * bt * cw,
			      *dqkv = q.dqkv + (long)j * bt * 3 * cw;
			float *qkv = q.qkv + (long)j * bt * 3 * cw;
			SP_CHECK(gemm(r, dy, cw, q.dattproj, C, 0, q.p[4] + j * cw, ct, 0, bt, cw,
			              C, 1, NULL));
			SP_CHECK(gemm(r, q.g[4] + j * cw, ct, q.dattproj, C, 1,
			              q.atty + (long)j * bt * cw, cw, 0, C, cw, bt, 1, NULL));
			struct kn_attention_bwd_args at = {.dinp = dqkv,
			                                   .ws = q.ws,
			                                   .dout = dy,
			                                   .inp = qkv,
			                                   .att = q.att + j * q.att_chunk,
			                                   .out = q.atty + (long)j * bt * cw,
			                                   .B = B,
			                                   .T = T,
			                                   .C = cw,
			                                   .NH = cfg->NH / KN_TP_CHUNKS};
			KN_RUN(r, attention_backward, at);
			for (int p = 0; p < 3; p++) {
				long row = (long)(p * ct + j * cw);
				SP_CHECK(gemm(r, q.g[2] + row * C, C, dqkv + p * cw, 3 * cw, 1,
				              q.ln1, C, 0, cw, C, bt, 1, NULL));
				SP_CHECK(colsum(r, q.g[3] + row, dqkv + p * cw, bt, cw, 3 * cw));
				/* dln1's partial: q's, then k's and v's added */
				SP_CHECK(gemm(r, q.part + j * btc, C, dqkv + p * cw, 3 * cw, 0,
				              q.p[2] + row * C, C, 0, bt, C, cw, p ? 1.0f : 0.0f,
				              NULL));
			}
		}
		return tree(r, mine, q.part, nc, btc, NULL, 0);
	}
	float *dln1 = q.dln2; /* dln2 is dead by now */
	SP_CHECK(tree(r, dln1, q.slots, t, btc, NULL, 0));
	struct kn_layernorm_bwd_args ln1 = {.dinp = io->din,
	                                    .dweight = q.g[0],
	                                    .dbias = q.g[1],
	                                    .dout = dln1,
	                                    .inp = io->in,
	                                    .weight = q.p[0],
	                                    .mean = q.ln1_mean,
	                                    .rstd = q.ln1_rstd,
	                                    .B = B,
	                                    .T = T,
	                                    .C = C};
	KN_RUN(r, layernorm_backward, ln1);
	return 0;
}
