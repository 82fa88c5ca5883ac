/* runtime/collective.c — all-reduce (in-place sum) over one buffer per device.
 *
 * cuda: NCCL, one communicator per device made once (ncclCommInitAll) and one
 * ncclAllReduce per device inside a group, each on that device's stream.
 * host: the emulated devices' memory is host memory, so one CPU kernel on
 * device 0's stream (after the other streams' work, through events) adds the
 * buffers in rank order ((b0 + b1) + b2 ...) and copies the sum back to every
 * buffer; the other streams wait for it. Deterministic, and bit-identical to a
 * loop that adds in rank order with kn_grad_accumulate.
 * model: no data; the ring's traffic, 2(N-1) steps in which every device sends
 * bytes/N to the next one over its peer link, each step after the previous
 * step's arrival, so virtual time sees the real cost.
 */
#include "runtime/internal.h"

#include "common/log.h"

#include <stdlib.h>
#include <string.h>

#if SPILL_HAVE_NCCL
#include <cuda_runtime_api.h>
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes" /* nccl.h's own declarations */
#include <nccl.h>
#pragma GCC diagnostic pop
#endif

struct coll {
	struct dev_event *ev[DEV_MAX]; /* per device: its stream's work so far */
	int nev;
#if SPILL_HAVE_NCCL
	ncclComm_t comm[DEV_MAX];
	int ncomm;
#endif
};

static int coll_get(struct rt_ctx *rt, int n, struct coll **out)
{
	struct coll *c = rt->coll;
	if (!c) {
		c = calloc(1, sizeof(*c));
		if (!c)
			return sp_error(-ENOMEM, "all-reduce: out of memory");
		rt->coll = c;
	}
	for (; c->nev < n; c->nev++)
		SP_CHECK(dev_event_create(rt->dev, &c->ev[c->nev]));
	*out = c;
	return 0;
}

void rt_collectives_close(struct rt_ctx *rt)
{
	struct coll *c = rt ? rt->coll : NULL;
	if (!c)
		return;
	for (int i = 0; i < c->nev; i++)
		if (dev_event_destroy(c->ev[i]) < 0)
			SP_WARN(RT, "all-reduce: %s", sp_last_error());
#if SPILL_HAVE_NCCL
	for (int i = 0; i < c->ncomm; i++)
		ncclCommDestroy(c->comm[i]);
#endif
	free(c);
	rt->coll = NULL;
}

/* ---- host: a CPU kernel over all the buffers ------------------------------------ */

struct host_sum_args {
	void *buf[DEV_MAX];
	int n;
	size_t count;
	enum kn_dtype dtype;
};

static void host_sum_cpu(const void *a)
{
	const struct host_sum_args *s = a;
	if (s->dtype == KN_BF16) { /* kn_grad_accumulate's bf16 rounding, rank order */
		for (int r = 1; r < s->n; r++) {
			struct kn_grad_accumulate_args g = {.dtype = KN_BF16,
			                                    .dst = s->buf[0],
			                                    .src = s->buf[r],
			                                    .N = (long)s->count};
			kn_grad_accumulate_cpu(&g);
		}
		for (int r = 1; r < s->n; r++)
			memcpy(s->buf[r], s->buf[0], s->count * 2);
		return;
	}
	float *dst = s->buf[0];
	for (int r = 1; r < s->n; r++) { /* the rank order of kn_grad_accumulate */
		const float *src = s->buf[r];
		for (size_t i = 0; i < s->count; i++)
			dst[i] += src[i];
	}
	for (int r = 1; r < s->n; r++)
		memcpy(s->buf[r], dst, s->count * sizeof(float));
}

static const struct dev_kernel host_sum_kernel = {"allreduce_host", host_sum_cpu, NULL};

static int allreduce_host(struct rt_ctx *rt, struct coll *c, int n, void *const *buf,
                          struct dev_stream *const *s, size_t count, enum kn_dtype dtype)
{
	struct host_sum_args a = {.n = n, .count = count, .dtype = dtype};
	for (int r = 0; r < n; r++) {
		a.buf[r] = buf[r];
		if (r) { /* device 0's stream waits for the others' work */
			SP_CHECK(dev_event_record(c->ev[r], s[r]));
			SP_CHECK(dev_stream_wait_event(s[0], c->ev[r]));
		}
	}
	double bytes = (double)count * kn_dtype_size(dtype);
	SP_CHECK(dev_launch(s[0], &host_sum_kernel, &a, sizeof(a),
	                    (struct dev_cost){(double)count * (n - 1), bytes * 2 * n, 0}));
	SP_CHECK(dev_event_record(c->ev[0], s[0]));
	for (int r = 1; r < n; r++)
		SP_CHECK(dev_stream_wait_event(s[r], c->ev[0]));
	return 0;
}

