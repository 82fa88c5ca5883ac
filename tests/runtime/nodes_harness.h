/* tests/runtime/nodes_harness.h — several nodes in one process, for the tests
 * that hold multi-node runs to the reference (test_nodes_ref,
 * test_2bw_adv_nodes): an in-memory mailbox for rt_nodes, each node's final
 * state read after its run, and every node's state and losses checked
 * against the reference's bits (header-only). */
#ifndef SP_TESTS_RUNTIME_NODES_HARNESS_H
#define SP_TESTS_RUNTIME_NODES_HARNESS_H

#include "runtime/runtime.h"
#include "tests/test.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* ---- the mailbox: blocking, tagged, FIFO per (from, to, tag) ---- */
struct msg {
	int from, to, tag;
	size_t bytes;
	struct msg *next;
	unsigned char buf[];
};
static pthread_mutex_t mb_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t mb_cond = PTHREAD_COND_INITIALIZER;
static struct msg *mb_head, **mb_tail = &mb_head;

/* rt_nodes.send; arg points to the sender's rank */
static int mb_send(void *arg, int to, int tag, const void *buf, size_t bytes)
{
	struct msg *m = malloc(sizeof(*m) + bytes + 1);
	CHECK(m != NULL);
	*m = (struct msg){*(int *)arg, to, tag, bytes, NULL};
	memcpy(m->buf, buf, bytes);
	pthread_mutex_lock(&mb_lock);
	*mb_tail = m;
	mb_tail = &m->next;
	pthread_cond_broadcast(&mb_cond);
	pthread_mutex_unlock(&mb_lock);
	return 0;
}

/* rt_nodes.recv; arg points to the receiver's rank */
static int mb_recv(void *arg, int from, int tag, void *buf, size_t bytes)
{
	int me = *(int *)arg;
	pthread_mutex_lock(&mb_lock);
	for (;;) {
		for (struct msg **pp = &mb_head; *pp; pp = &(*pp)->next) {
			struct msg *m = *pp;
			if (m->to != me || m->from != from || m->tag != tag)
				continue;
			CHECK_MSG(m->bytes == bytes,
			          "node %d: tag %d from %d: %zu bytes sent, %zu asked", me, tag,
			          from, m->bytes, bytes);
			*pp = m->next;
			if (mb_tail == &m->next)
				mb_tail = pp;
			pthread_mutex_unlock(&mb_lock);
			memcpy(buf, m->buf, bytes);
			free(m);
			return 0;
		}
		pthread_cond_wait(&mb_cond, &mb_lock);
	}
}

/* ---- a node's final state ---- */
struct nodes_state {
	void **params, **prev, **optim; /* per layer; NULL: not held here (ZeRO-1) */
};

/* Reads every layer's RT_PARAMS, RT_PARAMS_PREV and RT_OPTIM from run; under
 * ZeRO-1 (zero) another node's are left NULL. */
static void nodes_read_state(struct rt_run *run, int nlayers, int zero, struct nodes_state *st)
{
	st->params = calloc((size_t)nlayers, sizeof(void *));
	st->prev = calloc((size_t)nlayers, sizeof(void *));
	st->optim = calloc((size_t)nlayers, sizeof(void *));
	CHECK(st->params && st->prev && st->optim);
	for (int l = 0; l < nlayers; l++) {
		static const enum rt_state which[3] = {RT_PARAMS, RT_PARAMS_PREV, RT_OPTIM};
		void **dst[3] = {&st->params[l], &st->prev[l], &st->optim[l]};
		for (int k = 0; k < 3; k++) {
			uint64_t b = rt_run_state_bytes(run, l, which[k]);
			*dst[k] = b ? malloc(b) : NULL;
			int rc = b ? rt_run_read_state(run, l, which[k], *dst[k]) : 0;
			if (rc == -ENODATA && zero) { /* another node's (ZeRO-1) */
				free(*dst[k]);
				*dst[k] = NULL;
			} else
				CHECK_OK(rc);
		}
	}
}

/* Every node's losses (loss[r][0..steps-1]) and state (st[r], freed here)
 * against the reference's: its losses rl, its parameters (bf16: the fp32
 * masters), under 2bw (two_bw) in fp32 the older version too, its optimizer
 * state; under ZeRO-1 (zero) exactly one node holds what it shards, else
 * every node. No messages may be left in the mailbox. */
static void nodes_check(const struct rt_reference *ref, const struct rt_model *ref_m, int two_bw,
                        int zero, int N, struct nodes_state *st, double *const *loss, int steps,
                        const double *rl, const char *what)
{
	CHECK_MSG(mb_head == NULL, "%s: messages sent and never received", what);
	int L = ref_m->nlayers;
	int *held = calloc((size_t)L, sizeof(int)), *held_o = calloc((size_t)L, sizeof(int));
	CHECK(held && held_o); /* nodes that could read each layer's */
	for (int r = 0; r < N; r++) {
		struct nodes_state *n = &st[r];
		for (int s = 0; s < steps; s++)
			CHECK_MSG(loss[r][s] == rl[s],
			          "%s: node %d step %d loss %.9g, reference %.9g", what, r, s,
			          loss[r][s], rl[s]);
		for (int l = 0; l < L; l++) {
			const struct rt_layer *ly = &ref_m->layers[l];
			const void *w = ly->master_bytes ? ref->optim[l] : ref->params[l];
			uint64_t pb = ly->master_bytes ? ly->master_bytes : ly->param_bytes;
			held[l] += n->params[l] != NULL;
			CHECK_MSG(!n->params[l] || !memcmp(n->params[l], w, pb),
			          "%s: node %d: layer %s's parameters", what, r, ly->name);
			if (two_bw && !ly->master_bytes) /* the version the next passes read */
				CHECK_MSG(n->prev[l] &&
				              !memcmp(n->prev[l], ref->shadow[l], ly->param_bytes),
				          "%s: node %d: layer %s's older version", what, r,
				          ly->name);
			held_o[l] += n->optim[l] != NULL;
			if (n->optim[l])
				CHECK_MSG(!memcmp(n->optim[l],
				                  (const char *)ref->optim[l] + ly->master_bytes,
				                  ly->optim_bytes - ly->master_bytes),
				          "%s: node %d: layer %s's optimizer state", what, r,
				          ly->name);
			free(n->params[l]);
			free(n->prev[l]);
			free(n->optim[l]);
		}
		free(n->params);
		free(n->prev);
		free(n->optim);
	}
	for (int l = 0; l < L; l++) { /* ZeRO-1: its owner; else every node */
		const struct rt_layer *ly = &ref_m->layers[l];
		CHECK_MSG(held[l] == (zero && ly->master_bytes ? 1 : N),
		          "%s: layer %s's parameters read on %d nodes", what, ly->name, held[l]);
		CHECK_MSG(ly->optim_bytes == ly->master_bytes || held_o[l] == (zero ? 1 : N),
		          "%s: layer %s's optimizer state read on %d nodes", what, ly->name,
		          held_o[l]);
	}
	free(held);
	free(held_o);
}

#endif
