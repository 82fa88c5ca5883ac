/* kernels/layer_exec.c — forward, backward, update and zero-grad of one layer
 * (embedding, block, head) as a sequence of kernels over the five ranges of a
 * struct kn_layer_mem, run directly on the CPU (_cpu) or queued on a stream
 * (_launch, in launch.c) through the same sequence code (kn_runner).
 *
 * Range layouts (elements of cfg->dtype unless fp32 is said):
 *   block stash: ln1 BTC | qkv 3BTC | att B*NH*T*T | atty BTC | res2 BTC | ln2 BTC |
 *                fch 4BTC | fch_gelu 4BTC | ln1_mean, ln1_rstd, ln2_mean, ln2_rstd (BT fp32)
 *   bf16 block stash: the fp32 parts first, so every range stays 4-byte aligned:
 *                ln1_mean, ln1_rstd, ln2_mean, ln2_rstd (BT fp32) | lse (B*NH*T fp32,
 *                attention's logsumexp: no T x T) | ln1 | qkv | atty | res2 | ln2 | fch |
 *                fch_gelu (bf16)
 *   block work:  attention ws | forward: attproj BTC, fcproj BTC; backward: dres2 BTC,
 *                dln2 BTC, dfch 4BTC, dfch_gelu 4BTC, dattproj BTC, datty BTC,
 *                dqkv 3BTC, dln1 BTC
 *   head stash:  lnf BTC | probs BTV | lnf_mean, lnf_rstd (BT fp32)
 *   bf16 head stash: lnf_mean, lnf_rstd (BT fp32) | lnf BTC | probs BTV (bf16)
 *   head work:   forward: logits BTV; backward: dlogits BTV | dlnf BTC
 * The whole sequence is validated before the first kernel runs, so a bad call
 * runs (or queues) nothing.
 */
#include "kernels/internal.h"

struct kn_block_ptrs {
	void *p[KN_BLOCK_NPARAMS], *g[KN_BLOCK_NPARAMS];
	void *ln1, *qkv, *att, *atty, *res2, *ln2, *fch, *fch_gelu;
	float *ln1_mean, *ln1_rstd, *ln2_mean, *ln2_rstd;
	void *ws, *attproj, *fcproj;
	void *dres2, *dln2, *dfch, *dfch_gelu, *dattproj, *datty, *dqkv, *dln1;
};

/* Element i of a tensor of dtype dt at base. */
static void *kn_at(const void *base, size_t i, enum kn_dtype dt)
{
	return base ? (char *)base + i * kn_dtype_size(dt) : NULL;
}

/* Takes the next bytes of a range: returns the cursor, then advances it. */
static void *kn_take(char **cur, size_t bytes)
{
	void *p = *cur;
	*cur += bytes;
	return p;
}

static void kn_block_layout(const struct kn_model_config *cfg, int B, int T,
                            const struct kn_layer_mem *mem, struct kn_block_ptrs *q)
{
	enum kn_dtype dt = cfg->dtype;
	size_t e = kn_dtype_size(dt), C = cfg->C, bt = (size_t)B * T, btc = bt * C;
	size_t sz[KN_BLOCK_NPARAMS], off = 0;
	kn_block_param_sizes(cfg->C, sz);
	for (int i = 0; i < KN_BLOCK_NPARAMS; i++) {
		q->p[i] = kn_at(mem->params, off, dt);
		q->g[i] = kn_at(mem->grads, off, dt);
		off += sz[i];
	}
	char *s = mem->stash;
	size_t att = kn_attention_att_bytes(dt, B, T, cfg->NH);
	if (s && dt == KN_BF16) { /* fp32 first, so every range stays aligned */
		q->ln1_mean = kn_take(&s, 4 * bt);
		q->ln1_rstd = kn_take(&s, 4 * bt);
		q->ln2_mean = kn_take(&s, 4 * bt);
		q->ln2_rstd = kn_take(&s, 4 * bt);
		q->att = kn_take(&s, att);
	}
	if (s) {
		q->ln1 = kn_take(&s, e * btc);
		q->qkv = kn_take(&s, e * 3 * btc);
		if (dt != KN_BF16)
			q->att = kn_take(&s, att);
		q->atty = kn_take(&s, e * btc);
		q->res2 = kn_take(&s, e * btc);
		q->ln2 = kn_take(&s, e * btc);
		q->fch = kn_take(&s, e * 4 * btc);
		q->fch_gelu = kn_take(&s, e * 4 * btc);
	}
	if (s && dt != KN_BF16) {
		q->ln1_mean = kn_take(&s, 4 * bt);
		q->ln1_rstd = kn_take(&s, 4 * bt);
		q->ln2_mean = kn_take(&s, 4 * bt);
		q->ln2_rstd = kn_take(&s, 4 * bt);
	}
	char *w = mem->work;
	if (w) {
		q->ws = kn_take(&w, kn_attention_ws_bytes(dt, B, T, cfg->C, cfg->NH));
		q->attproj = w, q->fcproj = w + e * btc; /* forward */
		q->dres2 = kn_take(&w, e * btc);         /* backward */
		q->dln2 = kn_take(&w, e * btc);
		q->dfch = kn_take(&w, e * 4 * btc);
		q->dfch_gelu = kn_take(&w, e * 4 * btc);
		q->dattproj = kn_take(&w, e * btc);
		q->datty = kn_take(&w, e * btc);
		q->dqkv = kn_take(&w, e * 3 * btc);
		q->dln1 = w;
	}
}

