/* tests/shim/gpu_cublas_nccl.cu — cuBLAS and a one-rank NCCL all-reduce under
 * the preload shim (test_gpu_shim.sh). Both libraries reach the driver through
 * their own static cudart, which is what the shim must catch: nbuf matrices of
 * n x n floats (more than the budget together), C_i = A_i * A_{i+1} by
 * cublasSgemm, an in-place ncclAllReduce (sum over one rank: the identity) of
 * each C_i, and a checksum of every C_i read back. The same checksum with and
 * without the shim, and no crash, is the test.
 * usage: gpu_cublas_nccl NBUF N ITERS */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <stdio.h>
#include <stdlib.h>
#include <vector>

#define CK(x)                                                              \
	do {                                                               \
		cudaError_t e_ = (x);                                      \
		if (e_ != cudaSuccess) {                                   \
			fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, \
			        cudaGetErrorString(e_));                   \
			exit(1);                                           \
		}                                                          \
	} while (0)
#define CKB(x)                                                                              \
	do {                                                                                \
		cublasStatus_t s_ = (x);                                                    \
		if (s_ != CUBLAS_STATUS_SUCCESS) {                                          \
			fprintf(stderr, "%s:%d: cublas %d\n", __FILE__, __LINE__, (int)s_); \
			exit(1);                                                            \
		}                                                                           \
	} while (0)
#define CKN(x)                                                                  \
	do {                                                                    \
		ncclResult_t r_ = (x);                                          \
		if (r_ != ncclSuccess) {                                        \
			fprintf(stderr, "%s:%d: nccl %s\n", __FILE__, __LINE__, \
			        ncclGetErrorString(r_));                        \
			exit(1);                                                \
		}                                                               \
	} while (0)

__global__ void fill(float *a, size_t n, unsigned seed)
{
	size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
	if (i < n)
		a[i] = (float)((i * 2654435761u + seed * 40503u) % 1000u) / 1000.0f - 0.5f;
}

int main(int argc, char **argv)
{
	int nbuf = argc > 1 ? atoi(argv[1]) : 8, n = argc > 2 ? atoi(argv[2]) : 2048;
	int iters = argc > 3 ? atoi(argv[3]) : 2;
	if (nbuf < 2 || n < 16 || iters < 1) {
		fprintf(stderr, "usage: gpu_cublas_nccl NBUF N ITERS\n");
		return 2;
	}
	size_t elems = (size_t)n * n;
	std::vector<float *> a(nbuf), c(nbuf);
	for (int i = 0; i < nbuf; i++) {
		CK(cudaMalloc(&a[i], elems * sizeof(float)));
		CK(cudaMalloc(&c[i], elems * sizeof(float)));
		fill<<<(unsigned)((elems + 255) / 256), 256>>>(a[i], elems, (unsigned)i + 1);
		CK(cudaGetLastError());
	}
	cublasHandle_t h;
	CKB(cublasCreate(&h));
	ncclComm_t comm;
	int dev = 0;
	CKN(ncclCommInitAll(&comm, 1, &dev));
	const float one = 1.0f, zero = 0.0f;
	for (int it = 0; it < iters; it++)
		for (int i = 0; i < nbuf; i++) {
			CKB(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a[i], n,
			                a[(i + 1) % nbuf], n, &zero, c[i], n));
			CKN(ncclAllReduce(c[i], c[i], elems, ncclFloat, ncclSum, comm, 0));
		}
	CK(cudaDeviceSynchronize());
	std::vector<float> host(elems);
	double sum = 0;
	for (int i = 0; i < nbuf; i++) {
		CK(cudaMemcpy(host.data(), c[i], elems * sizeof(float), cudaMemcpyDeviceToHost));
		for (size_t k = 0; k < elems; k += 97)
			sum += host[k] * (double)((k % 7) + 1);
	}
	printf("%.6e\n", sum);
	ncclCommDestroy(comm);
	cublasDestroy(h);
	for (int i = 0; i < nbuf; i++) {
		CK(cudaFree(a[i]));
		CK(cudaFree(c[i]));
	}
	return 0;
}
