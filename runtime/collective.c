/* runtime/collective.c — all-reduce (in-place sum) over one buffer per device.
 *
 * cuda: NCCL, one communicator per device made once (ncclCommInitAll; across
 * nodes ncclCommInitRank, the id sent from node 0) and one ncclAllReduce per
 * device inside a group, each on that device's stream.
 * host: the emulated devices' memory is host memory, so one CPU kernel on
 * device 0's stream (after the other streams' work, through events) adds the
 * buffers in rank order ((b0 + b1) + b2 ...) and copies the sum back to every
 * buffer; the other streams wait for it. Deterministic, and bit-identical to a
 * loop that adds in rank order with kn_grad_accumulate. Across nodes the
 * kernel is a link of a chain through them (host_sum_nodes).
 * model: no data; the ring's traffic, 2(N-1) steps in which every device sends
 * bytes/N to the next one over its peer link, each step after the previous
 * step's arrival, so virtual time sees the real cost.
 */
#include "runtime/internal.h"

#include "common/log.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
	struct nccl_set {
		int key, n; /* first device (-1: the set 0..n-1), members here */
		ncclComm_t comm[DEV_MAX];
	} set[DEV_MAX + 1];
	int nset;
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
	for (int k = 0; k < c->nset; k++)
		for (int i = 0; i < c->set[k].n; i++)
			ncclCommDestroy(c->set[k].comm[i]);
#endif
	free(c);
	rt->coll = NULL;
}

/* ---- nodes --------------------------------------------------------------------- */

/* Messages of the chain: chunks of this many bytes, so node r adds chunk c
 * while node r+1 adds chunk c-1. */
#define NODE_CHUNK  ((size_t)1 << 20)
#define TAG_LOSS    16100 /* rt_nodes_sum_floats */
#define TAG_NCCL_ID 16200 /* NCCL unique ids, from node 0 */

void rt_set_nodes(struct rt_ctx *rt, const struct rt_nodes *nodes)
{
	if (rt)
		rt->nodes = nodes && nodes->size >= 1 ? nodes : NULL;
}

int rt_node_count(const struct rt_ctx *rt)
{
	return rt && rt->nodes ? rt->nodes->size : 1;
}

int rt_node_rank(const struct rt_ctx *rt)
{
	return rt && rt->nodes ? rt->nodes->rank : 0;
}

/* A transport failure ends the process (struct rt_nodes): the run lost a node. */
static void node_io(const struct rt_nodes *nd, int rc, const char *what, int peer)
{
	if (rc == 0)
		return;
	fprintf(stderr, "spill: node %d: %s node %d failed (%d); the run cannot go on\n", nd->rank,
	        what, peer, rc);
	fflush(stderr);
	_exit(1);
}

static void node_send(const struct rt_nodes *nd, int to, int tag, const void *buf, size_t bytes,
                      uint64_t *sent)
{
	node_io(nd, nd->send(nd->arg, to, tag, buf, bytes), "sending to", to);
	__atomic_add_fetch(sent, bytes, __ATOMIC_RELAXED);
}

static void node_recv(const struct rt_nodes *nd, int from, int tag, void *buf, size_t bytes)
{
	node_io(nd, nd->recv(nd->arg, from, tag, buf, bytes), "receiving from", from);
}

int rt_nodes_sum_floats(struct rt_ctx *rt, const float *x, size_t n, double *sum)
{
	SP_CHECK_ARG(rt && sum && (x || !n), "rt_nodes_sum_floats: NULL argument");
	const struct rt_nodes *nd = rt->nodes;
	double acc = 0;
	if (nd && !nd->send) { /* simulated: no data */
		*sum = NAN;
		return 0;
	}
	if (nd && nd->rank > 0)
		node_recv(nd, nd->rank - 1, 2 * TAG_LOSS, &acc, sizeof(acc));
	for (size_t i = 0; i < n; i++)
		acc += x[i];
	if (nd && nd->rank < nd->size - 1) {
		node_send(nd, nd->rank + 1, 2 * TAG_LOSS, &acc, sizeof(acc), &rt->st.internode);
		node_recv(nd, nd->size - 1, 2 * TAG_LOSS + 1, &acc, sizeof(acc));
	} else if (nd) {
		for (int r = 0; r < nd->size - 1; r++)
			node_send(nd, r, 2 * TAG_LOSS + 1, &acc, sizeof(acc), &rt->st.internode);
	}
	*sum = acc;
	return 0;
}

/* ---- host: a CPU kernel over all the buffers ------------------------------------ */