#define KN_NEED(cond, what)                                                            \
	do {                                                                           \
		if (!(cond))                                                           \
			return sp_error(-EINVAL, "kn_layer %s: %s is NULL", fn, what); \
	} while (0)

/* Validates the call: config and shape (via the descriptor), and the ranges and
 * io pointers this kind and direction need. dir: 0 fwd, 1 bwd, 2 update, 3 zero. */
static int kn_layer_validate(const char *fn, const struct kn_model_config *cfg,
                             enum kn_layer_kind kind, int B, int T, const struct kn_layer_mem *mem,
                             const struct kn_layer_io *io, int dir)
{
	struct kn_layer_desc d;
	SP_CHECK(kn_layer_describe(cfg, kind, B, T, &d));
	KN_NEED(mem, "mem");
	KN_NEED(mem->params, "mem->params");
	if (dir >= 1)
		KN_NEED(mem->grads, "mem->grads");
	if (dir == 2)
		KN_NEED(mem->optim, "mem->optim");
	if (dir >= 2)
		return 0;
	KN_NEED(io, "io");
	KN_NEED(io->in, "io->in");
	if (d.stash_bytes)
		KN_NEED(mem->stash, "mem->stash");
	if (d.work_bytes)
		KN_NEED(mem->work, "mem->work");
	if (kind == KN_LAYER_HEAD) {
		KN_NEED(mem->tied, "mem->tied (wte)");
		KN_NEED(io->targets, "io->targets");
		if (dir == 1)
			KN_NEED(mem->tied_grad, "mem->tied_grad (dwte)");
	}
	if (dir == 0)
		KN_NEED(io->out, "io->out");
	if (dir == 1 && kind != KN_LAYER_HEAD)
		KN_NEED(io->dout, "io->dout");
	if (dir == 1 && kind != KN_LAYER_EMBEDDING)
		KN_NEED(io->din, "io->din");
	return 0;
}

