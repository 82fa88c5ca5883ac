/* tests/shim/cuprog.h — the kernel the shim's test programs share: y = y/2 +
 * a*x over n floats, a host function registered with the emulated driver
 * (tests/shim/fakecu.h). */
#ifndef SP_TESTS_SHIM_CUPROG_H
#define SP_TESTS_SHIM_CUPROG_H

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

#endif
