/* kernels/layernorm.c — layernorm over C, CPU (eps 1e-5, biased variance).
 * Row statistics are reduced in double in index order; backward accumulates
 * dweight/dbias over rows in (b,t) order, so results are deterministic. */
#include "kernels/internal.h"

#include <math.h>

void kn_layernorm_forward_cpu(const struct kn_layernorm_fwd_args *a)
{
	if (a->dtype == KN_BF16) {
		kn_layernorm_forward_cpu_bf16(a);
		return;
	}
	const float *inp = a->inp, *w = a->weight, *bias = a->bias;
	float *out = a->out;
	int C = a->C;
	size_t rows = (size_t)a->B * a->T;
	for (size_t r = 0; r < rows; r++) {
		const float *x = inp + r * C;
		double m = 0.0, v = 0.0;
		for (int i = 0; i < C; i++)
			m += x[i];
		m /= C;
		for (int i = 0; i < C; i++) {
			double d = x[i] - m;
			v += d * d;
		}
		v /= C;
		float mean = (float)m;
		float rstd = (float)(1.0 / sqrt(v + (double)KN_LN_EPS));
		float *o = out + r * C;
		for (int i = 0; i < C; i++)
			o[i] = (x[i] - mean) * rstd * w[i] + bias[i];
		a->mean[r] = mean;
		a->rstd[r] = rstd;
	}
}

void kn_layernorm_backward_cpu(const struct kn_layernorm_bwd_args *a)
{
	if (a->dtype == KN_BF16) {
		kn_layernorm_backward_cpu_bf16(a);
		return;
	}
	const float *inp = a->inp, *w = a->weight, *dout = a->dout;
	float *dinp = a->dinp, *dw = a->dweight, *db = a->dbias;
	int C = a->C;
	size_t rows = (size_t)a->B * a->T;
	for (size_t r = 0; r < rows; r++) {
		const float *x = inp + r * C, *dy = dout + r * C;
		float *dx = dinp + r * C;
		float mean = a->mean[r], rstd = a->rstd[r];
		double dnorm_mean = 0.0, dnorm_norm_mean = 0.0;
		for (int i = 0; i < C; i++) {
			float norm = (x[i] - mean) * rstd;
			float dnorm = w[i] * dy[i];
			dnorm_mean += dnorm;
			dnorm_norm_mean += (double)dnorm * norm;
		}
		float dm = (float)(dnorm_mean / C), dnm = (float)(dnorm_norm_mean / C);
		for (int i = 0; i < C; i++) {
			float norm = (x[i] - mean) * rstd;
			float dnorm = w[i] * dy[i];
			db[i] += dy[i];
			dw[i] += norm * dy[i];
			dx[i] += (dnorm - dm - norm * dnm) * rstd;
		}
	}
}
