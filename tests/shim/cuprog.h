/* tests/shim/cuprog.h — what the shim's test programs share: the kernel y =
 * y/2 + a*x over n floats, a host function registered with the emulated driver
 * (tests/shim/fakecu.h), CU_CHECK (a driver call that must succeed, else
 * the program exits 1 naming it), and the NBUF MIB ITERS arguments. */
#ifndef SP_TESTS_SHIM_CUPROG_H
#define SP_TESTS_SHIM_CUPROG_H

#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>

#define CU_CHECK(call)                                                                       \
	do {                                                                                 \
		CUresult r_ = (call);                                                        \
		if (r_ != CUDA_SUCCESS) {                                                    \
			fprintf(stderr, "%s:%d: %s failed: %d\n", __FILE__, __LINE__, #call, \
			        (int)r_);                                                    \
			exit(1);                                                             \
		}                                                                            \
	} while (0)

struct step_args {
	float *y;
	const float *x;
	float a;
	int n;
};

static void k_step(const void *p)
{
	const struct step_args *s = p;
	for (int i = 0; i < s->n; i++)
		s->y[i] = s->y[i] * 0.5f + s->a * s->x[i];
}

/* NBUF MIB ITERS from argv: 0, or 2 after printing the usage. */
static inline int cuprog_args(int argc, char **argv, int *nbuf, size_t *bytes, int *iters)
{
	if (argc != 4) {
		fprintf(stderr, "usage: %s NBUF MIB ITERS\n", argv[0]);
		return 2;
	}
	*nbuf = atoi(argv[1]);
	*bytes = (size_t)atoi(argv[2]) << 20;
	*iters = atoi(argv[3]);
	return 0;
}

#endif
