/* kernels/ops.c — per-operation shape checks, cost functions and the
 * struct dev_kernel tables that tie each op's CPU and CUDA implementations.
 *
 * A check reads only the args struct (never the tensors) and returns 0 or
 * -EINVAL (bad dims, NH not dividing C, T beyond the position table, NULL
 * tensor) / -ENOTSUP (bf16 for the optimizers, which stay fp32; bf16 attention
 * with a head size over 128) with a message naming the op, the field and its value. Costs count FLOPs and device-memory bytes moved.
 */
#include "kernels/internal.h"

#include <limits.h>

#define KN_MAX_ROWS INT_MAX

static int kn_check_dtype(const char *op, enum kn_dtype dtype)
{
	if (dtype == KN_F32 || dtype == KN_BF16)
		return 0;
	return sp_error(-EINVAL, "kn_%s: unknown dtype %d", op, (int)dtype);
}

/* The optimizers update fp32 parameters only (bf16 training keeps fp32 masters). */
static int kn_check_dtype_f32(const char *op, enum kn_dtype dtype)
{
	SP_CHECK(kn_check_dtype(op, dtype));
	if (dtype == KN_BF16)
		return sp_error(-ENOTSUP, "kn_%s: dtype bf16 is not supported (fp32 only)", op);
	return 0;
}

#define KN_POS(op, a, f)                                                                \
	do {                                                                            \
		if ((a)->f <= 0)                                                        \
			return sp_error(-EINVAL, "kn_%s: %s = %ld must be > 0", op, #f, \
			                (long)(a)->f);                                  \
	} while (0)
