/* kernels/optim.c — the optimizers, CPU: AdamW with torch.optim.AdamW's order of operations
 * (decoupled decay first, then moments, then the bias-corrected step), so one
 * step matches torch to rounding. Scalars are formed in double as torch does. */
#include "kernels/internal.h"

#include <math.h>

void kn_adamw_cpu(const struct kn_adamw_args *a)
{
	float *p = a->params, *m = a->m, *v = a->v;
	const float *g = a->grads;
	double bc1 = 1.0 - pow((double)a->beta1, a->t);
	double bc2 = 1.0 - pow((double)a->beta2, a->t);
	float decay = (float)(1.0 - (double)a->lr * a->weight_decay);
	float step = (float)((double)a->lr / bc1);
	float bc2_sqrt = (float)sqrt(bc2);
	float b1 = a->beta1, b2 = a->beta2, eps = a->eps;
	float c1 = (float)(1.0 - (double)a->beta1), c2 = (float)(1.0 - (double)a->beta2);
	for (long i = 0; i < a->N; i++) {
		float gi = g[i];
		float pi = p[i] * decay;
		float mi = m[i] * b1 + c1 * gi;
		float vi = v[i] * b2 + c2 * gi * gi;
		float denom = sqrtf(vi) / bc2_sqrt + eps;
		p[i] = pi - step * (mi / denom);
		m[i] = mi;
		v[i] = vi;
	}
}

/* SGD, in torch.optim.SGD's order: decay into the gradient, then momentum,
 * then the step. */
void kn_sgd_cpu(const struct kn_sgd_args *a)
{
	float *p = a->params, *buf = a->buf;
	const float *g = a->grads;
	float lr = a->lr, mu = a->momentum, wd = a->weight_decay;
	for (long i = 0; i < a->N; i++) {
		float d = g[i] + wd * p[i];
		if (buf) {
			d = buf[i] * mu + d;
			buf[i] = d;
		}
		p[i] = p[i] - lr * d;
	}
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
	for (long i = 0; i < a->N; i++) {
		float gi = kn_bf16_to_f32(g[i]);
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
	float lr = a->lr, mu = a->momentum, wd = a->weight_decay;
	for (long i = 0; i < a->N; i++) {
		float d = kn_bf16_to_f32(g[i]) + wd * p[i];
		if (buf) {
			d = buf[i] * mu + d;
			buf[i] = d;
		}
		p[i] = p[i] - lr * d;
		w[i] = kn_f32_to_bf16(p[i]);
	}
}
