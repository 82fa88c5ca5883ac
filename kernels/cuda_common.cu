/* kernels/cuda_common.cu — cuBLAS handle cache and error plumbing for the CUDA
 * kernels. One handle per (device, stream), created on first use, kept in a
 * fixed table under a mutex; launchers never use the default stream. */
#include "kernels/cuda_common.cuh"

#include <pthread.h>

extern "C" {
#include "common/log.h"
}

namespace
{
struct handle_slot {
	int dev;
	cudaStream_t stream;
	cublasHandle_t handle;
};
pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
handle_slot cache[KN_CUBLAS_CACHE];
int cache_n;
thread_local int last_error;
} // namespace

void kn_cuda_set_error(int rc, const char *what, const char *detail)
{
	if (last_error == 0) {
		last_error = rc;
		sp_error(rc, "kn CUDA: %s: %s", what, detail);
	}
	SP_WARN(KN, "%s: %s", what, detail);
}

void kn_cuda_check_launch(const char *what)
{
	cudaError_t e = cudaGetLastError();
	if (e != cudaSuccess)
		kn_cuda_set_error(-EIO, what, cudaGetErrorString(e));
}

extern "C" int kn_cuda_last_error(void)
{
	int rc = last_error;
	last_error = 0;
	return rc;
}

extern "C" int kn_cuda_cublas_handle(void *stream, void **out)
{
	int dev = 0;
	cudaError_t ce = cudaGetDevice(&dev);
	if (ce != cudaSuccess)
		return sp_error(-EIO, "kn_cuda_cublas_handle: cudaGetDevice: %s",
		                cudaGetErrorString(ce));
	int rc = 0;
	pthread_mutex_lock(&cache_lock);
	for (int i = 0; i < cache_n; i++) {
		if (cache[i].dev == dev && cache[i].stream == (cudaStream_t)stream) {
			*out = cache[i].handle;
			goto unlock;
		}
	}
	if (cache_n == KN_CUBLAS_CACHE) {
		rc = sp_error(-ENOSPC, "kn_cuda_cublas_handle: cache full (%d handles)",
		              KN_CUBLAS_CACHE);
		goto unlock;
	}
	{
		cublasHandle_t h;
		cublasStatus_t st = cublasCreate(&h);
		if (st != CUBLAS_STATUS_SUCCESS) {
			rc = sp_error(-EIO, "kn_cuda_cublas_handle: cublasCreate: %s",
			              cublasGetStatusString(st));
			goto unlock;
		}
		st = cublasSetStream(h, (cudaStream_t)stream);
		if (st == CUBLAS_STATUS_SUCCESS) /* plain fp32: no TF32 */
			st = cublasSetMathMode(h, CUBLAS_DEFAULT_MATH);
		if (st != CUBLAS_STATUS_SUCCESS) {
			cublasDestroy(h);
			rc = sp_error(-EIO, "kn_cuda_cublas_handle: cublasSetStream: %s",
			              cublasGetStatusString(st));
			goto unlock;
		}
		cache[cache_n].dev = dev;
		cache[cache_n].stream = (cudaStream_t)stream;
		cache[cache_n].handle = h;
		cache_n++;
		*out = h;
	}
unlock:
	pthread_mutex_unlock(&cache_lock);
	return rc;
}

extern "C" void kn_cuda_cublas_release(void)
{
	pthread_mutex_lock(&cache_lock);
	for (int i = 0; i < cache_n; i++)
		cublasDestroy(cache[i].handle);
	cache_n = 0;
	pthread_mutex_unlock(&cache_lock);
	kn_cuda_lt_release();
}

cublasHandle_t kn_cuda_handle(cudaStream_t stream)
{
	void *h = NULL;
	int rc = kn_cuda_cublas_handle(stream, &h);
	if (rc < 0) {
		kn_cuda_set_error(rc, "cublas handle", sp_last_error());
		return NULL;
	}
	return (cublasHandle_t)h;
}

void kn_cuda_gemm(cudaStream_t stream, bool ta, bool tb, int M, int N, int K, float alpha,
                  const float *A, int lda, long long sa, const float *B, int ldb, long long sb,
                  float beta, float *C, int ldc, long long sc, int batch)
{
	cublasHandle_t h = kn_cuda_handle(stream);
	if (!h)
		return;
	/* row-major C = op(A) op(B)  <=>  column-major C^T = op(B)^T op(A)^T */
	cublasOperation_t oa = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
	cublasOperation_t ob = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
	cublasStatus_t st;
	if (batch == 1)
		st = cublasSgemm(h, ob, oa, N, M, K, &alpha, B, ldb, A, lda, &beta, C, ldc);
	else
		st = cublasSgemmStridedBatched(h, ob, oa, N, M, K, &alpha, B, ldb, sb, A, lda, sa,
		                               &beta, C, ldc, sc, batch);
	if (st != CUBLAS_STATUS_SUCCESS)
		kn_cuda_set_error(-EIO, "cublasSgemm", cublasGetStatusString(st));
}