static int kn_block_forward(const struct kn_runner *r, const struct kn_model_config *cfg, int B,
                            int T, const struct kn_layer_mem *mem, const struct kn_layer_io *io)
{
	struct kn_block_ptrs q;
	kn_block_layout(cfg, B, T, mem, &q);
	int C = cfg->C, NH = cfg->NH;
	long btc = (long)B * T * C;
	const void *x = io->in;
	struct kn_layernorm_fwd_args ln1 = {.dtype = cfg->dtype,
	                                    .out = q.ln1,
	                                    .mean = q.ln1_mean,
	                                    .rstd = q.ln1_rstd,
	                                    .inp = x,
	                                    .weight = q.p[0],
	                                    .bias = q.p[1],
	                                    .B = B,
	                                    .T = T,
	                                    .C = C};
	KN_RUN(r, layernorm_forward, ln1);
	struct kn_matmul_fwd_args qkv = {.dtype = cfg->dtype,
	                                 .out = q.qkv,
	                                 .inp = q.ln1,
	                                 .weight = q.p[2],
	                                 .bias = q.p[3],
	                                 .B = B,
	                                 .T = T,
	                                 .C = C,
	                                 .OC = 3 * C};
	KN_RUN(r, matmul_forward, qkv);
	struct kn_attention_fwd_args at = {.dtype = cfg->dtype,
	                                   .out = q.atty,
	                                   .att = q.att,
	                                   .ws = q.ws,
	                                   .inp = q.qkv,
	                                   .B = B,
	                                   .T = T,
	                                   .C = C,
	                                   .NH = NH};
	KN_RUN(r, attention_forward, at);
	struct kn_matmul_fwd_args pr = {.dtype = cfg->dtype,
	                                .out = q.attproj,
	                                .inp = q.atty,
	                                .weight = q.p[4],
	                                .bias = q.p[5],
	                                .B = B,
	                                .T = T,
	                                .C = C,
	                                .OC = C};
	KN_RUN(r, matmul_forward, pr);
	struct kn_residual_fwd_args r2 = {
	    .dtype = cfg->dtype, .out = q.res2, .a = x, .b = q.attproj, .N = btc};
	KN_RUN(r, residual_forward, r2);
	struct kn_layernorm_fwd_args ln2 = {.dtype = cfg->dtype,
	                                    .out = q.ln2,
	                                    .mean = q.ln2_mean,
	                                    .rstd = q.ln2_rstd,
	                                    .inp = q.res2,
	                                    .weight = q.p[6],
	                                    .bias = q.p[7],
	                                    .B = B,
	                                    .T = T,
	                                    .C = C};
	KN_RUN(r, layernorm_forward, ln2);
	struct kn_matmul_fwd_args fc = {.dtype = cfg->dtype,
	                                .out = q.fch,
	                                .inp = q.ln2,
	                                .weight = q.p[8],
	                                .bias = q.p[9],
	                                .B = B,
	                                .T = T,
	                                .C = C,
	                                .OC = 4 * C};
	KN_RUN(r, matmul_forward, fc);
	struct kn_gelu_fwd_args ge = {
	    .dtype = cfg->dtype, .out = q.fch_gelu, .inp = q.fch, .N = 4 * btc};
	KN_RUN(r, gelu_forward, ge);
	struct kn_matmul_fwd_args fp = {.dtype = cfg->dtype,
	                                .out = q.fcproj,
	                                .inp = q.fch_gelu,
	                                .weight = q.p[10],
	                                .bias = q.p[11],
	                                .B = B,
	                                .T = T,
	                                .C = 4 * C,
	                                .OC = C};
	KN_RUN(r, matmul_forward, fp);
	struct kn_residual_fwd_args r3 = {
	    .dtype = cfg->dtype, .out = io->out, .a = q.res2, .b = q.fcproj, .N = btc};
	KN_RUN(r, residual_forward, r3);
	return 0;
}

static int kn_zero(const struct kn_runner *r, enum kn_dtype dt, void *x, long n)
{
	struct kn_grad_zero_args z = {.dtype = dt, .x = x, .N = n};
	KN_RUN(r, grad_zero, z);
	return 0;
}