struct host_sum_args {
	void *buf[DEV_MAX];
	int n;
	size_t count;
	enum kn_dtype dtype;
	const struct rt_nodes *nodes; /* NULL: this node's buffers only */
	int tag;
	uint64_t *sent;
};

/* dst += src over count elements, kn_grad_accumulate's rounding in bf16 */
static void add_into(void *dst, const void *src, size_t count, enum kn_dtype dtype)
{
	if (dtype == KN_BF16) {
		struct kn_grad_accumulate_args g = {
		    .dtype = KN_BF16, .dst = dst, .src = src, .N = (long)count};
		kn_grad_accumulate_cpu(&g);
		return;
	}
	float *d = dst;
	const float *f = src;
	for (size_t i = 0; i < count; i++)
		d[i] += f[i];
}

/* With other nodes: node r receives each chunk's sum over the nodes before it,
 * adds its own buffers in rank order and passes it on; the last node's total
 * goes back down the chain. Node 0 adds into its buffer 0 as one node does. */
static void host_sum_nodes(const struct host_sum_args *s)
{
	const struct rt_nodes *nd = s->nodes;
	size_t es = kn_dtype_size(s->dtype), per = NODE_CHUNK / es;
	int rank = nd->rank, last = nd->size - 1;
	char *tmp = NULL;
	if (rank > 0 && !(tmp = malloc(NODE_CHUNK)))
		node_io(nd, -ENOMEM, "a buffer for the sum from", rank - 1);
	for (size_t off = 0; off < s->count; off += per) {
		size_t len = s->count - off < per ? s->count - off : per;
		char *dst = (char *)s->buf[0] + off * es;
		if (rank > 0) {
			node_recv(nd, rank - 1, 2 * s->tag, tmp, len * es);
			for (int r = 0; r < s->n; r++)
				add_into(tmp, (const char *)s->buf[r] + off * es, len, s->dtype);
			memcpy(dst, tmp, len * es);
		} else {
			for (int r = 1; r < s->n; r++)
				add_into(dst, (const char *)s->buf[r] + off * es, len, s->dtype);
		}
		if (rank < last)
			node_send(nd, rank + 1, 2 * s->tag, dst, len * es, s->sent);
	}
	free(tmp);
	for (size_t off = 0; off < s->count; off += per) {
		size_t len = s->count - off < per ? s->count - off : per;
		char *dst = (char *)s->buf[0] + off * es;
		if (rank < last)
			node_recv(nd, rank + 1, 2 * s->tag + 1, dst, len * es);
		if (rank > 0)
			node_send(nd, rank - 1, 2 * s->tag + 1, dst, len * es, s->sent);
	}
}

static void host_sum_cpu(const void *a)
{
	const struct host_sum_args *s = a;
	if (s->nodes)
		host_sum_nodes(s);
	else /* the rank order of kn_grad_accumulate */
		for (int r = 1; r < s->n; r++)
			add_into(s->buf[0], s->buf[r], s->count, s->dtype);
	for (int r = 1; r < s->n; r++)
		memcpy(s->buf[r], s->buf[0], s->count * kn_dtype_size(s->dtype));
}

static const struct dev_kernel host_sum_kernel = {"allreduce_host", host_sum_cpu, NULL};

