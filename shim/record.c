/* shim/record.c — the launch recorder: finds the program's repeating iteration
 * and turns it into Belady hints.
 *
 * Training repeats: the same kernels on the same buffers, iteration after
 * iteration. Every operation gets a signature (its kernel and the base
 * addresses it touches). When a signature recurs p operations after its last
 * occurrence, p is a candidate period; once p operations in a row matched the
 * operations p before them, the last p operations are the iteration. From then
 * on the next use of an allocation is known: its next position in the
 * iteration. Each operation sets the hint of the allocations it touched to
 * that logical time (so the vmm's Belady evicts the allocation needed
 * farthest in the future) and names the allocations of the next few
 * operations for prefetching. An operation that does not match the iteration
 * (an evaluation step, a new shape) drops the hints back to LRU and recording
 * starts again. Allocations are keyed by base address, so a program that frees
 * and reallocates the same buffers each iteration still repeats. Without a vmm
 * (the uvm-prefetch baseline, mode.c) it only names what comes next.
 */
#include "shim/internal.h"

#include <stdlib.h>
#include <string.h>

#define REC_MAX_OPS  (1u << 20)
#define REC_MAX_KEYS (1u << 23)

struct keypos {
	uint64_t key; /* 0 = empty */
	uint64_t obj; /* the latest object at that address */
	uint32_t first, n;
};

struct shim_rec {
	int belady, prefetch;
	uint64_t t; /* operations seen: the logical clock of the hints */
	/* recording: per operation its signature and its touches */
	uint64_t *sig;
	uint32_t *start; /* into keys/objs; start[n] = nkeys */
	uint64_t *keys, *objs;
	size_t n, nkeys, cap, cap_keys;
	/* last index + 1 of each signature */
	uint64_t *last_sig, *last_idx;
	size_t cap_last, nlast;
	/* a candidate period */
	uint64_t cand, matched;
	/* the iteration, once confirmed */
	int confirmed;
	uint64_t period, pos, cycles;
	uint64_t last_period; /* the latest iteration found, for the report */
	uint64_t *csig;
	uint32_t *cstart;
	uint64_t *ckeys;
	struct keypos *kp;
	size_t cap_kp;
	uint32_t *kpos; /* positions, grouped per key */
};

struct shim_rec *shim_rec_new(int belady)
{
	struct shim_rec *r = calloc(1, sizeof(*r));
	if (!r)
		return NULL;
	r->belady = belady;
	r->prefetch = shim.params.shim_prefetch > 0 ? shim.params.shim_prefetch : 0;
	return r;
}

static void drop_cycle(struct shim_rec *r)
{
	free(r->csig);
	free(r->cstart);
	free(r->ckeys);
	free(r->kp);
	free(r->kpos);
	r->csig = NULL;
	r->cstart = NULL;
	r->ckeys = NULL;
	r->kp = NULL;
	r->kpos = NULL;
	r->cap_kp = 0;
	r->confirmed = 0;
}

static void reset_recording(struct shim_rec *r)
{
	r->n = r->nkeys = 0;
	r->cand = r->matched = 0;
	if (r->last_sig)
		memset(r->last_sig, 0, r->cap_last * sizeof(*r->last_sig));
	r->nlast = 0;
}

static size_t hash64(uint64_t x, size_t cap)
{
	x ^= x >> 31;
	x *= 0x7fb5d329728ea185ull;
	x ^= x >> 27;
	return (size_t)x & (cap - 1);
}

/* ---- recording ------------------------------------------------------------------ */

/* Last index + 1 of sig (0: never), and records idx as its latest. */
static uint64_t last_swap(struct shim_rec *r, uint64_t sig, uint64_t idx)
{
	if (!sig)
		sig = 1;
	if (r->nlast * 2 >= r->cap_last) {
		size_t cap = r->cap_last ? 2 * r->cap_last : 4096;
		uint64_t *s = calloc(cap, sizeof(*s)), *x = calloc(cap, sizeof(*x));
		if (!s || !x) {
			free(s);
			free(x);
			return 0;
		}
		for (size_t i = 0; i < r->cap_last; i++) {
			if (!r->last_sig[i])
				continue;
			size_t j = hash64(r->last_sig[i], cap);
			while (s[j])
				j = (j + 1) & (cap - 1);
			s[j] = r->last_sig[i];
			x[j] = r->last_idx[i];
		}
		free(r->last_sig);
		free(r->last_idx);
		r->last_sig = s;
		r->last_idx = x;
		r->cap_last = cap;
	}
	size_t j = hash64(sig, r->cap_last);
	while (r->last_sig[j] && r->last_sig[j] != sig)
		j = (j + 1) & (r->cap_last - 1);
	uint64_t prev = 0;
	if (r->last_sig[j])
		prev = r->last_idx[j];
	else
		r->nlast++;
	r->last_sig[j] = sig;
	r->last_idx[j] = idx + 1;
	return prev;
}

