/* kernels/cpu_common.c — CPU kernel plumbing: dtype sizes, thread count, GEMM.
 *
 * The thread count is process-wide (OpenBLAS has one); GEMMs and the optimizer
 * updates (optim.c, elementwise) use threads, every other CPU kernel is a
 * single-threaded loop with a fixed order, so the results are bit-identical for
 * a fixed count.
 */
#include "kernels/internal.h"

#include <unistd.h>

#if SPILL_HAVE_BLAS
#include <cblas.h>
#endif

static int kn_threads_now;

size_t kn_dtype_size(enum kn_dtype dtype)
{
	return dtype == KN_BF16 ? 2 : 4;
}

int kn_cpu_set_threads(int threads)
{
	if (threads < 0)
		return sp_error(-EINVAL, "kn_cpu_set_threads: threads = %d must be >= 0", threads);
	if (threads == 0) {
		long n = sysconf(_SC_NPROCESSORS_ONLN);
		threads = n > 0 ? (int)n : 1;
	}
#if SPILL_HAVE_BLAS
	openblas_set_num_threads(threads);
#endif
	kn_threads_now = threads;
	return 0;
}

int kn_cpu_threads(void)
{
	return kn_threads_now;
}

void kn_gemm_f32(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A,
                 int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
#if SPILL_HAVE_BLAS
	cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
	            trans_b ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda, B, ldb, beta, C,
	            ldc);
#else
	for (int i = 0; i < M; i++) {
		for (int j = 0; j < N; j++) {
			float acc = 0.0f;
			for (int k = 0; k < K; k++) {
				float a = trans_a ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k];
				float b = trans_b ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j];
				acc += a * b;
			}
			float *c = &C[(size_t)i * ldc + j];
			*c = alpha * acc + (beta == 0.0f ? 0.0f : beta * *c);
		}
	}
#endif
}
