/* tests/shim/gpu_oversub.cu — a plain CUDA C program, built by nvcc with its
 * default static cudart, for the shim on a real GPU (test_gpu_shim.sh):
 *   gpu_oversub NBUF MIB ITERS
 * NBUF buffers of MIB MiB, a cyclic pass per iteration (buffer i from buffer
 * i+1), then every buffer back and one FNV-1a hash: "checksum=<hex>". Under
 * the shim with a budget of a third of NBUF * MIB it must print the same. */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

__global__ void step(float *y, const float *x, float a, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		y[i] = y[i] * 0.5f + a * x[i];
}

#define CHECK(call)                                                                 \
	do {                                                                        \
		cudaError_t e_ = (call);                                            \
		if (e_ != cudaSuccess) {                                            \
			fprintf(stderr, "%s: %s\n", #call, cudaGetErrorString(e_)); \
			return 1;                                                   \
		}                                                                   \
	} while (0)

int main(int argc, char **argv)
{
	if (argc != 4)
		return 2;
	int nbuf = atoi(argv[1]), iters = atoi(argv[3]);
	size_t bytes = (size_t)atoi(argv[2]) << 20;
	int n = (int)(bytes / sizeof(float));
	float **buf = (float **)calloc(nbuf, sizeof(*buf));
	float *host = (float *)malloc(bytes);
	for (int b = 0; b < nbuf; b++) {
		CHECK(cudaMalloc(&buf[b], bytes));
		for (int i = 0; i < n; i++)
			host[i] = (float)((b * 131 + i * 7) % 1000) / 1000.0f;
		CHECK(cudaMemcpy(buf[b], host, bytes, cudaMemcpyHostToDevice));
	}
	for (int it = 0; it < iters; it++)
		for (int b = 0; b < nbuf; b++) {
			step<<<(n + 255) / 256, 256>>>(buf[b], buf[(b + 1) % nbuf],
			                               0.25f + 0.01f * b, n);
			CHECK(cudaGetLastError());
		}
	CHECK(cudaDeviceSynchronize());
	uint64_t h = 1469598103934665603ull;
	for (int b = 0; b < nbuf; b++) {
		CHECK(cudaMemcpy(host, buf[b], bytes, cudaMemcpyDeviceToHost));
		const unsigned char *p = (const unsigned char *)host;
		for (size_t i = 0; i < bytes; i++)
			h = (h ^ p[i]) * 1099511628211ull;
		CHECK(cudaFree(buf[b]));
	}
	printf("checksum=%016llx\n", (unsigned long long)h);
	return 0;
}
