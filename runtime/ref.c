/* runtime/ref.c — the reference loop: a model trained with every tensor in
 * host memory, no vmm and no scheduler, with the same layer ops run on a CPU
 * stream (host backend, DEV_HOST) and the reduction order the executor keeps:
 * per replica, microbatches in order, each forward through all layers, then
 * backward; replica gradients summed in rank order (dst += src, as the host
 * all-reduce); tied gradients added to their layer's at the update (with
 * clipping: every layer's ties and sum of squares first, then the updates,
 * as the NORM tasks do); losses
 * summed in double in (microbatch, position) order. In 2BW mode (PipeDream-
 * 2BW's delayed update) the passes read a second, older copy of the weights,
 * which becomes a copy of the newest just before the newest is updated. Transparency tests
 * compare the executor's losses and weights with these, bit for bit, and
 * bench-executor its speed: so the loop is lean too (activations allocated
 * once, the stream waited for once per microbatch).
 */
#include "runtime/internal.h"

#include <stdlib.h>
#include <string.h>

static void *xcalloc(uint64_t bytes)
{
	return calloc(1, bytes ? bytes : 1);
}

void rt_reference_close(struct rt_reference *r)
{
	if (!r)
		return;
	const struct rt_model *m = r->m;
	for (int l = 0; l < m->nlayers; l++) {
		free(r->params ? r->params[l] : NULL);
		free(r->shadow ? r->shadow[l] : NULL);
		free(r->optim ? r->optim[l] : NULL);
	}
	for (int k = 0; r->grads && k < r->nrep; k++) {
		for (int l = 0; r->grads[k] && l < m->nlayers; l++)
			free(r->grads[k][l]);
		free(r->grads[k]);
	}
	for (int l = 0; l < m->nlayers; l++) {
		free(r->stash ? r->stash[l] : NULL);
		free(r->outp ? r->outp[l] : NULL);
	}
	free(r->stash);
	free(r->outp);
	free(r->in);
	free(r->tg);
	free(r->work);
	free(r->dbuf[0]);
	free(r->dbuf[1]);
	free(r->norms);
	free(r->params);
	free(r->shadow);
	free(r->optim);
	free(r->grads);
	if (r->s && dev_stream_destroy(r->s) < 0) {
	}
	dev_close(r->dev);
	free(r);
}

