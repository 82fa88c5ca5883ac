/* kernels/cuda_tp.cu — the strided GEMM, column sum and tree sum on CUDA
 * (fp32), for the tensor-parallel block form: cuBLAS sgemm with the row
 * strides, and elementwise kernels whose sums run in kernels.h's orders (the
 * column sum: 32 row-strided partials per column, then added in order, as
 * matmul's bias gradient). */
#include "kernels/cuda_common.cuh"

__global__ void kn_bias_add_kernel(float *c, const float *bias, int M, int N, int ldc)
{
	long n = (long)M * N;
	for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n;
	     i += (long)gridDim.x * blockDim.x)
		c[(i / N) * ldc + i % N] += bias[i % N];
}

extern "C" void kn_gemm_cuda(const struct kn_gemm_args *a, void *stream)
{
	cudaStream_t s = (cudaStream_t)stream;
	kn_cuda_gemm(s, a->trans_a != 0, a->trans_b != 0, a->M, a->N, a->K, 1.0f, a->a, a->lda, 0,
	             a->b, a->ldb, 0, a->beta, a->c, a->ldc, 0, 1);
	if (!a->bias)
		return;
	long n = (long)a->M * a->N;
	kn_bias_add_kernel<<<kn_blocks(n, 256), 256, 0, s>>>(a->c, a->bias, a->M, a->N, a->ldc);
	kn_cuda_check_launch("gemm bias");
}

/* out[c] += sum over rows of in[r*ld + c]; block (32, 32), grid ceil(N/32). */
__global__ void kn_colsum_ld_kernel(float *out, const float *in, int M, int N, int ld)
{
	__shared__ float part[32][33];
	int c = blockIdx.x * 32 + threadIdx.x;
	float acc = 0.0f;
	if (c < N)
		for (int r = threadIdx.y; r < M; r += 32)
			acc += in[(size_t)r * ld + c];
	part[threadIdx.y][threadIdx.x] = acc;
	__syncthreads();
	if (threadIdx.y == 0 && c < N) {
		float sum = 0.0f;
		for (int i = 0; i < 32; i++)
			sum += part[i][threadIdx.x];
		out[c] += sum;
	}
}

extern "C" void kn_colsum_cuda(const struct kn_colsum_args *a, void *stream)
{
	kn_colsum_ld_kernel<<<(a->N + 31) / 32, dim3(32, 32), 0, (cudaStream_t)stream>>>(
	    a->out, a->in, a->M, a->N, a->ld);
	kn_cuda_check_launch("colsum");
}

__global__ void kn_tree_sum_dev(float *out, const float *x, long s, long N, int n,
                                const float *bias, int OC)
{
	for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < N;
	     i += (long)gridDim.x * blockDim.x) {
		float v = x[i];
		if (n == 2)
			v = __fadd_rn(x[i], x[s + i]);
		else if (n == 4)
			v = __fadd_rn(__fadd_rn(x[i], x[s + i]),
			              __fadd_rn(x[2 * s + i], x[3 * s + i]));
		if (bias)
			v = __fadd_rn(v, bias[i % OC]);
		out[i] = v;
	}
}

extern "C" void kn_tree_sum_cuda(const struct kn_tree_sum_args *a, void *stream)
{
	kn_tree_sum_dev<<<kn_blocks(a->N, 256), 256, 0, (cudaStream_t)stream>>>(
	    a->out, a->in, a->stride, a->N, a->n, a->bias, a->OC);
	kn_cuda_check_launch("tree_sum");
}
