/* kernels/cuda_optim_mixed.cu — the mixed-precision optimizers on CUDA: AdamW
 * and SGD on fp32 masters with bf16 gradients, writing the bf16 weights
 * (round to nearest even, __float2bfloat16_rn, as kn_f32_to_bf16). The same
 * order of operations and scalars as the CPU twins in optim.c. */
#include "kernels/cuda_common.cuh"

#include <cuda_bf16.h>
#include <math.h>

#define KN_GRID_STRIDE(i, n)                                                \
	for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
	     i += (long)blockDim.x * gridDim.x)

__global__ void kn_adamw_mixed_gpu(float *p, __nv_bfloat16 *w, const __nv_bfloat16 *g, float *m,
                                   float *v, long n, float decay, float step, float bc2_sqrt,
                                   float b1, float b2, float c1, float c2, float eps,
                                   struct kn_clip clip)
{
	float gs = kn_clip_scale(&clip);
	KN_GRID_STRIDE(i, n)
	{
		float gi = __bfloat162float(g[i]) * gs;
		float pi = p[i] * decay;
		float mi = m[i] * b1 + c1 * gi;
		float vi = v[i] * b2 + c2 * gi * gi;
		float denom = sqrtf(vi) / bc2_sqrt + eps;
		float np = pi - step * (mi / denom);
		p[i] = np;
		m[i] = mi;
		v[i] = vi;
		w[i] = __float2bfloat16_rn(np);
	}
}

extern "C" void kn_adamw_mixed_cuda(const struct kn_adamw_mixed_args *a, void *stream)
{
	double bc1 = 1.0 - pow((double)a->beta1, a->t);
	double bc2 = 1.0 - pow((double)a->beta2, a->t);
	kn_adamw_mixed_gpu<<<kn_blocks(a->N, 256), 256, 0, (cudaStream_t)stream>>>(
	    a->master, (__nv_bfloat16 *)a->params, (const __nv_bfloat16 *)a->grads, a->m, a->v,
	    a->N, (float)(1.0 - (double)a->lr * a->weight_decay), (float)((double)a->lr / bc1),
	    (float)sqrt(bc2), a->beta1, a->beta2, (float)(1.0 - (double)a->beta1),
	    (float)(1.0 - (double)a->beta2), a->eps, a->clip);
	kn_cuda_check_launch("adamw_mixed");
}

__global__ void kn_sgd_mixed_gpu(float *p, __nv_bfloat16 *w, const __nv_bfloat16 *g, float *buf,
                                 long n, float lr, float mu, float wd, struct kn_clip clip)
{
	float gs = kn_clip_scale(&clip);
	KN_GRID_STRIDE(i, n)
	{
		float d = __bfloat162float(g[i]) * gs + wd * p[i];
		if (buf) {
			d = buf[i] * mu + d;
			buf[i] = d;
		}
		float np = p[i] - lr * d;
		p[i] = np;
		w[i] = __float2bfloat16_rn(np);
	}
}

extern "C" void kn_sgd_mixed_cuda(const struct kn_sgd_mixed_args *a, void *stream)
{
	kn_sgd_mixed_gpu<<<kn_blocks(a->N, 256), 256, 0, (cudaStream_t)stream>>>(
	    a->master, (__nv_bfloat16 *)a->params, (const __nv_bfloat16 *)a->grads, a->buf, a->N,
	    a->lr, a->momentum, a->weight_decay, a->clip);
	kn_cuda_check_launch("sgd_mixed");
}