#define KN_PTR(op, a, f)                                                              \
	do {                                                                          \
		if (!(a)->f)                                                          \
			return sp_error(-EINVAL, "kn_%s: tensor %s is NULL", op, #f); \
	} while (0)
#define KN_ROWS(op, a)                                                              \
	do {                                                                        \
		if ((long)(a)->B * (a)->T > KN_MAX_ROWS)                            \
			return sp_error(-EINVAL, "kn_%s: B*T = %ld exceeds %d", op, \
			                (long)(a)->B * (a)->T, KN_MAX_ROWS);        \
	} while (0)

static int kn_check_btc(const char *op, int B, int T, int C)
{
	if (B <= 0 || T <= 0 || C <= 0)
		return sp_error(-EINVAL, "kn_%s: dims must be > 0, got B = %d, T = %d, C = %d", op,
		                B, T, C);
	if ((long)B * T > KN_MAX_ROWS || (long)T * C > KN_MAX_ROWS)
		return sp_error(-EINVAL, "kn_%s: B*T = %ld or T*C = %ld exceeds %d", op,
		                (long)B * T, (long)T * C, KN_MAX_ROWS);
	return 0;
}

static double fsz(enum kn_dtype d)
{
	return (double)kn_dtype_size(d);
}

/* ---- encoder ---- */
static int kn_check_encoder(const char *op, enum kn_dtype dt, int B, int T, int C, int V, int maxT)
{
	SP_CHECK(kn_check_dtype(op, dt));
	SP_CHECK(kn_check_btc(op, B, T, C));
	if (V <= 0 || maxT <= 0)
		return sp_error(-EINVAL, "kn_%s: V = %d and maxT = %d must be > 0", op, V, maxT);
	if (T > maxT)
		return sp_error(-EINVAL,
		                "kn_%s: T = %d exceeds the position table (maxT = %d) by %d", op, T,
		                maxT, T - maxT);
	return 0;
}

int kn_encoder_forward_check(const struct kn_encoder_fwd_args *a)
{
	const char *op = "encoder_forward";
	SP_CHECK(kn_check_encoder(op, a->dtype, a->B, a->T, a->C, a->V, a->maxT));
	KN_PTR(op, a, out);
	KN_PTR(op, a, inp);
	KN_PTR(op, a, wte);
	KN_PTR(op, a, wpe);
	return 0;
}

struct dev_cost kn_encoder_forward_cost(const struct kn_encoder_fwd_args *a)
{
	double n = (double)a->B * a->T * a->C;
	return (struct dev_cost){n, 3 * n * fsz(a->dtype) + 4.0 * a->B * a->T, 0};
}

int kn_encoder_backward_check(const struct kn_encoder_bwd_args *a)
{
	const char *op = "encoder_backward";
	SP_CHECK(kn_check_encoder(op, a->dtype, a->B, a->T, a->C, a->V, a->maxT));
	KN_PTR(op, a, dwte);
	KN_PTR(op, a, dwpe);
	KN_PTR(op, a, dout);
	KN_PTR(op, a, inp);
	return 0;
}

struct dev_cost kn_encoder_backward_cost(const struct kn_encoder_bwd_args *a)
{
	double n = (double)a->B * a->T * a->C;
	return (struct dev_cost){2 * n, 5 * n * fsz(a->dtype) + 4.0 * a->B * a->T, 0};
}

/* ---- layernorm ---- */
int kn_layernorm_forward_check(const struct kn_layernorm_fwd_args *a)
{
	const char *op = "layernorm_forward";
	SP_CHECK(kn_check_dtype(op, a->dtype));
	SP_CHECK(kn_check_btc(op, a->B, a->T, a->C));
	KN_PTR(op, a, out);
	KN_PTR(op, a, mean);
	KN_PTR(op, a, rstd);
	KN_PTR(op, a, inp);
	KN_PTR(op, a, weight);
	KN_PTR(op, a, bias);
	return 0;
}

struct dev_cost kn_layernorm_forward_cost(const struct kn_layernorm_fwd_args *a)
{
	double n = (double)a->B * a->T * a->C;
	return (struct dev_cost){8 * n, 2 * n * fsz(a->dtype) + 8.0 * a->B * a->T, 0};
}

int kn_layernorm_backward_check(const struct kn_layernorm_bwd_args *a)
{
	const char *op = "layernorm_backward";
	SP_CHECK(kn_check_dtype(op, a->dtype));
	SP_CHECK(kn_check_btc(op, a->B, a->T, a->C));
	KN_PTR(op, a, dinp);
	KN_PTR(op, a, dweight);
	KN_PTR(op, a, dbias);
	KN_PTR(op, a, dout);
	KN_PTR(op, a, inp);
	KN_PTR(op, a, weight);
	KN_PTR(op, a, mean);
	KN_PTR(op, a, rstd);
	return 0;
}

struct dev_cost kn_layernorm_backward_cost(const struct kn_layernorm_bwd_args *a)
{
	double n = (double)a->B * a->T * a->C;
	return (struct dev_cost){16 * n, 4 * n * fsz(a->dtype) + 8.0 * a->B * a->T, 0};
}

/* ---- matmul ---- */
static int kn_check_matmul(const char *op, enum kn_dtype dt, int B, int T, int C, int OC)
{
	SP_CHECK(kn_check_dtype(op, dt));
	SP_CHECK(kn_check_btc(op, B, T, C));
	if (OC <= 0)
		return sp_error(-EINVAL, "kn_%s: OC = %d must be > 0", op, OC);
	if ((long)T * OC > KN_MAX_ROWS)
		return sp_error(-EINVAL, "kn_%s: T*OC = %ld exceeds %d", op, (long)T * OC,
		                KN_MAX_ROWS);
	return 0;
}

int kn_matmul_forward_check(const struct kn_matmul_fwd_args *a)
{
	const char *op = "matmul_forward";
	SP_CHECK(kn_check_matmul(op, a->dtype, a->B, a->T, a->C, a->OC));
	KN_PTR(op, a, out);
	KN_PTR(op, a, inp);
	KN_PTR(op, a, weight);
	return 0;
}

struct dev_cost kn_matmul_forward_cost(const struct kn_matmul_fwd_args *a)
{
	double bt = (double)a->B * a->T;
	return (struct dev_cost){2 * bt * a->C * a->OC,
	                         (bt * a->C + (double)a->OC * a->C + bt * a->OC + a->OC) *
	                             fsz(a->dtype),
	                         a->dtype == KN_BF16};
}

int kn_matmul_backward_check(const struct kn_matmul_bwd_args *a)
{
	const char *op = "matmul_backward";
	SP_CHECK(kn_check_matmul(op, a->dtype, a->B, a->T, a->C, a->OC));
	KN_PTR(op, a, dout);
	if (a->dinp)
		KN_PTR(op, a, weight);
	if (a->dweight)
		KN_PTR(op, a, inp);
	return 0;
}

struct dev_cost kn_matmul_backward_cost(const struct kn_matmul_bwd_args *a)
{
	double bt = (double)a->B * a->T, c = a->C, oc = a->OC, f = 0, by = bt * oc;
	if (a->dinp) {
		f += 2 * bt * c * oc;
		by += oc * c + 2 * bt * c;
	}
	if (a->dweight) {
		f += 2 * bt * c * oc;
		by += bt * c + 2 * oc * c;
	}
	if (a->dbias) {
		f += bt * oc;
		by += 2 * oc;
	}
	return (struct dev_cost){f, by * fsz(a->dtype), a->dtype == KN_BF16};
}

/* ---- attention ---- */
static int kn_check_attention(const char *op, enum kn_dtype dt, int B, int T, int C, int NH)
{
	SP_CHECK(kn_check_dtype(op, dt));
	SP_CHECK(kn_check_btc(op, B, T, C));
	if (3L * T * C > KN_MAX_ROWS)
		return sp_error(-EINVAL, "kn_%s: T*3C = %ld exceeds %d", op, 3L * T * C,
		                KN_MAX_ROWS);
	if (NH <= 0)
		return sp_error(-EINVAL, "kn_%s: NH = %d must be > 0", op, NH);
	if (C % NH != 0)
		return sp_error(-EINVAL, "kn_%s: NH = %d does not divide C = %d (remainder %d)", op,
		                NH, C, C % NH);
	if (dt == KN_F32 && (long)T * T > KN_MAX_ROWS)
		return sp_error(-EINVAL, "kn_%s: T*T = %ld exceeds %d", op, (long)T * T,
		                KN_MAX_ROWS);
	if (dt == KN_BF16 && C / NH > 128)
		return sp_error(-ENOTSUP, "kn_%s: bf16 head size C/NH = %d exceeds 128", op,
		                C / NH);
	return 0;
}

/* FLOPs of the attention GEMMs: fp32 computes the full T x T, the bf16 flash
 * kernels only the causal half. */
static double kn_attention_gemm_flops(const struct kn_attention_fwd_args *a)
{
	double f = 4.0 * a->B * a->T * a->C * a->T;
	return a->dtype == KN_BF16 ? f / 2 : f;
}

int kn_attention_forward_check(const struct kn_attention_fwd_args *a)
{
	const char *op = "attention_forward";
	SP_CHECK(kn_check_attention(op, a->dtype, a->B, a->T, a->C, a->NH));
	KN_PTR(op, a, out);
	KN_PTR(op, a, att);
	KN_PTR(op, a, ws);
	KN_PTR(op, a, inp);
	return 0;
}

struct dev_cost kn_attention_forward_cost(const struct kn_attention_fwd_args *a)
{
	double btc = (double)a->B * a->T * a->C, att = (double)a->B * a->NH * a->T * a->T;
	if (a->dtype == KN_BF16) /* reads qkv, writes out and the logsumexp */
		return (struct dev_cost){kn_attention_gemm_flops(a) + 2.5 * att,
		                         4 * btc * 2 + 4.0 * a->B * a->NH * a->T, 1};
	return (struct dev_cost){4 * btc * a->T + 5 * att,
	                         (3 * btc + btc + 2 * att + 8 * btc) * fsz(a->dtype), 0};
}

int kn_attention_backward_check(const struct kn_attention_bwd_args *a)
{
	const char *op = "attention_backward";
	SP_CHECK(kn_check_attention(op, a->dtype, a->B, a->T, a->C, a->NH));
	KN_PTR(op, a, dinp);
	KN_PTR(op, a, ws);
	KN_PTR(op, a, dout);
	KN_PTR(op, a, inp);
	KN_PTR(op, a, att);
	if (a->dtype == KN_BF16)
		KN_PTR(op, a, out);
	return 0;
}

struct dev_cost kn_attention_backward_cost(const struct kn_attention_bwd_args *a)
{
	double btc = (double)a->B * a->T * a->C, att = (double)a->B * a->NH * a->T * a->T;
	if (a->dtype == KN_BF16) { /* recompute P twice: 7 causal-half GEMMs */
		struct kn_attention_fwd_args f = {
		    .dtype = a->dtype, .B = a->B, .T = a->T, .C = a->C, .NH = a->NH};
		return (struct dev_cost){
		    kn_attention_gemm_flops(&f) * 3.5 + 4 * att,
		    (3 * btc + 2 * btc + 6 * btc) * 2 + 8.0 * a->B * a->NH * a->T, 1};
	}
	return (struct dev_cost){8 * btc * a->T + 4 * att,
	                         (3 * btc + btc + 6 * btc + 3 * att + 14 * btc) * fsz(a->dtype), 0};
}

/* ---- elementwise ---- */
#define KN_CHECK_N(op, a)                                 \
	do {                                              \
		SP_CHECK(kn_check_dtype(op, (a)->dtype)); \
		KN_POS(op, a, N);                         \
	} while (0)

int kn_gelu_forward_check(const struct kn_gelu_fwd_args *a)
{
	KN_CHECK_N("gelu_forward", a);
	KN_PTR("gelu_forward", a, out);
	KN_PTR("gelu_forward", a, inp);
	return 0;
}

struct dev_cost kn_gelu_forward_cost(const struct kn_gelu_fwd_args *a)
{
	return (struct dev_cost){8.0 * a->N, 2.0 * a->N * fsz(a->dtype), 0};
}

int kn_gelu_backward_check(const struct kn_gelu_bwd_args *a)
{
	KN_CHECK_N("gelu_backward", a);
	KN_PTR("gelu_backward", a, dinp);
	KN_PTR("gelu_backward", a, inp);
	KN_PTR("gelu_backward", a, dout);
	return 0;
}

struct dev_cost kn_gelu_backward_cost(const struct kn_gelu_bwd_args *a)
{
	return (struct dev_cost){16.0 * a->N, 4.0 * a->N * fsz(a->dtype), 0};
}

int kn_residual_forward_check(const struct kn_residual_fwd_args *a)
{
	KN_CHECK_N("residual_forward", a);
	KN_PTR("residual_forward", a, out);
	KN_PTR("residual_forward", a, a);
	KN_PTR("residual_forward", a, b);
	return 0;
}

struct dev_cost kn_residual_forward_cost(const struct kn_residual_fwd_args *a)
{
	return (struct dev_cost){1.0 * a->N, 3.0 * a->N * fsz(a->dtype), 0};
}

int kn_residual_backward_check(const struct kn_residual_bwd_args *a)
{
	KN_CHECK_N("residual_backward", a);
	KN_PTR("residual_backward", a, da);
	KN_PTR("residual_backward", a, db);
	KN_PTR("residual_backward", a, dout);
	return 0;
}

struct dev_cost kn_residual_backward_cost(const struct kn_residual_bwd_args *a)
{
	return (struct dev_cost){2.0 * a->N, 5.0 * a->N * fsz(a->dtype), 0};
}

/* ---- cross-entropy ---- */
static int kn_check_ce(const char *op, enum kn_dtype dt, int B, int T, int V)
{
	SP_CHECK(kn_check_dtype(op, dt));
	if (B <= 0 || T <= 0 || V <= 0)
		return sp_error(-EINVAL, "kn_%s: dims must be > 0, got B = %d, T = %d, V = %d", op,
		                B, T, V);
	if ((long)B * T > KN_MAX_ROWS)
		return sp_error(-EINVAL, "kn_%s: B*T = %ld exceeds %d", op, (long)B * T,
		                KN_MAX_ROWS);
	return 0;
}

int kn_crossentropy_forward_check(const struct kn_crossentropy_fwd_args *a)
{
	const char *op = "crossentropy_forward";
	SP_CHECK(kn_check_ce(op, a->dtype, a->B, a->T, a->V));
	KN_PTR(op, a, losses);
	KN_PTR(op, a, probs);
	KN_PTR(op, a, logits);
	KN_PTR(op, a, targets);
	return 0;
}

struct dev_cost kn_crossentropy_forward_cost(const struct kn_crossentropy_fwd_args *a)
{
	double n = (double)a->B * a->T * a->V;
	return (struct dev_cost){5 * n, 2 * n * fsz(a->dtype) + 8.0 * a->B * a->T, 0};
}

int kn_crossentropy_backward_check(const struct kn_crossentropy_bwd_args *a)
{
	const char *op = "crossentropy_backward";
	SP_CHECK(kn_check_ce(op, a->dtype, a->B, a->T, a->V));
	KN_PTR(op, a, dlogits);
	KN_PTR(op, a, probs);
	KN_PTR(op, a, targets);
	return 0;
}

struct dev_cost kn_crossentropy_backward_cost(const struct kn_crossentropy_bwd_args *a)
{
	double n = (double)a->B * a->T * a->V;
	return (struct dev_cost){3 * n, 3 * n * fsz(a->dtype) + 4.0 * a->B * a->T, 0};
}

/* ---- optimizer and gradient buffers ---- */
/* A clip the optimizers can use: none, or norms with a positive threshold. */
static int check_clip(const char *op, const struct kn_clip *c)
{
	if (c->norms && (c->nnorms <= 0 || !(c->clip > 0)))
		return sp_error(-EINVAL,
		                "kn_%s: clipping needs norms (%d) and a threshold > 0 (%g)", op,
		                c->nnorms, (double)c->clip);
	return 0;
}

/* The hyper-parameters AdamW (fp32 or mixed) accepts; op names it in the message. */
static int check_adamw_hparams(const char *op, float beta1, float beta2, float lr, float eps,
                               float weight_decay)
{
	if (!(beta1 >= 0 && beta1 < 1) || !(beta2 >= 0 && beta2 < 1))
		return sp_error(-EINVAL, "kn_%s: betas (%g, %g) must be in [0, 1)", op,
		                (double)beta1, (double)beta2);
	if (!(lr >= 0) || !(eps >= 0) || !(weight_decay >= 0))
		return sp_error(-EINVAL, "kn_%s: lr = %g, eps = %g, weight_decay = %g must be >= 0",
		                op, (double)lr, (double)eps, (double)weight_decay);
	return 0;
}

/* The same for SGD: buf is its momentum buffer (NULL: none). */
static int check_sgd_hparams(const char *op, float lr, float momentum, float weight_decay,
                             const void *buf)
{
	if (!(lr >= 0) || !(momentum >= 0 && momentum < 1) || !(weight_decay >= 0))
		return sp_error(-EINVAL,
		                "kn_%s: lr = %g and weight_decay = %g must be >= 0, momentum = %g "
		                "in [0, 1)",
		                op, (double)lr, (double)weight_decay, (double)momentum);
	if (momentum != 0 && !buf)
		return sp_error(-EINVAL, "kn_%s: momentum %g needs buf", op, (double)momentum);
	return 0;
}

int kn_adamw_check(const struct kn_adamw_args *a)
{
	const char *op = "adamw";
	SP_CHECK(kn_check_dtype_f32(op, a->dtype));
	KN_POS(op, a, N);
	KN_PTR(op, a, params);
	KN_PTR(op, a, grads);
	KN_PTR(op, a, m);
	KN_PTR(op, a, v);
	KN_POS(op, a, t);
	SP_CHECK(check_clip(op, &a->clip));
	return check_adamw_hparams(op, a->beta1, a->beta2, a->lr, a->eps, a->weight_decay);
}

struct dev_cost kn_adamw_cost(const struct kn_adamw_args *a)
{
	return (struct dev_cost){12.0 * a->N, a->N * (3 * fsz(a->dtype) + 16.0), 0};
}

int kn_sgd_check(const struct kn_sgd_args *a)
{
	const char *op = "sgd";
	SP_CHECK(kn_check_dtype_f32(op, a->dtype));
	KN_POS(op, a, N);
	KN_PTR(op, a, params);
	KN_PTR(op, a, grads);
	SP_CHECK(check_clip(op, &a->clip));
	return check_sgd_hparams(op, a->lr, a->momentum, a->weight_decay, a->buf);
}

struct dev_cost kn_sgd_cost(const struct kn_sgd_args *a)
{
	int mom = a->buf != NULL;
	return (struct dev_cost){(mom ? 5.0 : 3.0) * a->N,
	                         a->N * (3 * fsz(a->dtype) + (mom ? 8.0 : 0.0)), 0};
}

int kn_adamw_mixed_check(const struct kn_adamw_mixed_args *a)
{
	const char *op = "adamw_mixed";
	KN_POS(op, a, N);
	KN_PTR(op, a, master);
	KN_PTR(op, a, params);
	KN_PTR(op, a, grads);
	KN_PTR(op, a, m);
	KN_PTR(op, a, v);
	KN_POS(op, a, t);
	SP_CHECK(check_clip(op, &a->clip));
	return check_adamw_hparams(op, a->beta1, a->beta2, a->lr, a->eps, a->weight_decay);
}

/* master, m, v read and written (fp32), grads read and params written (bf16) */
struct dev_cost kn_adamw_mixed_cost(const struct kn_adamw_mixed_args *a)
{
	return (struct dev_cost){12.0 * a->N, a->N * (2 * 2.0 + 24.0), 0};
}

int kn_sgd_mixed_check(const struct kn_sgd_mixed_args *a)
{
	const char *op = "sgd_mixed";
	KN_POS(op, a, N);
	KN_PTR(op, a, master);
	KN_PTR(op, a, params);
	KN_PTR(op, a, grads);
	SP_CHECK(check_clip(op, &a->clip));
	return check_sgd_hparams(op, a->lr, a->momentum, a->weight_decay, a->buf);
}

struct dev_cost kn_sgd_mixed_cost(const struct kn_sgd_mixed_args *a)
{
	int mom = a->buf != NULL;
	return (struct dev_cost){(mom ? 5.0 : 3.0) * a->N,
	                         a->N * (2 * 2.0 + 8.0 + (mom ? 8.0 : 0.0)), 0};
}

int kn_grad_zero_check(const struct kn_grad_zero_args *a)
{
	KN_CHECK_N("grad_zero", a);
	KN_PTR("grad_zero", a, x);
	return 0;
}

struct dev_cost kn_grad_zero_cost(const struct kn_grad_zero_args *a)
{
	return (struct dev_cost){0, a->N * fsz(a->dtype), 0};
}

int kn_grad_accumulate_check(const struct kn_grad_accumulate_args *a)
{
	KN_CHECK_N("grad_accumulate", a);
	KN_PTR("grad_accumulate", a, dst);
	KN_PTR("grad_accumulate", a, src);
	return 0;
}

struct dev_cost kn_grad_accumulate_cost(const struct kn_grad_accumulate_args *a)
{
	return (struct dev_cost){1.0 * a->N, 3.0 * a->N * fsz(a->dtype), 0};
}

int kn_grad_scale_check(const struct kn_grad_scale_args *a)
{
	KN_CHECK_N("grad_scale", a);
	KN_PTR("grad_scale", a, x);
	return 0;
}

struct dev_cost kn_grad_scale_cost(const struct kn_grad_scale_args *a)
{
	return (struct dev_cost){1.0 * a->N, 2.0 * a->N * fsz(a->dtype), 0};
}

int kn_grad_sumsq_check(const struct kn_grad_sumsq_args *a)
{
	SP_CHECK(kn_check_dtype("grad_sumsq", a->dtype));
	if (a->N < 0)
		return sp_error(-EINVAL, "kn_grad_sumsq: N = %ld must be >= 0", a->N);
	if (a->N)
		KN_PTR("grad_sumsq", a, x);
	KN_PTR("grad_sumsq", a, parts);
	KN_PTR("grad_sumsq", a, out);
	return 0;
}

struct dev_cost kn_grad_sumsq_cost(const struct kn_grad_sumsq_args *a)
{
	return (struct dev_cost){2.0 * a->N, a->N * fsz(a->dtype), 0};
}

/* ---- strided products and sums ---- */
int kn_gemm_check(const struct kn_gemm_args *a)
{
	const char *op = "gemm";
	KN_POS(op, a, M);
	KN_POS(op, a, N);
	KN_POS(op, a, K);
	KN_PTR(op, a, a);
	KN_PTR(op, a, b);
	KN_PTR(op, a, c);
	int acols = a->trans_a ? a->M : a->K, bcols = a->trans_b ? a->K : a->N;
	if (a->lda < acols || a->ldb < bcols || a->ldc < a->N)
		return sp_error(-EINVAL,
		                "kn_gemm: row strides lda = %d, ldb = %d, ldc = %d below the "
		                "rows' %d, %d, %d elements",
		                a->lda, a->ldb, a->ldc, acols, bcols, a->N);
	if (a->beta != 0.0f && a->beta != 1.0f)
		return sp_error(-EINVAL, "kn_gemm: beta = %g must be 0 or 1", (double)a->beta);
	return 0;
}

struct dev_cost kn_gemm_cost(const struct kn_gemm_args *a)
{
	double m = a->M, n = a->N, k = a->K;
	return (struct dev_cost){2 * m * n * k, (m * k + k * n + (1 + (a->beta != 0)) * m * n) * 4,
	                         0};
}

int kn_colsum_check(const struct kn_colsum_args *a)
{
	const char *op = "colsum";
	KN_POS(op, a, M);
	KN_POS(op, a, N);
	KN_PTR(op, a, out);
	KN_PTR(op, a, in);
	if (a->ld < a->N)
		return sp_error(-EINVAL, "kn_colsum: ld = %d below N = %d", a->ld, a->N);
	return 0;
}

struct dev_cost kn_colsum_cost(const struct kn_colsum_args *a)
{
	double n = (double)a->M * a->N;
	return (struct dev_cost){n, (n + 2.0 * a->N) * 4, 0};
}

int kn_tree_sum_check(const struct kn_tree_sum_args *a)
{
	const char *op = "tree_sum";
	KN_POS(op, a, N);
	KN_PTR(op, a, out);
	KN_PTR(op, a, in);
	if (a->n != 1 && a->n != 2 && a->n != 4)
		return sp_error(-EINVAL, "kn_tree_sum: n = %d pieces (1, 2 or 4)", a->n);
	if (a->n > 1 && a->stride < a->N)
		return sp_error(-EINVAL, "kn_tree_sum: stride %ld below N = %ld", a->stride, a->N);
	if (a->bias && (a->OC <= 0 || a->N % a->OC))
		return sp_error(-EINVAL, "kn_tree_sum: bias of OC = %d does not tile N = %ld",
		                a->OC, a->N);
	return 0;
}

struct dev_cost kn_tree_sum_cost(const struct kn_tree_sum_args *a)
{
	double n = (double)a->N;
	return (struct dev_cost){n * a->n, n * (a->n + 1) * 4, 0};
}

/* ---- dev_kernel tables: {name, cpu entry, cuda entry (NULL without CUDA)} ---- */
#if SPILL_HAVE_CUDA
#define KN_CUDA_ENTRY_(name, args)                                       \
	static void kn_##name##_cuda_entry_(const void *a, void *stream) \
	{                                                                \
		kn_##name##_cuda(a, stream);                             \
	}
#define KN_CUDA_PTR_(name) kn_##name##_cuda_entry_
#else
#define KN_CUDA_ENTRY_(name, args)
#define KN_CUDA_PTR_(name) NULL
#endif

#define KN_KERNEL_TABLE_(name, args)                                                       \
	static void kn_##name##_cpu_entry_(const void *a)                                  \
	{                                                                                  \
		kn_##name##_cpu(a);                                                        \
	}                                                                                  \
	KN_CUDA_ENTRY_(name, args)                                                         \
	const struct dev_kernel kn_##name##_kernel = {"kn_" #name, kn_##name##_cpu_entry_, \
	                                              KN_CUDA_PTR_(name)};
KN_OPS(KN_KERNEL_TABLE_)
