/* kernels/cpu_bf16.c — the bf16 CPU kernels: the reference the CUDA bf16
 * kernels are checked against, layer by layer.
 *
 * bf16 in memory, fp32 (double for long sums) arithmetic, one round-to-nearest-
 * even per stored value (kn_f32_to_bf16). Accumulating outputs (+=) read the
 * bf16 value, add the fp32 contribution and round once. Reductions over rows
 * (dbias, dweight of layernorm, dwpe) sum in double and add once. Attention is
 * the flash formulation: forward keeps out and each row's logsumexp, backward
 * recomputes the probabilities from q, k and it. GEMMs widen their operands
 * into fp32 buffers (malloc; plain loops if that fails) and call kn_gemm_f32.
 */
#include "kernels/internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef uint16_t bf16; /* local shorthand for bf16 storage */

static inline float ld(const void *p, size_t i)
{
	return kn_bf16_to_f32(((const bf16 *)p)[i]);
}

static inline void st(void *p, size_t i, float v)
{
	((bf16 *)p)[i] = kn_f32_to_bf16(v);
}

static inline void add(void *p, size_t i, float v)
{
	((bf16 *)p)[i] = kn_f32_to_bf16(ld(p, i) + v);
}

/* A widened fp32 copy of n bf16 values (rows x cols at stride ld elements). */
static float *widen(const void *src, size_t rows, size_t cols, size_t stride)
{
	float *f = malloc(rows * cols * sizeof(float) + 1);
	if (!f)
		return NULL;
	for (size_t r = 0; r < rows; r++)
		for (size_t c = 0; c < cols; c++)
			f[r * cols + c] = ld(src, r * stride + c);
	return f;
}

/* ---- encoder ---- */
void kn_encoder_forward_cpu_bf16(const struct kn_encoder_fwd_args *a)
{
	int B = a->B, T = a->T, C = a->C;
	for (int b = 0; b < B; b++) {
		for (int t = 0; t < T; t++) {
			size_t o = ((size_t)b * T + t) * C;
			int ix = a->inp[b * T + t];
			int ok = ix >= 0 && ix < a->V;
			for (int i = 0; i < C; i++)
				st(a->out, o + i,
				   ok ? ld(a->wte, (size_t)ix * C + i) +
				            ld(a->wpe, (size_t)t * C + i)
				      : NAN);
		}
	}
}

void kn_encoder_backward_cpu_bf16(const struct kn_encoder_bwd_args *a)
{
	int B = a->B, T = a->T, C = a->C;
	/* dwte: one rounding per token, serial over (b,t) (the CUDA kernel's order) */
	for (int b = 0; b < B; b++) {
		for (int t = 0; t < T; t++) {
			size_t o = ((size_t)b * T + t) * C;
			int ix = a->inp[b * T + t];
			if (ix < 0 || ix >= a->V)
				continue;
			for (int i = 0; i < C; i++)
				add(a->dwte, (size_t)ix * C + i, ld(a->dout, o + i));
		}
	}
	/* dwpe[t] += sum over b, one rounding */
	for (int t = 0; t < T; t++) {
		for (int i = 0; i < C; i++) {
			float s = 0.0f;
			for (int b = 0; b < B; b++)
				s += ld(a->dout, ((size_t)b * T + t) * C + i);
			add(a->dwpe, (size_t)t * C + i, s);
		}
	}
}

/* ---- layernorm ---- */
void kn_layernorm_forward_cpu_bf16(const struct kn_layernorm_fwd_args *a)
{
	int C = a->C;
	size_t rows = (size_t)a->B * a->T;
	for (size_t r = 0; r < rows; r++) {
		size_t o = r * C;
		double m = 0.0, v = 0.0;
		for (int i = 0; i < C; i++)
			m += ld(a->inp, o + i);
		m /= C;
		for (int i = 0; i < C; i++) {
			double d = ld(a->inp, o + i) - m;
			v += d * d;
		}
		v /= C;
		float mean = (float)m, rstd = (float)(1.0 / sqrt(v + (double)KN_LN_EPS));
		for (int i = 0; i < C; i++)
			st(a->out, o + i,
			   (ld(a->inp, o + i) - mean) * rstd * ld(a->weight, i) + ld(a->bias, i));
		a->mean[r] = mean;
		a->rstd[r] = rstd;
	}
}