static int allreduce_host(struct rt_ctx *rt, struct coll *c, int n, void *const *buf,
                          struct dev_stream *const *s, size_t count, enum kn_dtype dtype, int tag)
{
	struct host_sum_args a = {.n = n,
	                          .count = count,
	                          .dtype = dtype,
	                          .nodes = rt->nodes,
	                          .tag = tag,
	                          .sent = &rt->st.internode};
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

/* ZeRO-1's weights: a chain from node root through the others in rank order
 * (root, root + 1, ...), in chunks; then this node's members get member 0's. */
struct host_bcast_args {
	void *buf[DEV_MAX];
	int n;
	size_t bytes;
	const struct rt_nodes *nodes;
	int root, tag;
	uint64_t *sent;
};

static void host_bcast_cpu(const void *a)
{
	const struct host_bcast_args *s = a;
	const struct rt_nodes *nd = s->nodes;
	if (nd && nd->size > 1) {
		int N = nd->size, pos = (nd->rank - s->root + N) % N;
		int prev = (nd->rank - 1 + N) % N, next = (nd->rank + 1) % N;
		for (size_t off = 0; off < s->bytes; off += NODE_CHUNK) {
			size_t len = s->bytes - off < NODE_CHUNK ? s->bytes - off : NODE_CHUNK;
			char *p = (char *)s->buf[0] + off;
			if (pos > 0)
				node_recv(nd, prev, 2 * s->tag, p, len);
			if (pos < N - 1)
				node_send(nd, next, 2 * s->tag, p, len, s->sent);
		}
	}
	for (int r = 1; r < s->n; r++)
		memcpy(s->buf[r], s->buf[0], s->bytes);
}

static const struct dev_kernel host_bcast_kernel = {"bcast_host", host_bcast_cpu, NULL};

/* ---- model: the ring's traffic ------------------------------------------------------ */

static int allreduce_model(struct rt_ctx *rt, struct coll *c, int n, void *const *buf,
                           struct dev_stream *const *s, size_t count, enum kn_dtype dtype)
{
	size_t bytes = count * kn_dtype_size(dtype), chunk = (bytes + (size_t)n - 1) / (size_t)n;
	if (!chunk)
		return 0;
	for (int step = 0; n > 1 && step < 2 * (n - 1); step++) {
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
	if (!rt->nodes)
		return 0;
	/* the chain through the nodes as a node in its middle sees it: every byte
	 * in and out, each way, plus the pipeline's fill (a chunk and a message's
	 * latency per hop, each way) */
	int N = rt->nodes->size;
	double bw = dev_net_bw(rt->dev), lat = dev_net_latency(rt->dev);
	double first = (double)(bytes < NODE_CHUNK ? bytes : NODE_CHUNK);
	double work = 2.0 * (double)bytes + 2.0 * (N - 1) * (first + lat * bw);
	for (int r = 1; r < n; r++) {
		SP_CHECK(dev_event_record(c->ev[r], s[r]));
		SP_CHECK(dev_stream_wait_event(s[0], c->ev[r]));
	}
	SP_CHECK(dev_net_io_async(s[0], (size_t)work));
	rt->st.internode += 2 * (uint64_t)bytes;
	SP_CHECK(dev_event_record(c->ev[0], s[0]));
	for (int r = 1; r < n; r++)
		SP_CHECK(dev_stream_wait_event(s[r], c->ev[0]));
	return 0;
}

/* ---- cuda: NCCL ------------------------------------------------------------------- */

#if SPILL_HAVE_NCCL
static int nccl_err(ncclResult_t r, const char *what, int n)
{
	return sp_error(-EIO, "all-reduce: %s (%d GPUs here): %s", what, n, ncclGetErrorString(r));
}

/* One node: ncclCommInitAll over devices 0..n-1. Several: one communicator
 * per member across the nodes (n GPUs here, node-major ranks), its unique id
 * made by node 0 and sent down through the transport. A communicator is
 * keyed by its first device (n > 1: the data-parallel set 0..n-1; n = 1: one
 * per device, for pipeline plans); every node makes them in the same order,
 * all the ones of a plan at its first all-reduce (ncclCommInitRank blocks
 * until every node joins, so two made in different orders would deadlock). */
static int nccl_comms(struct rt_ctx *rt, struct coll *c, int n, const int *dev)
{
	const struct rt_nodes *nd = rt->nodes;
	int key = n > 1 ? -1 : dev[0];
	for (int i = 0; i < c->nset; i++)
		if (c->set[i].key == key && c->set[i].n == n)
			return i;
	if (!nd) { /* one set over devices 0..n-1, made again for another n */
		for (int k = 0; k < c->nset; k++)
			for (int i = 0; i < c->set[k].n; i++)
				ncclCommDestroy(c->set[k].comm[i]);
		c->nset = 0;
		int devs[DEV_MAX];
		for (int i = 0; i < n; i++)
			devs[i] = dev[i];
		c->set[0] = (struct nccl_set){.key = key, .n = n, .comm = {0}};
		ncclResult_t r = ncclCommInitAll(c->set[0].comm, n, devs);
		if (r != ncclSuccess)
			return nccl_err(r, "ncclCommInitAll", n);
		c->nset = 1;
		return 0;
	}
	/* the sets this plan uses: {0..n-1}, or one per device */
	int nmake = n > 1 ? 1 : rt->ndev, first = c->nset;
	SP_CHECK_ARG(first + nmake <= (int)SP_ARRAY_SIZE(c->set), "all-reduce: too many NCCL sets");
	for (int k = 0; k < nmake; k++) {
		ncclUniqueId id;
		if (nd->rank == 0) {
			ncclResult_t r = ncclGetUniqueId(&id);
			if (r != ncclSuccess)
				return nccl_err(r, "ncclGetUniqueId", n);
			for (int p = 1; p < nd->size; p++)
				node_send(nd, p, 2 * TAG_NCCL_ID, &id, sizeof(id),
				          &rt->st.internode);
		} else {
			node_recv(nd, 0, 2 * TAG_NCCL_ID, &id, sizeof(id));
		}
		struct nccl_set *st = &c->set[first + k];
		*st = (struct nccl_set){.key = n > 1 ? -1 : k, .n = n, .comm = {0}};
		ncclResult_t r = ncclGroupStart();
		for (int i = 0; i < n && r == ncclSuccess; i++) {
			cudaSetDevice(n > 1 ? dev[i] : k);
			r = ncclCommInitRank(&st->comm[i], nd->size * n, id, nd->rank * n + i);
		}
		ncclResult_t r2 = ncclGroupEnd();
		if (r == ncclSuccess)
			r = r2;
		if (r != ncclSuccess)
			return nccl_err(r, "ncclCommInitRank across the nodes", n);
		c->nset++;
	}
	for (int i = first; i < c->nset; i++)
		if (c->set[i].key == key && c->set[i].n == n)
			return i;
	return sp_error(-EINVAL, "all-reduce: no NCCL set for device %d", dev[0]);
}

static int allreduce_nccl(struct rt_ctx *rt, struct coll *c, int n, const int *dev,
                          void *const *buf, struct dev_stream *const *s, size_t count,
                          enum kn_dtype dtype)
{
	int k = nccl_comms(rt, c, n, dev);
	if (k < 0)
		return k;
	ncclResult_t r = ncclGroupStart();
	for (int i = 0; i < n && r == ncclSuccess; i++)
		r = ncclAllReduce(buf[i], buf[i], count,
		                  dtype == KN_BF16 ? ncclBfloat16 : ncclFloat, ncclSum,
		                  c->set[k].comm[i], (cudaStream_t)dev_stream_native(s[i]));
	ncclResult_t r2 = ncclGroupEnd();
	if (r == ncclSuccess)
		r = r2;
	if (r != ncclSuccess)
		return nccl_err(r, "ncclAllReduce", n);
	size_t bytes = count * kn_dtype_size(dtype);
	rt->st.collective_p2p += 2 * bytes * (size_t)(n - 1);
	if (rt->nodes) /* the ring across the nodes: what leaves this node */
		rt->st.internode +=
		    2 * bytes * (size_t)(rt->nodes->size - 1) / (size_t)rt->nodes->size;
	return 0;
}
#endif

int rt_bcast_nodes(struct rt_ctx *rt, int n, const int *dev, void *const *buf,
                   struct dev_stream *const *s, size_t bytes, int root, int tag)
{
	SP_CHECK_ARG(rt && buf && s && n >= 1 && n <= rt->ndev && tag >= 0 && tag <= 16000 &&
	                 root >= 0 && root < rt_node_count(rt),
	             "rt_bcast_nodes: bad arguments (n = %d, root %d, tag %d)", n, root, tag);
	if ((n == 1 && !rt->nodes) || !bytes)
		return 0;
	struct coll *c = NULL;
	SP_CHECK(coll_get(rt, n, &c));
	int devs[DEV_MAX];
	for (int i = 0; i < n; i++)
		devs[i] = dev ? dev[i] : i;
	int N = rt_node_count(rt);
	switch (dev_backend(rt->dev)) {
	case DEV_BACKEND_HOST: {
		SP_CHECK_ARG(!rt->nodes || rt->nodes->send,
		             "broadcast: several nodes on the host backend need a transport");
		struct host_bcast_args a = {.n = n,
		                            .bytes = bytes,
		                            .nodes = rt->nodes,
		                            .root = root,
		                            .tag = tag,
		                            .sent = &rt->st.internode};
		for (int r = 0; r < n; r++) {
			a.buf[r] = buf[r];
			if (r) {
				SP_CHECK(dev_event_record(c->ev[r], s[r]));
				SP_CHECK(dev_stream_wait_event(s[0], c->ev[r]));
			}
		}
		SP_CHECK(dev_launch(s[0], &host_bcast_kernel, &a, sizeof(a),
		                    (struct dev_cost){0, (double)bytes * n, 0}));
		SP_CHECK(dev_event_record(c->ev[0], s[0]));
		for (int r = 1; r < n; r++)
			SP_CHECK(dev_stream_wait_event(s[r], c->ev[0]));
		rt->st.collective_p2p += bytes * (size_t)(n - 1);
		return 0;
	}
	case DEV_BACKEND_MODEL:
		for (int r = 1; r < n; r++) {
			SP_CHECK(dev_event_record(c->ev[r], s[r]));
			SP_CHECK(dev_stream_wait_event(s[0], c->ev[r]));
		}
		if (rt->nodes && N > 1) { /* a node in the chain's middle: in and out */
			double bw = dev_net_bw(rt->dev), lat = dev_net_latency(rt->dev);
			double first = (double)(bytes < NODE_CHUNK ? bytes : NODE_CHUNK);
			SP_CHECK(dev_net_io_async(
			    s[0], (size_t)((double)bytes + (N - 1) * (first + lat * bw))));
			rt->st.internode += bytes;
		}
		SP_CHECK(dev_event_record(c->ev[0], s[0]));
		for (int r = 1; r < n; r++) { /* member 0's bytes to the others */
			SP_CHECK(dev_stream_wait_event(s[r], c->ev[0]));
			SP_CHECK(dev_memcpy_async(s[r], buf[r], devs[r], buf[0], devs[0], bytes));
			rt->st.collective_p2p += bytes;
		}
		return 0;
	case DEV_BACKEND_CUDA: {
#if SPILL_HAVE_NCCL
		int k = nccl_comms(rt, c, n, devs);
		if (k < 0)
			return k;
		int rroot = root * n; /* the owner's member 0 */
		ncclResult_t r = ncclGroupStart();
		for (int i = 0; i < n && r == ncclSuccess; i++)
			r = ncclBroadcast(buf[i], buf[i], bytes, ncclUint8, rroot,
			                  c->set[k].comm[i], (cudaStream_t)dev_stream_native(s[i]));
		ncclResult_t r2 = ncclGroupEnd();
		if (r == ncclSuccess)
			r = r2;
		if (r != ncclSuccess)
			return nccl_err(r, "ncclBroadcast", n);
		rt->st.collective_p2p += bytes * (size_t)(n - 1);
		if (rt->nodes && rt->nodes->rank == root)
			rt->st.internode += bytes;
		return 0;
#else
		return sp_error(-ENOTSUP, "broadcast on %d GPUs needs NCCL", n);
#endif
	}
	case DEV_BACKEND_DRIVER: break;
	}
	return sp_error(-EINVAL, "broadcast: unknown backend");
}

int rt_allreduce_sum(struct rt_ctx *rt, int n, void *const *buf, struct dev_stream *const *s,
                     size_t count)
{
	return rt_allreduce_sum_nodes(rt, n, NULL, buf, s, count, KN_F32, 0);
}

int rt_allreduce_sum_dtype(struct rt_ctx *rt, int n, void *const *buf, struct dev_stream *const *s,
                           size_t count, enum kn_dtype dtype)
{
	return rt_allreduce_sum_nodes(rt, n, NULL, buf, s, count, dtype, 0);
}

int rt_allreduce_sum_nodes(struct rt_ctx *rt, int n, const int *dev, void *const *buf,
                           struct dev_stream *const *s, size_t count, enum kn_dtype dtype, int tag)
{
	SP_CHECK_ARG(rt && buf && s && n >= 1 && n <= rt->ndev && tag >= 0 && tag <= 16000,
	             "rt_allreduce_sum: bad arguments (n = %d, tag %d)", n, tag);
	int devs[DEV_MAX];
	for (int i = 0; i < n; i++)
		devs[i] = dev ? dev[i] : i;
	if ((n == 1 && !rt->nodes) || !count)
		return 0;
	struct coll *c = NULL;
	SP_CHECK(coll_get(rt, n, &c));
	switch (dev_backend(rt->dev)) {
	case DEV_BACKEND_HOST:
		rt->st.collective_p2p += 2 * count * kn_dtype_size(dtype) * (size_t)(n - 1);
		SP_CHECK_ARG(!rt->nodes || rt->nodes->send,
		             "all-reduce: several nodes on the host backend need a transport");
		return allreduce_host(rt, c, n, buf, s, count, dtype, tag);
	case DEV_BACKEND_MODEL: return allreduce_model(rt, c, n, buf, s, count, dtype);
	case DEV_BACKEND_CUDA:
#if SPILL_HAVE_NCCL
		return allreduce_nccl(rt, c, n, devs, buf, s, count, dtype);
#else
		return sp_error(-ENOTSUP,
		                "all-reduce on %d GPUs needs NCCL (spill was built without it)", n);
#endif
	case DEV_BACKEND_DRIVER: break; /* one device */
	}
	return sp_error(-EINVAL, "all-reduce: unknown backend");
}