/* ---- model: the ring's traffic ------------------------------------------------------ */

static int allreduce_model(struct rt_ctx *rt, struct coll *c, int n, void *const *buf,
                           struct dev_stream *const *s, size_t count, enum kn_dtype dtype)
{
	size_t bytes = count * kn_dtype_size(dtype), chunk = (bytes + (size_t)n - 1) / (size_t)n;
	if (!chunk)
		return 0;
	for (int step = 0; step < 2 * (n - 1); step++) {
		for (int r = 0; r < n; r++) { /* each device's previous arrival */
			SP_CHECK(dev_event_record(c->ev[r], s[r]));
		}
		for (int r = 0; r < n; r++) {
			int from = (r + n - 1) % n;
			SP_CHECK(dev_stream_wait_event(s[r], c->ev[from]));
			size_t off = (size_t)((r + step) % n) * chunk;
			size_t len = off + chunk <= bytes ? chunk : bytes - off;
			if (off >= bytes || !len)
				continue;
			/* device `from` sends a chunk into device r's buffer */
			SP_CHECK(dev_memcpy_async(s[r], (char *)buf[r] + off, r,
			                          (const char *)buf[from] + off, from, len));
			rt->st.collective_p2p += len;
		}
	}
	return 0;
}

/* ---- cuda: NCCL ------------------------------------------------------------------- */

#if SPILL_HAVE_NCCL
static int allreduce_nccl(struct rt_ctx *rt, struct coll *c, int n, void *const *buf,
                          struct dev_stream *const *s, size_t count, enum kn_dtype dtype)
{
	if (c->ncomm != n) {
		for (int i = 0; i < c->ncomm; i++)
			ncclCommDestroy(c->comm[i]);
		c->ncomm = 0;
		int devs[DEV_MAX];
		for (int i = 0; i < n; i++)
			devs[i] = i;
		ncclResult_t r = ncclCommInitAll(c->comm, n, devs);
		if (r != ncclSuccess)
			return sp_error(-EIO, "all-reduce: ncclCommInitAll over %d GPUs: %s", n,
			                ncclGetErrorString(r));
		c->ncomm = n;
	}
	ncclResult_t r = ncclGroupStart();
	for (int i = 0; i < n && r == ncclSuccess; i++)
		r = ncclAllReduce(buf[i], buf[i], count,
		                  dtype == KN_BF16 ? ncclBfloat16 : ncclFloat, ncclSum, c->comm[i],
		                  (cudaStream_t)dev_stream_native(s[i]));
	ncclResult_t r2 = ncclGroupEnd();
	if (r == ncclSuccess)
		r = r2;
	if (r != ncclSuccess)
		return sp_error(-EIO, "all-reduce: ncclAllReduce of %zu elements on %d GPUs: %s",
		                count, n, ncclGetErrorString(r));
	rt->st.collective_p2p += 2 * count * kn_dtype_size(dtype) * (size_t)(n - 1);
	return 0;
}
#endif

int rt_allreduce_sum(struct rt_ctx *rt, int n, void *const *buf, struct dev_stream *const *s,
                     size_t count)
{
	return rt_allreduce_sum_dtype(rt, n, buf, s, count, KN_F32);
}

int rt_allreduce_sum_dtype(struct rt_ctx *rt, int n, void *const *buf, struct dev_stream *const *s,
                           size_t count, enum kn_dtype dtype)
{
	SP_CHECK_ARG(rt && buf && s && n >= 1 && n <= rt->ndev,
	             "rt_allreduce_sum: bad arguments (n = %d)", n);
	if (n == 1 || !count)
		return 0;
	struct coll *c = NULL;
	SP_CHECK(coll_get(rt, n, &c));
	switch (dev_backend(rt->dev)) {
	case DEV_BACKEND_HOST:
		rt->st.collective_p2p += 2 * count * kn_dtype_size(dtype) * (size_t)(n - 1);
		return allreduce_host(rt, c, n, buf, s, count, dtype);
	case DEV_BACKEND_MODEL: return allreduce_model(rt, c, n, buf, s, count, dtype);
	case DEV_BACKEND_CUDA:
#if SPILL_HAVE_NCCL
		return allreduce_nccl(rt, c, n, buf, s, count, dtype);
#else
		return sp_error(-ENOTSUP,
		                "all-reduce on %d GPUs needs NCCL (spill was built without it)", n);
#endif
	case DEV_BACKEND_DRIVER: break; /* one device */
	}
	return sp_error(-EINVAL, "all-reduce: unknown backend");
}
