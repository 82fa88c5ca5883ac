/* kernels/crossentropy.c — softmax cross-entropy over V, CPU.
 * loss = logsumexp(logits) - logits[target] (sums in double, index order);
 * probs are kept for backward: dlogits += (probs - onehot) * dloss. */
#include "kernels/internal.h"

#include <math.h>

void kn_crossentropy_forward_cpu(const struct kn_crossentropy_fwd_args *a)
{
	if (a->dtype == KN_BF16) {
		kn_crossentropy_forward_cpu_bf16(a);
		return;
	}
	int V = a->V;
	size_t rows = (size_t)a->B * a->T;
	for (size_t r = 0; r < rows; r++) {
		const float *x = (const float *)a->logits + r * V;
		float *p = (float *)a->probs + r * V;
		float mx = x[0];
		for (int i = 1; i < V; i++)
			mx = x[i] > mx ? x[i] : mx;
		double sum = 0.0;
		for (int i = 0; i < V; i++) {
			p[i] = expf(x[i] - mx);
			sum += p[i];
		}
		float inv = (float)(1.0 / sum);
		for (int i = 0; i < V; i++)
			p[i] *= inv;
		int tgt = a->targets[r]; /* out of range: see encoder.c */
		a->losses[r] =
		    tgt >= 0 && tgt < V ? (float)(log(sum) + (double)mx - (double)x[tgt]) : NAN;
	}
}

void kn_crossentropy_backward_cpu(const struct kn_crossentropy_bwd_args *a)
{
	if (a->dtype == KN_BF16) {
		kn_crossentropy_backward_cpu_bf16(a);
		return;
	}
	int V = a->V;
	size_t rows = (size_t)a->B * a->T;
	for (size_t r = 0; r < rows; r++) {
		const float *p = (const float *)a->probs + r * V;
		float *d = (float *)a->dlogits + r * V;
		int tgt = a->targets[r];
		for (int i = 0; i < V; i++)
			d[i] += (p[i] - (i == tgt ? 1.0f : 0.0f)) * a->dloss;
	}
}