static int append(struct shim_rec *r, uint64_t sig, struct shim_alloc *const *a, int n)
{
	if (r->n + 1 >= REC_MAX_OPS || r->nkeys + (size_t)n > REC_MAX_KEYS)
		reset_recording(r); /* no repetition this long: start over */
	if (r->n + 2 > r->cap) {
		size_t cap = r->cap ? 2 * r->cap : 4096;
		uint64_t *s = realloc(r->sig, cap * sizeof(*s));
		if (s)
			r->sig = s;
		uint32_t *st = s ? realloc(r->start, (cap + 1) * sizeof(*st)) : NULL;
		if (!s || !st)
			return -1;
		r->start = st;
		r->cap = cap;
	}
	if (r->nkeys + (size_t)n > r->cap_keys) {
		size_t cap = r->cap_keys ? 2 * r->cap_keys : 16384;
		while (cap < r->nkeys + (size_t)n)
			cap *= 2;
		uint64_t *k = realloc(r->keys, cap * sizeof(*k));
		if (k)
			r->keys = k;
		uint64_t *o = k ? realloc(r->objs, cap * sizeof(*o)) : NULL;
		if (!k || !o)
			return -1;
		r->objs = o;
		r->cap_keys = cap;
	}
	r->sig[r->n] = sig;
	r->start[r->n] = (uint32_t)r->nkeys;
	for (int i = 0; i < n; i++) {
		r->keys[r->nkeys] = a[i]->base;
		r->objs[r->nkeys++] = a[i]->obj;
	}
	r->n++;
	r->start[r->n] = (uint32_t)r->nkeys;
	return 0;
}

/* ---- the iteration ---------------------------------------------------------------- */

static struct keypos *kp_find(struct shim_rec *r, uint64_t key)
{
	if (!r->cap_kp)
		return NULL;
	size_t j = hash64(key, r->cap_kp);
	while (r->kp[j].key && r->kp[j].key != key)
		j = (j + 1) & (r->cap_kp - 1);
	return r->kp[j].key ? &r->kp[j] : NULL;
}

static struct keypos *kp_add(struct shim_rec *r, uint64_t key)
{
	size_t j = hash64(key, r->cap_kp);
	while (r->kp[j].key && r->kp[j].key != key)
		j = (j + 1) & (r->cap_kp - 1);
	r->kp[j].key = key;
	return &r->kp[j];
}

