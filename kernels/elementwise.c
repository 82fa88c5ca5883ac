/* kernels/elementwise.c — GELU (tanh approximation), residual add, gradient
 * zero/accumulate/scale, CPU. Plain loops over N elements in index order. */
#include "kernels/internal.h"

#include <math.h>
#include <string.h>

void kn_gelu_forward_cpu(const struct kn_gelu_fwd_args *a)
{
	if (a->dtype == KN_BF16) {
		kn_gelu_forward_cpu_bf16(a);
		return;
	}
	const float *x = a->inp;
	float *y = a->out;
	for (long i = 0; i < a->N; i++) {
		float xi = x[i];
		float cube = 0.044715f * xi * xi * xi;
		y[i] = 0.5f * xi * (1.0f + tanhf(KN_GELU_SCALE * (xi + cube)));
	}
}

void kn_gelu_backward_cpu(const struct kn_gelu_bwd_args *a)
{
	if (a->dtype == KN_BF16) {
		kn_gelu_backward_cpu_bf16(a);
		return;
	}
	const float *x = a->inp, *dy = a->dout;
	float *dx = a->dinp;
	for (long i = 0; i < a->N; i++) {
		float xi = x[i];
		float cube = 0.044715f * xi * xi * xi;
		float u = KN_GELU_SCALE * (xi + cube);
		float th = tanhf(u);
		float sech2 = 1.0f - th * th;
		float g = 0.5f * (1.0f + th) +
		          xi * 0.5f * sech2 * KN_GELU_SCALE * (1.0f + 3.0f * 0.044715f * xi * xi);
		dx[i] += g * dy[i];
	}
}

void kn_residual_forward_cpu(const struct kn_residual_fwd_args *a)
{
	if (a->dtype == KN_BF16) {
		kn_residual_forward_cpu_bf16(a);
		return;
	}
	const float *x = a->a, *y = a->b;
	float *o = a->out;
	for (long i = 0; i < a->N; i++)
		o[i] = x[i] + y[i];
}

void kn_residual_backward_cpu(const struct kn_residual_bwd_args *a)
{
	if (a->dtype == KN_BF16) {
		kn_residual_backward_cpu_bf16(a);
		return;
	}
	const float *d = a->dout;
	float *da = a->da, *db = a->db;
	for (long i = 0; i < a->N; i++) {
		da[i] += d[i];
		db[i] += d[i];
	}
}

void kn_grad_zero_cpu(const struct kn_grad_zero_args *a)
{
	memset(a->x, 0, (size_t)a->N * kn_dtype_size(a->dtype));
}

void kn_grad_accumulate_cpu(const struct kn_grad_accumulate_args *a)
{
	if (a->dtype == KN_BF16) {
		kn_grad_accumulate_cpu_bf16(a);
		return;
	}
	const float *s = a->src;
	float *d = a->dst;
	for (long i = 0; i < a->N; i++)
		d[i] += s[i];
}

void kn_grad_scale_cpu(const struct kn_grad_scale_args *a)
{
	if (a->dtype == KN_BF16) {
		kn_grad_scale_cpu_bf16(a);
		return;
	}
	float *x = a->x;
	for (long i = 0; i < a->N; i++)
		x[i] *= a->scale;
}

/* Each part sequentially in double; the parts in order (kernels.h). */
void kn_grad_sumsq_cpu(const struct kn_grad_sumsq_args *a)
{
	long per = (a->N + KN_SUMSQ_PARTS - 1) / KN_SUMSQ_PARTS;
	for (int k = 0; k < KN_SUMSQ_PARTS; k++) {
		long lo = k * per, hi = lo + per < a->N ? lo + per : a->N;
		double s = 0;
		if (a->dtype == KN_BF16) {
			const uint16_t *x = a->x;
			for (long i = lo; i < hi; i++) {
				double v = kn_bf16_to_f32(x[i]);
				s += v * v;
			}
		} else {
			const float *x = a->x;
			for (long i = lo; i < hi; i++) {
				double v = x[i];
				s += v * v;
			}
		}
		a->parts[k] = s;
	}
	double t = 0;
	for (int k = 0; k < KN_SUMSQ_PARTS; k++)
		t += a->parts[k];
	*a->out = t;
}