int rt_reference_open(const struct rt_model *m, int nrep, int mb, uint64_t seed,
                      struct rt_reference **out)
{
	SP_CHECK_ARG(m && out && nrep >= 1 && mb >= 1, "rt_reference_open: bad arguments");
	SP_CHECK_ARG(m->batch % (nrep * mb) == 0,
	             "rt_reference_open: batch %d is not a multiple of %d replicas x microbatch %d",
	             m->batch, nrep, mb);
	int rc = 0;
	struct rt_reference *r = calloc(1, sizeof(*r));
	if (!r)
		return sp_error(-ENOMEM, "reference: out of memory");
	r->m = m;
	r->nrep = nrep;
	r->mb = mb;
	r->seed = seed;
	struct dev_config dc = {.backend = DEV_BACKEND_HOST, .ndevices = 1, .profile = ""};
	SP_CHECK_GOTO(dev_open(&dc, &r->dev), rc, fail);
	SP_CHECK_GOTO(dev_stream_create(r->dev, DEV_HOST, &r->s), rc, fail);
	r->params = calloc((size_t)m->nlayers, sizeof(void *));
	r->optim = calloc((size_t)m->nlayers, sizeof(float *));
	r->grads = calloc((size_t)nrep, sizeof(void **));
	if (!r->params || !r->optim || !r->grads) {
		rc = sp_error(-ENOMEM, "reference: tables");
		goto fail;
	}
	for (int k = 0; k < nrep; k++)
		if (!(r->grads[k] = calloc((size_t)m->nlayers, sizeof(void *)))) {
			rc = sp_error(-ENOMEM, "reference: tables");
			goto fail;
		}
	for (int l = 0; l < m->nlayers; l++) {
		const struct rt_layer *ly = &m->layers[l];
		r->params[l] = xcalloc(ly->param_bytes);
		r->optim[l] = xcalloc(ly->optim_bytes);
		if (!r->params[l] || !r->optim[l]) {
			rc = sp_error(-ENOMEM, "reference: layer %s", ly->name);
			goto fail;
		}
		for (int k = 0; k < nrep; k++)
			if (!(r->grads[k][l] = xcalloc(ly->grad_bytes))) {
				rc = sp_error(-ENOMEM, "reference: layer %s", ly->name);
				goto fail;
			}
		SP_CHECK_GOTO(rt_layer_init(m, l, r->params[l], seed), rc, fail);
		SP_CHECK_GOTO(rt_layer_init_optim(m, l, r->optim[l], seed), rc, fail);
	}
	uint64_t maxout = 0, maxwork = 0;
	r->stash = calloc((size_t)m->nlayers, sizeof(void *));
	r->outp = calloc((size_t)m->nlayers, sizeof(void *));
	if (!r->stash || !r->outp) {
		rc = sp_error(-ENOMEM, "reference: tables");
		goto fail;
	}
	for (int l = 0; l < m->nlayers; l++) {
		const struct rt_layer *ly = &m->layers[l];
		uint64_t w = ly->work_bytes + ly->work_per_sample * (uint64_t)mb;
		if (ly->out_per_sample * (uint64_t)mb > maxout)
			maxout = ly->out_per_sample * (uint64_t)mb;
		if (w > maxwork)
			maxwork = w;
		r->stash[l] = xcalloc(ly->stash_per_sample * (uint64_t)mb);
		r->outp[l] = xcalloc(ly->out_per_sample * (uint64_t)mb);
		if (!r->stash[l] || !r->outp[l]) {
			rc = sp_error(-ENOMEM, "reference: activations of layer %s", ly->name);
			goto fail;
		}
	}
	r->in = xcalloc(m->in_per_sample * (uint64_t)mb);
	r->tg = xcalloc(m->target_per_sample * (uint64_t)mb);
	r->work = xcalloc(maxwork);
	r->dbuf[0] = xcalloc(maxout);
	r->dbuf[1] = xcalloc(maxout);
	r->norms = xcalloc(((uint64_t)m->nlayers + KN_SUMSQ_PARTS) * sizeof(double));
	if (!r->in || !r->tg || !r->work || !r->dbuf[0] || !r->dbuf[1] || !r->norms) {
		rc = sp_error(-ENOMEM, "reference: activations");
		goto fail;
	}
	*out = r;
	return 0;
fail:
	rt_reference_close(r);
	return rc;
}

int rt_reference_set_2bw(struct rt_reference *r)
{
	SP_CHECK_ARG(r && !r->step && !r->shadow,
	             "rt_reference_set_2bw: needs a reference before its first step");
	const struct rt_model *m = r->m;
	if (!(r->shadow = calloc((size_t)m->nlayers, sizeof(void *))))
		return sp_error(-ENOMEM, "reference: tables");
	for (int l = 0; l < m->nlayers; l++) {
		uint64_t n = m->layers[l].param_bytes;
		if (!(r->shadow[l] = xcalloc(n)))
			return sp_error(-ENOMEM, "reference: the second version of layer %s",
			                m->layers[l].name);
		memcpy(r->shadow[l], r->params[l], n);
	}
	return 0;
}