/* Operations until key's next use after cycle position pos (1..period). */
static uint64_t next_dist(const struct shim_rec *r, const struct keypos *k, uint64_t pos)
{
	const uint32_t *p = r->kpos + k->first;
	uint32_t lo = 0, hi = k->n;
	while (lo < hi) {
		uint32_t mid = (lo + hi) / 2;
		if (p[mid] <= pos)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < k->n ? p[lo] - pos : r->period - pos + p[0];
}

/* The last p recorded operations become the iteration. */
static int confirm(struct shim_rec *r, struct vmm *v, uint64_t p)
{
	size_t first = r->n - p;
	size_t nk = r->start[r->n] - r->start[first];
	r->csig = malloc(p * sizeof(*r->csig));
	r->cstart = malloc((p + 1) * sizeof(*r->cstart));
	r->ckeys = malloc((nk ? nk : 1) * sizeof(*r->ckeys));
	r->cap_kp = 64;
	while (r->cap_kp < 2 * nk)
		r->cap_kp *= 2;
	r->kp = calloc(r->cap_kp, sizeof(*r->kp));
	r->kpos = malloc((nk ? nk : 1) * sizeof(*r->kpos));
	if (!r->csig || !r->cstart || !r->ckeys || !r->kp || !r->kpos) {
		drop_cycle(r);
		return -1;
	}
	/* per key: count, then offsets, then positions in increasing order */
	for (size_t i = 0; i < p; i++) {
		size_t op = first + i;
		r->csig[i] = r->sig[op];
		r->cstart[i] = (uint32_t)(r->start[op] - r->start[first]);
		for (uint32_t x = r->start[op]; x < r->start[op + 1]; x++) {
			r->ckeys[x - r->start[first]] = r->keys[x];
			struct keypos *k = kp_add(r, r->keys[x]);
			k->obj = r->objs[x];
			k->n++;
		}
	}
	r->cstart[p] = (uint32_t)nk;
	uint32_t off = 0;
	for (size_t j = 0; j < r->cap_kp; j++) {
		if (!r->kp[j].key)
			continue;
		r->kp[j].first = off;
		off += r->kp[j].n;
		r->kp[j].n = 0;
	}
	for (size_t i = 0; i < p; i++) {
		for (uint32_t x = r->cstart[i]; x < r->cstart[i + 1]; x++) {
			struct keypos *k = kp_find(r, r->ckeys[x]);
			if (k->n && r->kpos[k->first + k->n - 1] == (uint32_t)i)
				continue; /* touched twice by one operation */
			r->kpos[k->first + k->n++] = (uint32_t)i;
		}
	}
	r->period = p;
	r->last_period = p;
	r->pos = 0; /* the next operation is the iteration's first */
	r->confirmed = 1;
	/* now (the iteration's last position): every key's next use */
	for (size_t j = 0; j < r->cap_kp; j++) {
		struct keypos *k = &r->kp[j];
		if (k->key && v && vmm_hint(v, k->obj, r->t + r->kpos[k->first]) < 0)
			k->obj = 0; /* freed since: nothing to hint */
	}
	SP_INFO(SHIM, "the launch sequence repeats every %llu operations: Belady from now on",
	        (unsigned long long)p);
	return 0;
}

static void leave_cycle(struct shim_rec *r, struct vmm *v)
{
	for (size_t j = 0; j < r->cap_kp; j++)
		if (r->kp[j].key && r->kp[j].obj && v && vmm_hint(v, r->kp[j].obj, VMM_NO_HINT) < 0)
			r->kp[j].obj = 0;
	SP_INFO(SHIM, "operation %llu leaves the recorded iteration: LRU until it repeats again",
	        (unsigned long long)r->t);
	drop_cycle(r);
	reset_recording(r);
}

int shim_rec_op(struct shim_rec *r, struct vmm *v, uint64_t sig, struct shim_alloc *const *a, int n,
                uint64_t *prefetch, int max)
{
	if (!r || !r->belady)
		return 0;
	uint64_t now = r->t++;
	if (r->confirmed) {
		if (sig == r->csig[r->pos]) {
			for (int i = 0; i < n; i++) {
				struct keypos *k = kp_find(r, a[i]->base);
				if (!k)
					continue;
				k->obj = a[i]->obj;
				if (v && vmm_hint(v, k->obj, now + next_dist(r, k, r->pos)) < 0)
					k->obj = 0;
			}
			int np = 0;
			for (int d = 1; d <= r->prefetch && np < max; d++) {
				uint64_t q = (r->pos + (uint64_t)d) % r->period;
				for (uint32_t x = r->cstart[q]; x < r->cstart[q + 1] && np < max;
				     x++)
					prefetch[np++] = r->ckeys[x];
			}
			if (++r->pos == r->period) {
				r->pos = 0;
				r->cycles++;
			}
			return np;
		}
		leave_cycle(r, v);
	}
	if (append(r, sig, a, n) < 0)
		return 0;
	uint64_t i = r->n - 1;
	if (r->cand && !(i >= r->cand && r->sig[i - r->cand] == sig))
		r->cand = r->matched = 0;
	uint64_t prev = last_swap(r, sig, i);
	if (r->cand)
		r->matched++;
	else if (prev) {
		r->cand = i - (prev - 1);
		r->matched = 1;
	}
	/* a whole period matched the one before it (two, for a period of one:
	 * one operation twice is no iteration yet) */
	if (r->cand && r->matched >= (r->cand > 1 ? r->cand : 2)) {
		uint64_t p = r->cand;
		confirm(r, v, p);
		if (r->confirmed)
			reset_recording(r);
		else
			r->cand = r->matched = 0;
	}
	return 0;
}

int shim_rec_mode(const struct shim_rec *r, uint64_t *period, uint64_t *cycles)
{
	*period = r ? r->last_period : 0;
	*cycles = r ? r->cycles : 0;
	return r && r->confirmed;
}
