/* kernels/elementwise.c — GELU (tanh approximation), residual add, gradient
 * zero/accumulate/scale, CPU. Plain loops over N elements in index order. GELU
 * evaluates tanh with kn_gelu_tanhf (gelu_impl.h), not libm's tanhf, so that its
 * AVX2 loops (elementwise_simd.c, picked at run time) give the same bits. */
#include "kernels/gelu_impl.h"
#include "kernels/internal.h"

#include <string.h>

/* ---- GELU: the scalar loops, and the dispatch to the widest path ---- */

static void gelu_forward_scalar(float *y, const float *x, long n)
{
	for (long i = 0; i < n; i++) {
		float xi = x[i];
		float cube = KN_GELU_CUBE * xi * xi * xi;
		y[i] = 0.5f * xi * (1.0f + kn_gelu_tanhf(KN_GELU_SCALE * (xi + cube)));
	}
}

static void gelu_backward_scalar(float *dx, const float *x, const float *dy, long n)
{
	for (long i = 0; i < n; i++) {
		float xi = x[i];
		float cube = KN_GELU_CUBE * xi * xi * xi;
		float th = kn_gelu_tanhf(KN_GELU_SCALE * (xi + cube));
		float sech2 = 1.0f - th * th;
		float g = 0.5f * (1.0f + th) + xi * 0.5f * sech2 * KN_GELU_SCALE *
		                                   (1.0f + 3.0f * KN_GELU_CUBE * xi * xi);
		dx[i] += g * dy[i];
	}
}

const struct kn_gelu_path kn_gelu_scalar_path = {"scalar", gelu_forward_scalar,
                                                 gelu_backward_scalar};

static int gelu_forced_isa = -1;

static const struct kn_gelu_path *gelu_path(void)
{
	if (gelu_forced_isa == KN_OPTIM_SCALAR)
		return &kn_gelu_scalar_path;
	if (kn_gelu_avx2_path.forward && kn_optim_isa_supported(KN_OPTIM_AVX2))
		return &kn_gelu_avx2_path;
	return &kn_gelu_scalar_path;
}

int kn_gelu_tune(int isa)
{
	if (isa != -1 && isa != KN_OPTIM_SCALAR && isa != KN_OPTIM_AVX2)
		return sp_error(-EINVAL, "kn_gelu_tune: isa %d", isa);
	if (isa == KN_OPTIM_AVX2 &&
	    !(kn_gelu_avx2_path.forward && kn_optim_isa_supported(KN_OPTIM_AVX2)))
		return sp_error(-ENOTSUP, "kn_gelu_tune: this CPU or build has no avx2 path");
	gelu_forced_isa = isa;
	return 0;
}

void kn_gelu_forward_cpu(const struct kn_gelu_fwd_args *a)
{
	if (a->dtype == KN_BF16) {
		kn_gelu_forward_cpu_bf16(a);
		return;
	}
	gelu_path()->forward(a->out, a->inp, a->N);
}

void kn_gelu_backward_cpu(const struct kn_gelu_bwd_args *a)
{
	if (a->dtype == KN_BF16) {
		kn_gelu_backward_cpu_bf16(a);
		return;
	}
	gelu_path()->backward(a->dinp, a->inp, a->dout, a->N);
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