int rt_reference_step(struct rt_reference *r, int iter, double *loss)
{
	SP_CHECK_ARG(r && loss, "rt_reference_step: NULL argument");
	const struct rt_model *m = r->m;
	int L = m->nlayers, mb = r->mb, per = m->batch / r->nrep;
	void **stash = r->stash, **outp = r->outp, *in = r->in, *tg = r->tg, *work = r->work;
	void *d0 = r->dbuf[0], *d1 = r->dbuf[1];
	void **wv = r->shadow ? r->shadow : r->params; /* the version the passes read */
	for (int k = 0; k < r->nrep; k++)
		for (int l = 0; l < L; l++)
			memset(r->grads[k][l], 0, m->layers[l].grad_bytes);
	float dloss = 1.0f / ((float)m->batch * (float)m->loss_floats);
	double sum = 0;
	for (int k = 0; k < r->nrep; k++) {
		for (int j = 0; j < per / mb; j++) {
			int s0 = k * per + j * mb;
			SP_CHECK(dev_stream_sync(r->s)); /* the last microbatch read in, tg */
			SP_CHECK(m->data(m, m->data_arg, iter, s0, mb, in, tg));
			const void *x = in;
			for (int l = 0; l < L; l++) {
				const struct rt_layer *ly = &m->layers[l];
				struct rt_layer_call c = {.s = r->s,
				                          .layer = ly,
				                          .B = mb,
				                          .params = wv[l],
				                          .grads = r->grads[k][l],
				                          .stash = stash[l],
				                          .work = work,
				                          .in = x,
				                          .out = outp[l],
				                          .targets = tg,
				                          .tied =
				                              ly->tied ? wv[ly->tied_layer] : NULL};
				SP_CHECK(ly->ops->forward(&c));
				x = outp[l];
			}
			void *dout = NULL;
			for (int l = L - 1; l >= 0; l--) {
				const struct rt_layer *ly = &m->layers[l];
				void *din = NULL;
				if (l > 0) {
					din = dout == d0 ? d1 : d0;
					SP_CHECK(dev_memset_async(r->s, din, DEV_HOST, 0,
					                          m->layers[l - 1].out_per_sample *
					                              (uint64_t)mb));
				}
				struct rt_layer_call c = {
				    .s = r->s,
				    .layer = ly,
				    .B = mb,
				    .params = wv[l],
				    .grads = r->grads[k][l],
				    .stash = stash[l],
				    .work = work,
				    .in = l ? outp[l - 1] : in,
				    .dout = dout,
				    .din = din,
				    .targets = tg,
				    .tied = ly->tied ? wv[ly->tied_layer] : NULL,
				    .tied_grad =
				        ly->tied ? (char *)r->grads[k][l] + ly->param_bytes : NULL,
				    .dloss = dloss};
				SP_CHECK(ly->ops->backward(&c));
				dout = din;
			}
			SP_CHECK(dev_stream_sync(r->s));
			const float *lo = outp[L - 1];
			for (int i = 0; i < mb * m->loss_floats; i++)
				sum += lo[i];
		}
	}
	/* replicas summed in rank order, ties added, then the update */
	for (int l = 0; l < L; l++)
		for (int k = 1; k < r->nrep; k++) {
			enum kn_dtype dt = rt_layer_dtype(&m->layers[l]);
			struct kn_grad_accumulate_args a = {
			    .dtype = dt,
			    .dst = r->grads[0][l],
			    .src = r->grads[k][l],
			    .N = (long)(m->layers[l].grad_bytes / kn_dtype_size(dt))};
			kn_grad_accumulate_cpu(&a);
		}
	r->step++;
	/* 2BW: the newest version W(t) becomes the one the next step's passes read;
	 * the update below makes W(t+1) from it with the gradient of W(t-1) */
	for (int l = 0; r->shadow && l < L; l++)
		memcpy(r->shadow[l], r->params[l], m->layers[l].param_bytes);
	const double *norms = NULL;
	if (m->opt.grad_clip > 0) {
		for (int l = 0; l < L; l++) {
			SP_CHECK(rt_layer_add_ties(r->s, m, l, r->grads[0]));
			SP_CHECK(rt_layer_norm(r->s, m, l, r->grads[0][l], r->norms));
		}
		norms = r->norms;
	}
	for (int l = 0; l < L; l++) {
		if (!norms)
			SP_CHECK(rt_layer_add_ties(r->s, m, l, r->grads[0]));
		SP_CHECK(rt_layer_update(r->s, m, l, r->params[l], r->grads[0][l], r->optim[l],
		                         r->step, norms));
	}
	SP_CHECK(dev_stream_sync(r->s));
	*loss = sum / ((double)m->batch * m->loss_floats);
	return 0;
}
