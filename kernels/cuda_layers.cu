/* kernels/cuda_layers.cu — embedding, layernorm, GELU, residual, cross-entropy,
 * AdamW and gradient buffer ops on CUDA, on the stream given.
 *
 * No atomics: every reduction has a fixed shape (warp shuffles, then shared
 * memory in index order), so results are deterministic run to run. Launchers
 * park errors in kn_cuda_last_error() (dev_kernel launchers return void).
 */
#include "kernels/cuda_common.cuh"

#include <math.h>

#define KN_GRID_STRIDE(i, n)                                                \
	for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < (n); \
	     i += (long)gridDim.x * blockDim.x)

__device__ __forceinline__ float kn_warp_sum(float v)
{
	for (int o = 16; o > 0; o /= 2)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

__device__ __forceinline__ float kn_warp_max(float v)
{
	for (int o = 16; o > 0; o /= 2)
		v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
	return v;
}

/* ---- encoder ---- */
__global__ void kn_encoder_fwd_kernel(float *out, const int *inp, const float *wte,
                                      const float *wpe, int B, int T, int C)
{
	long n = (long)B * T * C;
	KN_GRID_STRIDE(i, n)
	{
		int c = i % C;
		long bt = i / C;
		int t = bt % T;
		out[i] = wte[(size_t)inp[bt] * C + c] + wpe[(size_t)t * C + c];
	}
}

/* dwpe[t,c] += sum over b (in order) of dout[b,t,c] */
__global__ void kn_encoder_bwd_wpe_kernel(float *dwpe, const float *dout, int B, int T, int C)
{
	long n = (long)T * C;
	KN_GRID_STRIDE(i, n)
	{
		float acc = 0.0f;
		for (int b = 0; b < B; b++)
			acc += dout[(size_t)b * T * C + i];
		dwpe[i] += acc;
	}
}

/* dwte[inp[bt]] += dout[bt]: a thread owns channel c of the tokens in its
 * vocabulary slice [v0, v1) (grid y) and walks all (b,t) in order through
 * shared-memory tiles of token ids, so each dwte element is updated by one
 * thread in (b,t) order: deterministic, the same order as the CPU kernel. */
#define KN_ENC_TILE    1024
#define KN_ENC_VSLICES 64
__global__ void kn_encoder_bwd_wte_kernel(float *dwte, const float *dout, const int *inp, int BT,
                                          int C, int V)
{
	__shared__ int tok[KN_ENC_TILE];
	int c = blockIdx.x * blockDim.x + threadIdx.x;
	int v0 = (int)((long)blockIdx.y * V / gridDim.y);
	int v1 = (int)((long)(blockIdx.y + 1) * V / gridDim.y);
	for (int base = 0; base < BT; base += KN_ENC_TILE) {
		int n = BT - base < KN_ENC_TILE ? BT - base : KN_ENC_TILE;
		__syncthreads();
		for (int i = threadIdx.x; i < n; i += blockDim.x)
			tok[i] = inp[base + i];
		__syncthreads();
		if (c >= C)
			continue;
		for (int i = 0; i < n; i++) {
			int v = tok[i];
			if (v >= v0 && v < v1)
				dwte[(size_t)v * C + c] += dout[(size_t)(base + i) * C + c];
		}
	}
}

extern "C" void kn_encoder_forward_cuda(const struct kn_encoder_fwd_args *a, void *stream)
{
	if (a->dtype == KN_BF16) {
		kn_encoder_forward_cuda_bf16(a, (cudaStream_t)stream);
		return;
	}
	long n = (long)a->B * a->T * a->C;
	kn_encoder_fwd_kernel<<<kn_blocks(n, 256), 256, 0, (cudaStream_t)stream>>>(
	    (float *)a->out, a->inp, (const float *)a->wte, (const float *)a->wpe, a->B, a->T,
	    a->C);
	kn_cuda_check_launch("encoder_forward");
}

extern "C" void kn_encoder_backward_cuda(const struct kn_encoder_bwd_args *a, void *stream)
{
	if (a->dtype == KN_BF16) {
		kn_encoder_backward_cuda_bf16(a, (cudaStream_t)stream);
		return;
	}
	cudaStream_t s = (cudaStream_t)stream;
	long n = (long)a->T * a->C;
	kn_encoder_bwd_wpe_kernel<<<kn_blocks(n, 256), 256, 0, s>>>(
	    (float *)a->dwpe, (const float *)a->dout, a->B, a->T, a->C);
	dim3 grid((a->C + 127) / 128, a->V < KN_ENC_VSLICES ? a->V : KN_ENC_VSLICES);
	kn_encoder_bwd_wte_kernel<<<grid, 128, 0, s>>>((float *)a->dwte, (const float *)a->dout,
	                                               a->inp, a->B * a->T, a->C, a->V);
	kn_cuda_check_launch("encoder_backward");
}

/* ---- layernorm: one warp per row ---- */
__global__ void kn_layernorm_fwd_kernel(float *out, float *mean, float *rstd, const float *inp,
                                        const float *w, const float *bias, int rows, int C)
{
	int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
	int lane = threadIdx.x % 32;
	if (row >= rows)
		return;
	const float *x = inp + (size_t)row * C;
	float s = 0.0f;
	for (int i = lane; i < C; i += 32)
		s += x[i];
	float m = kn_warp_sum(s) / C;
	float v = 0.0f;
	for (int i = lane; i < C; i += 32) {
		float d = x[i] - m;
		v += d * d;
	}
	v = kn_warp_sum(v) / C;
	float r = rsqrtf(v + 1e-5f);
	float *o = out + (size_t)row * C;
	for (int i = lane; i < C; i += 32)
		o[i] = (x[i] - m) * r * w[i] + bias[i];
	if (lane == 0) {
		mean[row] = m;
		rstd[row] = r;
	}
}

__global__ void kn_layernorm_bwd_dinp_kernel(float *dinp, const float *dout, const float *inp,
                                             const float *w, const float *mean, const float *rstd,
                                             int rows, int C)
{
	int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
	int lane = threadIdx.x % 32;
	if (row >= rows)
		return;
	const float *x = inp + (size_t)row * C, *dy = dout + (size_t)row * C;
	float *dx = dinp + (size_t)row * C;
	float m = mean[row], r = rstd[row];
	float dm = 0.0f, dnm = 0.0f;
	for (int i = lane; i < C; i += 32) {
		float norm = (x[i] - m) * r;
		float dn = w[i] * dy[i];
		dm += dn;
		dnm += dn * norm;
	}
	dm = kn_warp_sum(dm) / C;
	dnm = kn_warp_sum(dnm) / C;
	for (int i = lane; i < C; i += 32) {
		float norm = (x[i] - m) * r;
		float dn = w[i] * dy[i];
		dx[i] += (dn - dm - norm * dnm) * r;
	}
}

/* dweight[c] += sum_r dout*norm, dbias[c] += sum_r dout; block (32,32), fixed order */
__global__ void kn_layernorm_bwd_params_kernel(float *dw, float *db, const float *dout,
                                               const float *inp, const float *mean,
                                               const float *rstd, int rows, int C)
{
	__shared__ float pw[32][33], pb[32][33];
	int c = blockIdx.x * 32 + threadIdx.x;
	float aw = 0.0f, ab = 0.0f;
	if (c < C) {
		for (int r = threadIdx.y; r < rows; r += 32) {
			float dy = dout[(size_t)r * C + c];
			float norm = (inp[(size_t)r * C + c] - mean[r]) * rstd[r];
			aw += dy * norm;
			ab += dy;
		}
	}
	pw[threadIdx.y][threadIdx.x] = aw;
	pb[threadIdx.y][threadIdx.x] = ab;
	__syncthreads();
	if (threadIdx.y == 0 && c < C) {
		float sw = 0.0f, sb = 0.0f;
		for (int i = 0; i < 32; i++) {
			sw += pw[i][threadIdx.x];
			sb += pb[i][threadIdx.x];
		}
		dw[c] += sw;
		db[c] += sb;
	}
}

extern "C" void kn_layernorm_forward_cuda(const struct kn_layernorm_fwd_args *a, void *stream)
{
	if (a->dtype == KN_BF16) {
		kn_layernorm_forward_cuda_bf16(a, (cudaStream_t)stream);
		return;
	}
	int rows = a->B * a->T;
	kn_layernorm_fwd_kernel<<<(rows + 7) / 8, 256, 0, (cudaStream_t)stream>>>(
	    (float *)a->out, a->mean, a->rstd, (const float *)a->inp, (const float *)a->weight,
	    (const float *)a->bias, rows, a->C);
	kn_cuda_check_launch("layernorm_forward");
}

extern "C" void kn_layernorm_backward_cuda(const struct kn_layernorm_bwd_args *a, void *stream)
{
	if (a->dtype == KN_BF16) {
		kn_layernorm_backward_cuda_bf16(a, (cudaStream_t)stream);
		return;
	}
	cudaStream_t s = (cudaStream_t)stream;
	int rows = a->B * a->T;
	kn_layernorm_bwd_dinp_kernel<<<(rows + 7) / 8, 256, 0, s>>>(
	    (float *)a->dinp, (const float *)a->dout, (const float *)a->inp,
	    (const float *)a->weight, a->mean, a->rstd, rows, a->C);
	kn_layernorm_bwd_params_kernel<<<(a->C + 31) / 32, dim3(32, 32), 0, s>>>(
	    (float *)a->dweight, (float *)a->dbias, (const float *)a->dout, (const float *)a->inp,
	    a->mean, a->rstd, rows, a->C);
	kn_cuda_check_launch("layernorm_backward");
}

/* ---- GELU, residual ---- */
#define KN_GELU_S 0.7978845608028654f

__global__ void kn_gelu_fwd_kernel(float *out, const float *inp, long n)
{
	KN_GRID_STRIDE(i, n)
	{
		float x = inp[i];
		float cube = 0.044715f * x * x * x;
		out[i] = 0.5f * x * (1.0f + tanhf(KN_GELU_S * (x + cube)));
	}
}

__global__ void kn_gelu_bwd_kernel(float *dinp, const float *inp, const float *dout, long n)
{
	KN_GRID_STRIDE(i, n)
	{
		float x = inp[i];
		float cube = 0.044715f * x * x * x;
		float th = tanhf(KN_GELU_S * (x + cube));
		float sech2 = 1.0f - th * th;
		float g = 0.5f * (1.0f + th) +
		          x * 0.5f * sech2 * KN_GELU_S * (1.0f + 3.0f * 0.044715f * x * x);
		dinp[i] += g * dout[i];
	}
}

extern "C" void kn_gelu_forward_cuda(const struct kn_gelu_fwd_args *a, void *stream)
{
	if (a->dtype == KN_BF16) {
		kn_gelu_forward_cuda_bf16(a, (cudaStream_t)stream);
		return;
	}
	kn_gelu_fwd_kernel<<<kn_blocks(a->N, 256), 256, 0, (cudaStream_t)stream>>>(
	    (float *)a->out, (const float *)a->inp, a->N);
	kn_cuda_check_launch("gelu_forward");
}

extern "C" void kn_gelu_backward_cuda(const struct kn_gelu_bwd_args *a, void *stream)
{
	if (a->dtype == KN_BF16) {
		kn_gelu_backward_cuda_bf16(a, (cudaStream_t)stream);
		return;
	}
	kn_gelu_bwd_kernel<<<kn_blocks(a->N, 256), 256, 0, (cudaStream_t)stream>>>(
	    (float *)a->dinp, (const float *)a->inp, (const float *)a->dout, a->N);
	kn_cuda_check_launch("gelu_backward");
}

__global__ void kn_add_kernel(float *out, const float *x, const float *y, long n)
{
	KN_GRID_STRIDE(i, n)
	out[i] = x[i] + y[i];
}

__global__ void kn_add2_kernel(float *da, float *db, const float *d, long n)
{
	KN_GRID_STRIDE(i, n)
	{
		da[i] += d[i];
		db[i] += d[i];
	}
}

extern "C" void kn_residual_forward_cuda(const struct kn_residual_fwd_args *a, void *stream)
{
	if (a->dtype == KN_BF16) {
		kn_residual_forward_cuda_bf16(a, (cudaStream_t)stream);
		return;
	}
	kn_add_kernel<<<kn_blocks(a->N, 256), 256, 0, (cudaStream_t)stream>>>(
	    (float *)a->out, (const float *)a->a, (const float *)a->b, a->N);
	kn_cuda_check_launch("residual_forward");
}

extern "C" void kn_residual_backward_cuda(const struct kn_residual_bwd_args *a, void *stream)
{
	if (a->dtype == KN_BF16) {
		kn_residual_backward_cuda_bf16(a, (cudaStream_t)stream);
		return;
	}
	kn_add2_kernel<<<kn_blocks(a->N, 256), 256, 0, (cudaStream_t)stream>>>(
	    (float *)a->da, (float *)a->db, (const float *)a->dout, a->N);
	kn_cuda_check_launch("residual_backward");
}

/* ---- cross-entropy: one block of 256 per row ---- */
__device__ float kn_block_reduce(float v, bool is_max)
{
	__shared__ float part[8];
	__shared__ float result;
	int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
	v = is_max ? kn_warp_max(v) : kn_warp_sum(v);
	if (lane == 0)
		part[warp] = v;
	__syncthreads();
	if (threadIdx.x == 0) {
		float r = part[0];
		for (int i = 1; i < (int)(blockDim.x / 32); i++)
			r = is_max ? fmaxf(r, part[i]) : r + part[i];
		result = r;
	}
	__syncthreads();
	float r = result;
	__syncthreads();
	return r;
}

__global__ void kn_ce_fwd_kernel(float *losses, float *probs, const float *logits,
                                 const int *targets, int V)
{
	size_t row = blockIdx.x;
	const float *x = logits + row * V;
	float *p = probs + row * V;
	float mx = -INFINITY;
	for (int i = threadIdx.x; i < V; i += blockDim.x)
		mx = fmaxf(mx, x[i]);
	mx = kn_block_reduce(mx, true);
	float s = 0.0f;
	for (int i = threadIdx.x; i < V; i += blockDim.x) {
		float e = expf(x[i] - mx);
		p[i] = e;
		s += e;
	}
	s = kn_block_reduce(s, false);
	float inv = 1.0f / s;
	for (int i = threadIdx.x; i < V; i += blockDim.x)
		p[i] *= inv;
	if (threadIdx.x == 0)
		losses[row] = logf(s) + mx - x[targets[row]];
}

__global__ void kn_ce_bwd_kernel(float *dlogits, const float *probs, const int *targets,
                                 float dloss, long n, int V)
{
	KN_GRID_STRIDE(i, n)
	{
		int v = i % V;
		float ind = v == targets[i / V] ? 1.0f : 0.0f;
		dlogits[i] += (probs[i] - ind) * dloss;
	}
}

extern "C" void kn_crossentropy_forward_cuda(const struct kn_crossentropy_fwd_args *a, void *stream)
{
	if (a->dtype == KN_BF16) {
		kn_crossentropy_forward_cuda_bf16(a, (cudaStream_t)stream);
		return;
	}
	kn_ce_fwd_kernel<<<a->B * a->T, 256, 0, (cudaStream_t)stream>>>(
	    a->losses, (float *)a->probs, (const float *)a->logits, a->targets, a->V);
	kn_cuda_check_launch("crossentropy_forward");
}

extern "C" void kn_crossentropy_backward_cuda(const struct kn_crossentropy_bwd_args *a,
                                              void *stream)
{
	if (a->dtype == KN_BF16) {
		kn_crossentropy_backward_cuda_bf16(a, (cudaStream_t)stream);
		return;
	}
	long n = (long)a->B * a->T * a->V;
	kn_ce_bwd_kernel<<<kn_blocks(n, 256), 256, 0, (cudaStream_t)stream>>>(
	    (float *)a->dlogits, (const float *)a->probs, a->targets, a->dloss, n, a->V);
	kn_cuda_check_launch("crossentropy_backward");
}

/* ---- AdamW and gradient buffers ---- */
__global__ void kn_adamw_update_kernel(float *p, const float *g, float *m, float *v, long n,
                                       float decay, float step, float bc2_sqrt, float b1, float b2,
                                       float c1, float c2, float eps, struct kn_clip clip)
{
	float gs = kn_clip_scale(&clip);
	KN_GRID_STRIDE(i, n)
	{
		float gi = g[i] * gs;
		float pi = p[i] * decay;
		float mi = m[i] * b1 + c1 * gi;
		float vi = v[i] * b2 + c2 * gi * gi;
		float denom = sqrtf(vi) / bc2_sqrt + eps;
		p[i] = pi - step * (mi / denom);
		m[i] = mi;
		v[i] = vi;
	}
}

extern "C" void kn_adamw_cuda(const struct kn_adamw_args *a, void *stream)
{
	double bc1 = 1.0 - pow((double)a->beta1, a->t);
	double bc2 = 1.0 - pow((double)a->beta2, a->t);
	kn_adamw_update_kernel<<<kn_blocks(a->N, 256), 256, 0, (cudaStream_t)stream>>>(
	    (float *)a->params, (const float *)a->grads, a->m, a->v, a->N,
	    (float)(1.0 - (double)a->lr * a->weight_decay), (float)((double)a->lr / bc1),
	    (float)sqrt(bc2), a->beta1, a->beta2, (float)(1.0 - (double)a->beta1),
	    (float)(1.0 - (double)a->beta2), a->eps, a->clip);
	kn_cuda_check_launch("adamw");
}

__global__ void kn_sgd_update_kernel(float *p, const float *g, float *buf, long n, float lr,
                                     float mu, float wd, struct kn_clip clip)
{
	float gs = kn_clip_scale(&clip);
	KN_GRID_STRIDE(i, n)
	{
		float d = g[i] * gs + wd * p[i];
		if (buf) {
			d = buf[i] * mu + d;
			buf[i] = d;
		}
		p[i] = p[i] - lr * d;
	}
}

extern "C" void kn_sgd_cuda(const struct kn_sgd_args *a, void *stream)
{
	kn_sgd_update_kernel<<<kn_blocks(a->N, 256), 256, 0, (cudaStream_t)stream>>>(
	    (float *)a->params, (const float *)a->grads, a->buf, a->N, a->lr, a->momentum,
	    a->weight_decay, a->clip);
	kn_cuda_check_launch("sgd");
}

__global__ void kn_acc_kernel(float *d, const float *s, long n)
{
	KN_GRID_STRIDE(i, n)
	d[i] += s[i];
}

__global__ void kn_scale_kernel(float *x, float scale, long n)
{
	KN_GRID_STRIDE(i, n)
	x[i] *= scale;
}

extern "C" void kn_grad_zero_cuda(const struct kn_grad_zero_args *a, void *stream)
{
	cudaError_t e =
	    cudaMemsetAsync(a->x, 0, (size_t)a->N * kn_dtype_size(a->dtype), (cudaStream_t)stream);
	if (e != cudaSuccess)
		kn_cuda_set_error(-EIO, "grad_zero", cudaGetErrorString(e));
}

extern "C" void kn_grad_accumulate_cuda(const struct kn_grad_accumulate_args *a, void *stream)
{
	if (a->dtype == KN_BF16) {
		kn_grad_accumulate_cuda_bf16(a, (cudaStream_t)stream);
		return;
	}
	kn_acc_kernel<<<kn_blocks(a->N, 256), 256, 0, (cudaStream_t)stream>>>(
	    (float *)a->dst, (const float *)a->src, a->N);
	kn_cuda_check_launch("grad_accumulate");
}

extern "C" void kn_grad_scale_cuda(const struct kn_grad_scale_args *a, void *stream)
{
	if (a->dtype == KN_BF16) {
		kn_grad_scale_cuda_bf16(a, (cudaStream_t)stream);
		return;
	}
	kn_scale_kernel<<<kn_blocks(a->N, 256), 256, 0, (cudaStream_t)stream>>>((float *)a->x,
	                                                                        a->scale, a->N);
	kn_cuda_check_launch("grad_scale");
}

/* Sum of squares in a fixed order (kernels.h): block k sums chunk k of x into
 * parts[k] (strided per thread, then a tree in shared memory), then one thread
 * adds the parts in order. */
namespace
{ /* kernels-internal: not exported from libspill */
__device__ double kn_sq(float v)
{
	return (double)v * (double)v;
}
__device__ double kn_sq(unsigned short v)
{
	double d = (double)__uint_as_float((unsigned)v << 16);
	return d * d;
}

template <typename T>
__global__ void kn_sumsq_parts_kernel(const T *x, long n, long per, double *parts)
{
	__shared__ double sh[256];
	long lo = (long)blockIdx.x * per, hi = lo + per < n ? lo + per : n;
	double s = 0;
	for (long i = lo + threadIdx.x; i < hi; i += blockDim.x)
		s += kn_sq(x[i]);
	sh[threadIdx.x] = s;
	__syncthreads();
	for (int w = blockDim.x / 2; w > 0; w /= 2) {
		if ((int)threadIdx.x < w)
			sh[threadIdx.x] += sh[threadIdx.x + w];
		__syncthreads();
	}
	if (threadIdx.x == 0)
		parts[blockIdx.x] = sh[0];
}

__global__ void kn_sumsq_total_kernel(const double *parts, double *out)
{
	double t = 0;
	for (int k = 0; k < KN_SUMSQ_PARTS; k++)
		t += parts[k];
	*out = t;
}
} // namespace

extern "C" void kn_grad_sumsq_cuda(const struct kn_grad_sumsq_args *a, void *stream)
{
	cudaStream_t s = (cudaStream_t)stream;
	long per = (a->N + KN_SUMSQ_PARTS - 1) / KN_SUMSQ_PARTS;
	if (a->dtype == KN_BF16)
		kn_sumsq_parts_kernel<unsigned short><<<KN_SUMSQ_PARTS, 256, 0, s>>>(
		    (const unsigned short *)a->x, a->N, per, a->parts);
	else
		kn_sumsq_parts_kernel<float>
		    <<<KN_SUMSQ_PARTS, 256, 0, s>>>((const float *)a->x, a->N, per, a->parts);
	kn_sumsq_total_kernel<<<1, 1, 0, s>>>(a->parts, a->out);
	kn_cuda_check_launch("grad_sumsq");
}
