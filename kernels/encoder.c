/* kernels/encoder.c — token + position embedding, CPU.
 * out (B,T,C) = wte[inp] + wpe[t]; backward scatters serially over (b,t), so
 * repeated tokens accumulate in a fixed order. A token outside [0, V) (inputs
 * a failed copy never brought: the host backend runs the kernels after it)
 * gives a NaN row and no gradient, not a read or write out of bounds. */
#include "kernels/internal.h"

#include <math.h>

void kn_encoder_forward_cpu(const struct kn_encoder_fwd_args *a)
{
	if (a->dtype == KN_BF16) {
		kn_encoder_forward_cpu_bf16(a);
		return;
	}
	float *out = a->out;
	const float *wte = a->wte, *wpe = a->wpe;
	int B = a->B, T = a->T, C = a->C;
	for (int b = 0; b < B; b++) {
		for (int t = 0; t < T; t++) {
			float *o = out + ((size_t)b * T + t) * C;
			int ix = a->inp[b * T + t];
			const float *we = wte + (size_t)ix * C;
			const float *pe = wpe + (size_t)t * C;
			for (int i = 0; i < C; i++)
				o[i] = ix >= 0 && ix < a->V ? we[i] + pe[i] : NAN;
		}
	}
}

void kn_encoder_backward_cpu(const struct kn_encoder_bwd_args *a)
{
	if (a->dtype == KN_BF16) {
		kn_encoder_backward_cpu_bf16(a);
		return;
	}
	float *dwte = a->dwte, *dwpe = a->dwpe;
	const float *dout = a->dout;
	int B = a->B, T = a->T, C = a->C;
	for (int b = 0; b < B; b++) {
		for (int t = 0; t < T; t++) {
			const float *d = dout + ((size_t)b * T + t) * C;
			int ix = a->inp[b * T + t];
			float *dwe = ix >= 0 && ix < a->V ? dwte + (size_t)ix * C : NULL;
			float *dpe = dwpe + (size_t)t * C;
			for (int i = 0; i < C; i++) {
				if (dwe)
					dwe[i] += d[i];
				dpe[i] += d[i];
			}
		}
	}
}