void kn_layernorm_backward_cpu_bf16(const struct kn_layernorm_bwd_args *a)
{
	int C = a->C;
	size_t rows = (size_t)a->B * a->T;
	for (size_t r = 0; r < rows; r++) {
		size_t o = r * C;
		float mean = a->mean[r], rstd = a->rstd[r];
		double dm = 0.0, dnm = 0.0;
		for (int i = 0; i < C; i++) {
			float norm = (ld(a->inp, o + i) - mean) * rstd;
			float dn = ld(a->weight, i) * ld(a->dout, o + i);
			dm += dn;
			dnm += (double)dn * norm;
		}
		float fdm = (float)(dm / C), fdnm = (float)(dnm / C);
		for (int i = 0; i < C; i++) {
			float norm = (ld(a->inp, o + i) - mean) * rstd;
			float dn = ld(a->weight, i) * ld(a->dout, o + i);
			add(a->dinp, o + i, (dn - fdm - norm * fdnm) * rstd);
		}
	}
	for (int i = 0; i < C; i++) { /* parameter gradients: sums over rows, one rounding */
		double sw = 0.0, sb = 0.0;
		for (size_t r = 0; r < rows; r++) {
			float dy = ld(a->dout, r * C + i);
			float norm = (ld(a->inp, r * C + i) - a->mean[r]) * a->rstd[r];
			sw += (double)dy * norm;
			sb += dy;
		}
		add(a->dweight, i, (float)sw);
		add(a->dbias, i, (float)sb);
	}
}

/* ---- matmul ---- */
/* C (M x N, bf16) = round(op(A) op(B) + beta * C) over bf16 A, B; fp32 GEMM. */
static void gemm_bf16(int ta, int tb, int M, int N, int K, const void *A, const void *Bm,
                      float beta, void *Cm, const void *bias)
{
	size_t ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
	float *fa = widen(A, ar, ac, ac), *fb = widen(Bm, br, bc, bc);
	float *fc = beta != 0.0f ? widen(Cm, M, N, N) : calloc((size_t)M * N + 1, sizeof(float));
	if (fa && fb && fc) {
		kn_gemm_f32(ta, tb, M, N, K, 1.0f, fa, (int)ac, fb, (int)bc, beta, fc, N);
		for (size_t i = 0; i < (size_t)M; i++)
			for (size_t j = 0; j < (size_t)N; j++)
				st(Cm, i * N + j, fc[i * N + j] + (bias ? ld(bias, j) : 0.0f));
	} else { /* out of memory: the same sums, slowly */
		for (size_t i = 0; i < (size_t)M; i++) {
			for (size_t j = 0; j < (size_t)N; j++) {
				float acc = 0.0f;
				for (size_t k = 0; k < (size_t)K; k++)
					acc += ld(A, ta ? k * ac + i : i * ac + k) *
					       ld(Bm, tb ? j * bc + k : k * bc + j);
				float c = beta != 0.0f ? beta * ld(Cm, i * N + j) : 0.0f;
				st(Cm, i * N + j, acc + c + (bias ? ld(bias, j) : 0.0f));
			}
		}
	}
	free(fa), free(fb), free(fc);
}

void kn_matmul_forward_cpu_bf16(const struct kn_matmul_fwd_args *a)
{
	gemm_bf16(0, 1, a->B * a->T, a->OC, a->C, a->inp, a->weight, 0.0f, a->out, a->bias);
}

void kn_matmul_backward_cpu_bf16(const struct kn_matmul_bwd_args *a)
{
	int BT = a->B * a->T, C = a->C, OC = a->OC;
	if (a->dinp)
		gemm_bf16(0, 0, BT, C, OC, a->dout, a->weight, 1.0f, a->dinp, NULL);
	if (a->dweight)
		gemm_bf16(1, 0, OC, C, BT, a->dout, a->inp, 1.0f, a->dweight, NULL);
	if (a->dbias) {
		for (int o = 0; o < OC; o++) {
			double s = 0.0;
			for (int r = 0; r < BT; r++)
				s += ld(a->dout, (size_t)r * OC + o);
			add(a->dbias, o, (float)s);
		}
	}
}