static int kn_block_backward(const struct kn_runner *r, const struct kn_model_config *cfg, int B,
                             int T, const struct kn_layer_mem *mem, const struct kn_layer_io *io)
{
	struct kn_block_ptrs q;
	kn_block_layout(cfg, B, T, mem, &q);
	int C = cfg->C, NH = cfg->NH;
	long btc = (long)B * T * C;
	const void *x = io->in, *dout = io->dout;
	/* the gradient scratch is contiguous from dres2 to the end of dln1 */
	SP_CHECK(kn_zero(r, cfg->dtype, q.dres2, 16 * btc));
	/* out = res2 + fcproj: dres2 += dout; dfcproj is dout itself */
	struct kn_grad_accumulate_args acc = {
	    .dtype = cfg->dtype, .dst = q.dres2, .src = dout, .N = btc};
	KN_RUN(r, grad_accumulate, acc);
	struct kn_matmul_bwd_args fp = {.dtype = cfg->dtype,
	                                .dinp = q.dfch_gelu,
	                                .dweight = q.g[10],
	                                .dbias = q.g[11],
	                                .dout = dout,
	                                .inp = q.fch_gelu,
	                                .weight = q.p[10],
	                                .B = B,
	                                .T = T,
	                                .C = 4 * C,
	                                .OC = C};
	KN_RUN(r, matmul_backward, fp);
	struct kn_gelu_bwd_args ge = {
	    .dtype = cfg->dtype, .dinp = q.dfch, .inp = q.fch, .dout = q.dfch_gelu, .N = 4 * btc};
	KN_RUN(r, gelu_backward, ge);
	struct kn_matmul_bwd_args fc = {.dtype = cfg->dtype,
	                                .dinp = q.dln2,
	                                .dweight = q.g[8],
	                                .dbias = q.g[9],
	                                .dout = q.dfch,
	                                .inp = q.ln2,
	                                .weight = q.p[8],
	                                .B = B,
	                                .T = T,
	                                .C = C,
	                                .OC = 4 * C};
	KN_RUN(r, matmul_backward, fc);
	struct kn_layernorm_bwd_args ln2 = {.dtype = cfg->dtype,
	                                    .dinp = q.dres2,
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
	/* res2 = x + attproj */
	struct kn_residual_bwd_args r2 = {
	    .dtype = cfg->dtype, .da = io->din, .db = q.dattproj, .dout = q.dres2, .N = btc};
	KN_RUN(r, residual_backward, r2);
	struct kn_matmul_bwd_args pr = {.dtype = cfg->dtype,
	                                .dinp = q.datty,
	                                .dweight = q.g[4],
	                                .dbias = q.g[5],
	                                .dout = q.dattproj,
	                                .inp = q.atty,
	                                .weight = q.p[4],
	                                .B = B,
	                                .T = T,
	                                .C = C,
	                                .OC = C};
	KN_RUN(r, matmul_backward, pr);
	struct kn_attention_bwd_args at = {.dtype = cfg->dtype,
	                                   .dinp = q.dqkv,
	                                   .ws = q.ws,
	                                   .dout = q.datty,
	                                   .inp = q.qkv,
	                                   .att = q.att,
	                                   .out = q.atty,
	                                   .B = B,
	                                   .T = T,
	                                   .C = C,
	                                   .NH = NH};
	KN_RUN(r, attention_backward, at);
	struct kn_matmul_bwd_args qkv = {.dtype = cfg->dtype,
	                                 .dinp = q.dln1,
	                                 .dweight = q.g[2],
	                                 .dbias = q.g[3],
	                                 .dout = q.dqkv,
	                                 .inp = q.ln1,
	                                 .weight = q.p[2],
	                                 .B = B,
	                                 .T = T,
	                                 .C = C,
	                                 .OC = 3 * C};
	KN_RUN(r, matmul_backward, qkv);
	struct kn_layernorm_bwd_args ln1 = {.dtype = cfg->dtype,
	                                    .dinp = io->din,
	                                    .dweight = q.g[0],
	                                    .dbias = q.g[1],
	                                    .dout = q.dln1,
	                                    .inp = x,
	                                    .weight = q.p[0],
	                                    .mean = q.ln1_mean,
	                                    .rstd = q.ln1_rstd,
	                                    .B = B,
	                                    .T = T,
	                                    .C = C};
	KN_RUN(r, layernorm_backward, ln1);
	return 0;
}

struct kn_head_ptrs {
	void *lnf, *probs, *logits, *dlogits, *dlnf;
	float *mean, *rstd;
};

static void kn_head_layout(const struct kn_model_config *cfg, int B, int T,
                           const struct kn_layer_mem *mem, struct kn_head_ptrs *h)
{
	size_t e = kn_dtype_size(cfg->dtype), bt = (size_t)B * T, btc = bt * cfg->C,
	       btv = bt * cfg->V;
	char *s = mem->stash, *w = mem->work;
	if (cfg->dtype == KN_BF16) { /* fp32 first, so every range stays aligned */
		h->mean = kn_take(&s, 4 * bt);
		h->rstd = kn_take(&s, 4 * bt);
	}
	h->lnf = kn_take(&s, e * btc);
	h->probs = kn_take(&s, e * btv);
	if (cfg->dtype != KN_BF16) {
		h->mean = kn_take(&s, 4 * bt);
		h->rstd = kn_take(&s, 4 * bt);
	}
	h->logits = w;
	h->dlogits = w;
	h->dlnf = w + e * btv;
}

int kn_layer_forward_run(const struct kn_runner *r, const struct kn_model_config *cfg,
                         enum kn_layer_kind kind, int B, int T, const struct kn_layer_mem *mem,
                         const struct kn_layer_io *io)
{
	SP_CHECK(kn_layer_validate("forward", cfg, kind, B, T, mem, io, 0));
	if (kind == KN_LAYER_BLOCK && cfg->tp_shards > 1)
		return sp_error(-EINVAL,
		                "kn_layer_forward: a block shard of %d runs its segments "
		                "(kn_block_tp_forward)",
		                cfg->tp_shards);
	int C = cfg->C;
	const void *params = mem->params;
	if (kind == KN_LAYER_EMBEDDING) {
		struct kn_encoder_fwd_args en = {.dtype = cfg->dtype,
		                                 .out = io->out,
		                                 .inp = io->in,
		                                 .wte = params,
		                                 .wpe =
		                                     kn_at(params, (size_t)cfg->V * C, cfg->dtype),
		                                 .B = B,
		                                 .T = T,
		                                 .C = C,
		                                 .V = cfg->V,
		                                 .maxT = cfg->maxT};
		KN_RUN(r, encoder_forward, en);
		return 0;
	}
	if (kind == KN_LAYER_BLOCK && cfg->tp_form) {
		for (int seg = 0; seg < KN_TP_SEGS; seg++) /* one member: no exchange */
			SP_CHECK(kn_block_tp_forward_run(r, cfg, 1, 0, seg, B, T, mem, io));
		return 0;
	}
	if (kind == KN_LAYER_BLOCK)
		return kn_block_forward(r, cfg, B, T, mem, io);
	struct kn_head_ptrs h;
	kn_head_layout(cfg, B, T, mem, &h);
	struct kn_layernorm_fwd_args ln = {.dtype = cfg->dtype,
	                                   .out = h.lnf,
	                                   .mean = h.mean,
	                                   .rstd = h.rstd,
	                                   .inp = io->in,
	                                   .weight = params,
	                                   .bias = kn_at(params, C, cfg->dtype),
	                                   .B = B,
	                                   .T = T,
	                                   .C = C};
	KN_RUN(r, layernorm_forward, ln);
	struct kn_matmul_fwd_args mm = {.dtype = cfg->dtype,
	                                .out = h.logits,
	                                .inp = h.lnf,
	                                .weight = mem->tied,
	                                .B = B,
	                                .T = T,
	                                .C = C,
	                                .OC = cfg->V};
	KN_RUN(r, matmul_forward, mm);
	struct kn_crossentropy_fwd_args ce = {.dtype = cfg->dtype,
	                                      .losses = io->out,
	                                      .probs = h.probs,
	                                      .logits = h.logits,
	                                      .targets = io->targets,
	                                      .B = B,
	                                      .T = T,
	                                      .V = cfg->V};
	KN_RUN(r, crossentropy_forward, ce);
	return 0;
}

int kn_layer_backward_run(const struct kn_runner *r, const struct kn_model_config *cfg,
                          enum kn_layer_kind kind, int B, int T, const struct kn_layer_mem *mem,
                          const struct kn_layer_io *io)
{
	SP_CHECK(kn_layer_validate("backward", cfg, kind, B, T, mem, io, 1));
	if (kind == KN_LAYER_BLOCK && cfg->tp_shards > 1)
		return sp_error(-EINVAL,
		                "kn_layer_backward: a block shard of %d runs its segments "
		                "(kn_block_tp_backward)",
		                cfg->tp_shards);
	int C = cfg->C;
	const void *params = mem->params;
	void *grads = mem->grads;
	if (kind == KN_LAYER_EMBEDDING) {
		struct kn_encoder_bwd_args en = {.dtype = cfg->dtype,
		                                 .dwte = grads,
		                                 .dwpe =
		                                     kn_at(grads, (size_t)cfg->V * C, cfg->dtype),
		                                 .dout = io->dout,
		                                 .inp = io->in,
		                                 .B = B,
		                                 .T = T,
		                                 .C = C,
		                                 .V = cfg->V,
		                                 .maxT = cfg->maxT};
		KN_RUN(r, encoder_backward, en);
		return 0;
	}
	if (kind == KN_LAYER_BLOCK && cfg->tp_form) {
		for (int seg = 0; seg < KN_TP_SEGS; seg++)
			SP_CHECK(kn_block_tp_backward_run(r, cfg, 1, 0, seg, B, T, mem, io));
		return 0;
	}
	if (kind == KN_LAYER_BLOCK)
		return kn_block_backward(r, cfg, B, T, mem, io);
	struct kn_head_ptrs h;
	kn_head_layout(cfg, B, T, mem, &h);
	long btv = (long)B * T * cfg->V, btc = (long)B * T * C;
	SP_CHECK(kn_zero(r, cfg->dtype, h.dlogits, btv + btc)); /* dlogits and dlnf */
	struct kn_crossentropy_bwd_args ce = {.dtype = cfg->dtype,
	                                      .dlogits = h.dlogits,
	                                      .probs = h.probs,
	                                      .targets = io->targets,
	                                      .dloss = io->dloss,
	                                      .B = B,
	                                      .T = T,
	                                      .V = cfg->V};
	KN_RUN(r, crossentropy_backward, ce);
	struct kn_matmul_bwd_args mm = {.dtype = cfg->dtype,
	                                .dinp = h.dlnf,
	                                .dweight = mem->tied_grad,
	                                .dout = h.dlogits,
	                                .inp = h.lnf,
	                                .weight = mem->tied,
	                                .B = B,
	                                .T = T,
	                                .C = C,
	                                .OC = cfg->V};
	KN_RUN(r, matmul_backward, mm);
	struct kn_layernorm_bwd_args ln = {.dtype = cfg->dtype,
	                                   .dinp = io->din,
	                                   .dweight = grads,
	                                   .dbias = kn_at(grads, C, cfg->dtype),
	                                   .dout = h.dlnf,
	                                   .inp = io->in,
	                                   .weight = params,
	                                   .mean = h.mean,
	                                   .rstd = h.rstd,
	                                   .B = B,
	                                   .T = T,
	                                   .C = C};
	KN_RUN(r, layernorm_backward, ln);
	return 0;
}

/* The layer's tensors as (offset, count, decay) triples; returns the count. */
static int kn_layer_tensors(const struct kn_model_config *cfg, enum kn_layer_kind kind,
                            size_t off[KN_BLOCK_NPARAMS], size_t n[KN_BLOCK_NPARAMS],
                            int decay[KN_BLOCK_NPARAMS])
{
	size_t C = cfg->C;
	if (kind == KN_LAYER_EMBEDDING) {
		off[0] = 0, n[0] = (size_t)cfg->V * C, decay[0] = 1;
		off[1] = n[0], n[1] = (size_t)cfg->maxT * C, decay[1] = 1;
		return 2;
	}
	if (kind == KN_LAYER_HEAD) {
		off[0] = 0, n[0] = C, decay[0] = 0;
		off[1] = C, n[1] = C, decay[1] = 0;
		return 2;
	}
	kn_block_shard_param_sizes(cfg->C, cfg->tp_shards > 1 ? cfg->tp_shards : 1, n);
	size_t o = 0;
	for (int i = 0; i < KN_BLOCK_NPARAMS; i++) {
		off[i] = o;
		o += n[i];
		decay[i] = i == 2 || i == 4 || i == 8 || i == 10; /* qkvw, attprojw, fcw, fcprojw */
	}
	return KN_BLOCK_NPARAMS;
}

int kn_layer_update_run(const struct kn_runner *r, const struct kn_model_config *cfg,
                        enum kn_layer_kind kind, const struct kn_layer_mem *mem,
                        const struct kn_optim_hparams *h)
{
	if (!h)
		return sp_error(-EINVAL, "kn_layer update: hparams is NULL");
	if (h->kind != KN_ADAMW && h->kind != KN_SGD)
		return sp_error(-EINVAL, "kn_layer update: unknown optimizer %d", (int)h->kind);
	if (cfg && cfg->dtype == KN_BF16)
		return sp_error(-ENOTSUP, "kn_layer update: bf16 parameters are not supported "
		                          "(the optimizers update fp32 masters)");
	struct kn_layer_desc d;
	SP_CHECK(kn_layer_describe(cfg, kind, 1, 1, &d));
	size_t np = d.param_bytes / kn_dtype_size(cfg->dtype), off[KN_BLOCK_NPARAMS],
	       n[KN_BLOCK_NPARAMS];
	int stateful = kn_optim_state_bytes(h->kind, h->momentum, np) > 0;
	/* dir 2 needs the state, dir 3 the parameters and gradients only */
	SP_CHECK(kn_layer_validate("update", cfg, kind, 1, 1, mem, NULL, stateful ? 2 : 3));
	int decay[KN_BLOCK_NPARAMS];
	int nt = kn_layer_tensors(cfg, kind, off, n, decay);
	if (h->kind == KN_SGD) {
		struct kn_sgd_args a[KN_BLOCK_NPARAMS];
		for (int i = 0; i < nt; i++) { /* check all before running any */
			a[i] =
			    (struct kn_sgd_args){.params = (float *)mem->params + off[i],
			                         .grads = (float *)mem->grads + off[i],
			                         .buf = stateful ? mem->optim + off[i] : NULL,
			                         .N = (long)n[i],
			                         .lr = h->lr,
			                         .momentum = h->momentum,
			                         .weight_decay = decay[i] ? h->weight_decay : 0.0f,
			                         .clip = h->clip};
			SP_CHECK(kn_sgd_check(&a[i]));
		}
		for (int i = 0; i < nt; i++)
			KN_RUN(r, sgd, a[i]);
		return 0;
	}
	struct kn_adamw_args a[KN_BLOCK_NPARAMS];
	for (int i = 0; i < nt; i++) { /* check all before running any */
		a[i] = (struct kn_adamw_args){.params = (float *)mem->params + off[i],
		                              .grads = (float *)mem->grads + off[i],
		                              .m = mem->optim + off[i],
		                              .v = mem->optim + np + off[i],
		                              .N = (long)n[i],
		                              .lr = h->lr,
		                              .beta1 = h->beta1,
		                              .beta2 = h->beta2,
		                              .eps = h->eps,
		                              .weight_decay = decay[i] ? h->weight_decay : 0.0f,
		                              .t = h->t,
		                              .clip = h->clip};
		SP_CHECK(kn_adamw_check(&a[i]));
	}
	for (int i = 0; i < nt; i++)
		KN_RUN(r, adamw, a[i]);
	return 0;
}

int kn_layer_update_mixed_run(const struct kn_runner *r, const struct kn_model_config *cfg,
                              enum kn_layer_kind kind, const struct kn_layer_mem *mem,
                              const struct kn_optim_hparams *h)
{
	if (!h || !cfg)
		return sp_error(-EINVAL, "kn_layer update (mixed): hparams or config is NULL");
	if (h->kind != KN_ADAMW && h->kind != KN_SGD)
		return sp_error(-EINVAL, "kn_layer update (mixed): unknown optimizer %d",
		                (int)h->kind);
	if (cfg->dtype != KN_BF16)
		return sp_error(-EINVAL, "kn_layer update (mixed): the layer is not bf16");
	if (!mem || !mem->params || !mem->grads || !mem->optim)
		return sp_error(-EINVAL, "kn_layer update (mixed): params, grads and optim "
		                         "(the fp32 masters) are needed");
	struct kn_layer_desc d;
	SP_CHECK(kn_layer_describe(cfg, kind, 1, 1, &d));
	size_t np = d.param_bytes / kn_dtype_size(cfg->dtype), off[KN_BLOCK_NPARAMS],
	       n[KN_BLOCK_NPARAMS];
	int stateful = kn_optim_state_bytes(h->kind, h->momentum, np) > 0;
	float *master = mem->optim, *state = mem->optim + np;
	uint16_t *w = mem->params;
	const uint16_t *g = mem->grads;
	int decay[KN_BLOCK_NPARAMS];
	int nt = kn_layer_tensors(cfg, kind, off, n, decay);
	if (h->kind == KN_SGD) {
		struct kn_sgd_mixed_args a[KN_BLOCK_NPARAMS];
		for (int i = 0; i < nt; i++) { /* check all before running any */
			a[i] = (struct kn_sgd_mixed_args){.master = master + off[i],
			                                  .params = w + off[i],
			                                  .grads = g + off[i],
			                                  .buf = stateful ? state + off[i] : NULL,
			                                  .N = (long)n[i],
			                                  .lr = h->lr,
			                                  .momentum = h->momentum,
			                                  .weight_decay =
			                                      decay[i] ? h->weight_decay : 0.0f,
			                                  .clip = h->clip};
			SP_CHECK(kn_sgd_mixed_check(&a[i]));
		}
		for (int i = 0; i < nt; i++)
			KN_RUN(r, sgd_mixed, a[i]);
		return 0;
	}
	struct kn_adamw_mixed_args a[KN_BLOCK_NPARAMS];
	for (int i = 0; i < nt; i++) { /* check all before running any */
		a[i] =
		    (struct kn_adamw_mixed_args){.master = master + off[i],
		                                 .params = w + off[i],
		                                 .grads = g + off[i],
		                                 .m = state + off[i],
		                                 .v = state + np + off[i],
		                                 .N = (long)n[i],
		                                 .lr = h->lr,
		                                 .beta1 = h->beta1,
		                                 .beta2 = h->beta2,
		                                 .eps = h->eps,
		                                 .weight_decay = decay[i] ? h->weight_decay : 0.0f,
		                                 .t = h->t,
		                                 .clip = h->clip};
		SP_CHECK(kn_adamw_mixed_check(&a[i]));
	}
	for (int i = 0; i < nt; i++)
		KN_RUN(r, adamw_mixed, a[i]);
	return 0;
}

int kn_layer_zero_grad_run(const struct kn_runner *r, const struct kn_model_config *cfg,
                           enum kn_layer_kind kind, const struct kn_layer_mem *mem)
{
	SP_CHECK(kn_layer_validate("zero_grad", cfg, kind, 1, 1, mem, NULL, 3));
	struct kn_layer_desc d;
	SP_CHECK(kn_layer_describe(cfg, kind, 1, 1, &d));
	return kn_zero(r, cfg->dtype, mem->grads, (long)(d.grad_bytes / kn_dtype_size(cfg->dtype)));
}

/* ---- direct CPU runner ---- */
static int kn_cpu_runner(void *ctx, const struct dev_kernel *k, const void *args, size_t size,
                         struct dev_cost cost)
{
	(void)ctx, (void)size, (void)cost;
	k->cpu(args);
	return 0;
}

static const struct kn_runner kn_cpu = {kn_cpu_runner, NULL};

int kn_layer_forward_cpu(const struct kn_model_config *cfg, enum kn_layer_kind kind, int B, int T,
                         const struct kn_layer_mem *mem, const struct kn_layer_io *io)
{
	return kn_layer_forward_run(&kn_cpu, cfg, kind, B, T, mem, io);
}

int kn_layer_backward_cpu(const struct kn_model_config *cfg, enum kn_layer_kind kind, int B, int T,
                          const struct kn_layer_mem *mem, const struct kn_layer_io *io)
{
	return kn_layer_backward_run(&kn_cpu, cfg, kind, B, T, mem, io);
}

int kn_block_tp_forward_cpu(const struct kn_model_config *cfg, int t, int r, int seg, int B, int T,
                            const struct kn_layer_mem *mem, const struct kn_layer_io *io)
{
	return kn_block_tp_forward_run(&kn_cpu, cfg, t, r, seg, B, T, mem, io);
}

int kn_block_tp_backward_cpu(const struct kn_model_config *cfg, int t, int r, int seg, int B, int T,
                             const struct kn_layer_mem *mem, const struct kn_layer_io *io)
{
	return kn_block_tp_backward_run(&kn_cpu, cfg, t, r, seg, B, T, mem, io);
}

int kn_layer_update_cpu(const struct kn_model_config *cfg, enum kn_layer_kind kind,
                        const struct kn_layer_mem *mem, const struct kn_optim_hparams *h)
{
	return kn_layer_update_run(&kn_cpu, cfg, kind, mem, h);
}

int kn_layer_update_mixed_cpu(const struct kn_model_config *cfg, enum kn_layer_kind kind,
                              const struct kn_layer_mem *mem, const struct kn_optim_hparams *h)
{
	return kn_layer_update_mixed_run(&kn_cpu, cfg, kind, mem, h);
}

int kn_layer_zero_grad_cpu(const struct kn_model_config *cfg, enum kn_layer_kind kind,
                           const struct kn_layer_mem *mem)
{
	return kn_layer_zero_grad_run(&kn_cpu, cfg, kind, mem);
}

/* ---- direct CUDA runner (no device layer): kernels on a cudaStream_t ---- */
static int kn_cuda_runner(void *ctx, const struct dev_kernel *k, const void *args, size_t size,
                          struct dev_cost cost)
{
	(void)size, (void)cost;
#if SPILL_HAVE_CUDA
	if (!ctx)
		return sp_error(-EINVAL, "%s: refusing the default CUDA stream", k->name);
	k->cuda(args, ctx);
	return kn_cuda_last_error();
#else
	(void)ctx, (void)args;
	return sp_error(-ENODEV, "%s: built without CUDA", k->name);
#endif
}

int kn_layer_forward_cuda(void *stream, const struct kn_model_config *cfg, enum kn_layer_kind kind,
                          int B, int T, const struct kn_layer_mem *mem,
                          const struct kn_layer_io *io)
{
	struct kn_runner r = {kn_cuda_runner, stream};
	return kn_layer_forward_run(&r, cfg, kind, B, T, mem, io);
}

int kn_layer_backward_cuda(void *stream, const struct kn_model_config *cfg, enum kn_layer_kind kind,
                           int B, int T, const struct kn_layer_mem *mem,
                           const struct kn_layer_io *io)
{
	struct kn_runner r = {kn_cuda_runner, stream};
	return kn_layer_backward_run(&r, cfg, kind, B, T, mem, io);
}

int kn_layer_update_cuda(void *stream, const struct kn_model_config *cfg, enum kn_layer_kind kind,
                         const struct kn_layer_mem *mem, const struct kn_optim_hparams *h)
{
	struct kn_runner r = {kn_cuda_runner, stream};
	return kn_layer_update_run(&r, cfg, kind, mem, h);
}

int kn_layer_zero_grad_cuda(void *stream, const struct kn_model_config *cfg,
                            enum kn_layer_kind kind, const struct kn_layer_mem *mem)
{
	struct kn_runner r = {kn_cuda_runner, stream};
	return kn_layer_zero_grad_run(&r, cfg, kind, mem);
}