/* ---- attention (flash formulation) ---- */
void kn_attention_forward_cpu_bf16(const struct kn_attention_fwd_args *a)
{
	int B = a->B, T = a->T, C = a->C, NH = a->NH, hs = C / NH;
	float scale = 1.0f / sqrtf((float)hs);
	float *s = a->ws; /* T scores of one row */
	float *lse = a->att;
	for (int b = 0; b < B; b++) {
		for (int h = 0; h < NH; h++) {
			size_t qkv = (size_t)b * T * 3 * C + (size_t)h * hs;
			for (int t = 0; t < T; t++) {
				size_t qo = qkv + (size_t)t * 3 * C;
				float mx = -INFINITY;
				for (int t2 = 0; t2 <= t; t2++) {
					size_t ko = qkv + (size_t)t2 * 3 * C + C;
					float dot = 0.0f;
					for (int d = 0; d < hs; d++)
						dot += ld(a->inp, qo + d) * ld(a->inp, ko + d);
					s[t2] = dot * scale;
					mx = s[t2] > mx ? s[t2] : mx;
				}
				double l = 0.0;
				for (int t2 = 0; t2 <= t; t2++) {
					s[t2] = expf(s[t2] - mx);
					l += s[t2];
				}
				size_t oo = ((size_t)b * T + t) * C + (size_t)h * hs;
				for (int d = 0; d < hs; d++) {
					float acc = 0.0f;
					for (int t2 = 0; t2 <= t; t2++)
						acc += s[t2] * ld(a->inp, qkv + (size_t)t2 * 3 * C +
						                              2 * C + d);
					st(a->out, oo + d, acc / (float)l);
				}
				lse[((size_t)b * NH + h) * T + t] = mx + (float)log(l);
			}
		}
	}
}

void kn_attention_backward_cpu_bf16(const struct kn_attention_bwd_args *a)
{
	int B = a->B, T = a->T, C = a->C, NH = a->NH, hs = C / NH;
	float scale = 1.0f / sqrtf((float)hs);
	const float *lse = a->att;
	/* ws: dq, dk, dv of one head in fp32 (T x hs each), then p and dp rows */
	float *dq = a->ws, *dk = dq + (size_t)T * hs, *dv = dk + (size_t)T * hs;
	float *p = dv + (size_t)T * hs, *dp = p + T;
	for (int b = 0; b < B; b++) {
		for (int h = 0; h < NH; h++) {
			size_t qkv = (size_t)b * T * 3 * C + (size_t)h * hs;
			memset(dq, 0, 3 * (size_t)T * hs * sizeof(float));
			for (int t = 0; t < T; t++) {
				size_t qo = qkv + (size_t)t * 3 * C;
				size_t oo = ((size_t)b * T + t) * C + (size_t)h * hs;
				float L = lse[((size_t)b * NH + h) * T + t];
				float D = 0.0f; /* rowsum(dout * out) = sum_t2 p dp */
				for (int d = 0; d < hs; d++)
					D += ld(a->dout, oo + d) * ld(a->out, oo + d);
				for (int t2 = 0; t2 <= t; t2++) {
					size_t ko = qkv + (size_t)t2 * 3 * C + C;
					float dot = 0.0f, dpv = 0.0f;
					for (int d = 0; d < hs; d++) {
						dot += ld(a->inp, qo + d) * ld(a->inp, ko + d);
						dpv += ld(a->dout, oo + d) * ld(a->inp, ko + C + d);
					}
					p[t2] = expf(dot * scale - L);
					dp[t2] = dpv;
				}
				for (int t2 = 0; t2 <= t; t2++) {
					size_t ko = qkv + (size_t)t2 * 3 * C + C;
					float ds = p[t2] * (dp[t2] - D) * scale;
					for (int d = 0; d < hs; d++) {
						dq[(size_t)t * hs + d] += ds * ld(a->inp, ko + d);
						dk[(size_t)t2 * hs + d] += ds * ld(a->inp, qo + d);
						dv[(size_t)t2 * hs + d] +=
						    p[t2] * ld(a->dout, oo + d);
					}
				}
			}
			for (int t = 0; t < T; t++) {
				size_t qo = qkv + (size_t)t * 3 * C;
				for (int d = 0; d < hs; d++) {
					add(a->dinp, qo + d, dq[(size_t)t * hs + d]);
					add(a->dinp, qo + C + d, dk[(size_t)t * hs + d]);
					add(a->dinp, qo + 2 * C + d, dv[(size_t)t * hs + d]);
				}
			}
		}
	}
}

/* ---- GELU, residual, gradient buffers ---- */
void kn_gelu_forward_cpu_bf16(const struct kn_gelu_fwd_args *a)
{
	for (long i = 0; i < a->N; i++) {
		float x = ld(a->inp, i);
		float cube = 0.044715f * x * x * x;
		st(a->out, i, 0.5f * x * (1.0f + tanhf(KN_GELU_SCALE * (x + cube))));
	}
}

void kn_gelu_backward_cpu_bf16(const struct kn_gelu_bwd_args *a)
{
	for (long i = 0; i < a->N; i++) {
		float x = ld(a->inp, i);
		float cube = 0.044715f * x * x * x;
		float th = tanhf(KN_GELU_SCALE * (x + cube));
		float sech2 = 1.0f - th * th;
		float g = 0.5f * (1.0f + th) +
		          x * 0.5f * sech2 * KN_GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
		add(a->dinp, i, g * ld(a->dout, i));
	}
}

void kn_residual_forward_cpu_bf16(const struct kn_residual_fwd_args *a)
{
	for (long i = 0; i < a->N; i++)
		st(a->out, i, ld(a->a, i) + ld(a->b, i));
}

void kn_residual_backward_cpu_bf16(const struct kn_residual_bwd_args *a)
{
	for (long i = 0; i < a->N; i++) {
		float d = ld(a->dout, i);
		add(a->da, i, d);
		add(a->db, i, d);
	}
}

void kn_grad_accumulate_cpu_bf16(const struct kn_grad_accumulate_args *a)
{
	for (long i = 0; i < a->N; i++)
		add(a->dst, i, ld(a->src, i));
}

void kn_grad_scale_cpu_bf16(const struct kn_grad_scale_args *a)
{
	for (long i = 0; i < a->N; i++)
		st(a->x, i, ld(a->x, i) * a->scale);
}

/* ---- cross-entropy: statistics and loss in fp32/double, probs stored bf16 ---- */
void kn_crossentropy_forward_cpu_bf16(const struct kn_crossentropy_fwd_args *a)
{
	int V = a->V;
	size_t rows = (size_t)a->B * a->T;
	for (size_t r = 0; r < rows; r++) {
		size_t o = r * V;
		float mx = -INFINITY;
		for (int i = 0; i < V; i++)
			mx = ld(a->logits, o + i) > mx ? ld(a->logits, o + i) : mx;
		double sum = 0.0;
		for (int i = 0; i < V; i++)
			sum += expf(ld(a->logits, o + i) - mx);
		float inv = (float)(1.0 / sum);
		for (int i = 0; i < V; i++)
			st(a->probs, o + i, expf(ld(a->logits, o + i) - mx) * inv);
		int tgt = a->targets[r];
		a->losses[r] = tgt >= 0 && tgt < V
		                   ? (float)(log(sum) + (double)mx - (double)ld(a->logits, o + tgt))
		                   : NAN;
	}
}

void kn_crossentropy_backward_cpu_bf16(const struct kn_crossentropy_bwd_args *a)
{
	int V = a->V;
	size_t rows = (size_t)a->B * a->T;
	for (size_t r = 0; r < rows; r++) {
		int tgt = a->targets[r];
		for (int i = 0; i < V; i++)
			add(a->dlogits, r * V + i,
			    (ld(a->probs, r * V + i) - (i == tgt ? 1.0f : 0.0f)) * a->dloss);
	}
}
