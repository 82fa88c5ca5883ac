/* taskgraph/sim.c — swap-volume prediction and analytical iteration time.
 *
 * tg_sim_swap replays the global order three times (iterations) and counts the
 * transfers of the middle one (steady state), following the rules the executor
 * and the vmm apply, so that measured volume can equal the prediction:
 *  - a task acquires the objects already on its device first, then the others
 *    (read set, then write set, each object once); that is also their LRU order;
 *  - a missing object that the task reads comes by P2P from a device holding a
 *    valid copy, else by H2D; one it only writes is allocated, nothing moves;
 *  - room is made by Belady on the device (farthest next use there; ties: least
 *    recently used there, then lower object index); an evicted copy is written
 *    back (D2H) only when no other valid copy exists and its next use reads it,
 *    or always with writeback_clean (per-GPU virtual memory, the dp-swap baseline);
 *  - after a task, an object whose next use (cyclically, across iterations) does
 *    not read it is dead: dropped everywhere, nothing moves;
 *  - inputs are new data each iteration: valid on the host only at its start.
 * Host tasks (UPD on the CPU) pull copies they read down to the host and drop the
 * device copies of what they write. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "taskgraph/taskgraph.h"

#include "common/params.h"

/* The bytes a device copy of o occupies (the vmm's size classes). */
static uint64_t foot(const struct tg_graph *g, int o)
{
	return sp_size_class(g->obj[o].bytes, g->size_class_bits, g->size_class_min);
}

#define NEVER (1 << 30)

struct simst {
	const struct tg_graph *g;
	int nd, no;
	unsigned char *res;   /* [d*no + o] device copy valid */
	unsigned char *host;  /* [o] host copy valid */
	unsigned char *gread; /* [o] the next use anywhere reads it */
	int *dnext;           /* [d*no + o] next use on device d (replay position) */
	uint64_t *stamp;      /* [d*no + o] last acquisition on d (LRU) */
	uint64_t clock;
	uint64_t *used;
	int count;
	struct tg_swap *sw;
};

static void xfer(struct simst *s, int link, int o)
{
	if (s->count)
		s->sw->bytes[link][s->g->obj[o].kind] += s->g->obj[o].bytes;
}

static void drop(struct simst *s, int d, int o)
{
	size_t i = (size_t)d * s->no + o;
	if (s->res[i]) {
		s->res[i] = 0;
		s->used[d] -= foot(s->g, o);
	}
}

static int other_copy(const struct simst *s, int d, int o)
{
	if (s->host[o])
		return 1;
	for (int e = 0; e < s->nd; e++)
		if (e != d && s->res[(size_t)e * s->no + o])
			return 1;
	return 0;
}

static void evict(struct simst *s, int d, int o, int wbclean)
{
	if (wbclean || (!other_copy(s, d, o) && s->gread[o])) {
		xfer(s, TG_L_D2H, o);
		s->host[o] = 1;
	}
	drop(s, d, o);
}

/* Belady on device d: farthest next use there, then least recently used there,
 * then lower index; pinned objects (the running task's) are never victims. */
static int victim(const struct simst *s, int d, const unsigned char *pin)
{
	size_t base = (size_t)d * s->no;
	int v = -1;
	for (int o = 0; o < s->no; o++) {
		if (!s->res[base + o] || pin[o])
			continue;
		if (v < 0 || s->dnext[base + o] > s->dnext[base + v] ||
		    (s->dnext[base + o] == s->dnext[base + v] &&
		     s->stamp[base + o] < s->stamp[base + v]))
			v = o;
	}
	return v;
}

int tg_sim_swap(const struct tg_graph *g, uint64_t capacity, int writeback_clean,
                struct tg_swap *out)
{
	SP_CHECK_ARG(g && out, "taskgraph: null graph or result");
	int rc = 0, nd = g->ndev, no = g->nobj, nt = g->ntask;
	size_t dn = (size_t)nd * no;
	struct tg_swap sw;
	memset(&sw, 0, sizeof(sw));
	struct simst s = {.g = g, .nd = nd, .no = no, .sw = &sw};
	/* per task its distinct objects in acquisition-list order (read set, then the
	 * write set's others) and whether it reads each: toff[t]..toff[t+1] */
	int *toff = malloc(((size_t)nt + 1) * sizeof(int));
	int nl = 0;
	for (int i = 0; i < nt; i++)
		nl += g->task[i].nread + g->task[i].nwrite;
	int *tobj = malloc(((size_t)nl + 1) * sizeof(int));
	unsigned char *trd = malloc((size_t)nl + 1);
	/* per reference of the replay (position n, list entry): next use on the task's
	 * device and whether the next use anywhere reads it */
	int *rdn = malloc(((size_t)3 * nl + 1) * sizeof(int));
	unsigned char *rgr = malloc((size_t)3 * nl + 1);
	/* per reference: the next use anywhere is in a later iteration */
	unsigned char *rwr = malloc((size_t)3 * nl + 1);
	int *gpos = malloc(((size_t)no + 1) * sizeof(int));
	s.res = calloc(dn + 1, 1);
	s.host = calloc((size_t)no + 1, 1);
	s.gread = calloc((size_t)no + 1, 1);
	s.dnext = malloc((dn + 1) * sizeof(int));
	s.stamp = calloc(dn + 1, sizeof(uint64_t));
	s.used = calloc((size_t)nd + 1, sizeof(uint64_t));
	unsigned char *pin = calloc((size_t)no + 1, 1);
	if (!toff || !tobj || !trd || !rdn || !rgr || !rwr || !gpos || !s.res || !s.host ||
	    !s.gread || !s.dnext || !s.stamp || !s.used || !pin) {
		rc = sp_error(-ENOMEM, "taskgraph: simulation state for %d objects x %d devices",
		              no, nd);
		goto out;
	}
	nl = 0;
	for (int i = 0; i < nt; i++) {
		const struct tg_task *t = &g->task[i];
		toff[i] = nl;
		for (int j = 0; j < t->nread + t->nwrite; j++) {
			int o = j < t->nread ? t->read[j] : t->write[j - t->nread];
			if (pin[o])
				continue;
			pin[o] = 1;
			tobj[nl] = o;
			trd[nl++] = j < t->nread;
		}
		for (int j = toff[i]; j < nl; j++)
			pin[tobj[j]] = 0;
	}
	toff[nt] = nl;
	/* next uses, scanning a fourth copy first so that they wrap around (cyclic) */
	for (size_t i = 0; i < dn; i++)
		s.dnext[i] = NEVER;
	for (int o = 0; o < no; o++)
		gpos[o] = NEVER;
	for (int n = 4 * nt - 1; n >= 0; n--) {
		const struct tg_task *t = &g->task[g->order[n % nt]];
		int a = toff[t->id], z = toff[t->id + 1], r0 = (n / nt) * nl + a;
		for (int j = a; j < z; j++) {
			int o = tobj[j];
			if (n < 3 * nt) {
				rgr[r0 + j - a] = s.gread[o];
				rwr[r0 + j - a] = gpos[o] / nt != n / nt;
				rdn[r0 + j - a] =
				    t->dev >= 0 ? s.dnext[(size_t)t->dev * no + o] : NEVER;
			}
			s.gread[o] = trd[j];
			gpos[o] = n;
			if (t->dev >= 0)
				s.dnext[(size_t)t->dev * no + o] = n;
		}
	}
	/* now dnext and gread describe the first uses; replay */
	for (int n = 0; n < 3 * nt && !rc; n++) {
		const struct tg_task *t = &g->task[g->order[n % nt]];
		int a = toff[t->id], z = toff[t->id + 1], r0 = (n / nt) * nl + a, d = t->dev;
		s.count = n >= nt && n < 2 * nt;
		if (n % nt == 0) /* a new iteration: inputs are new data, on the host */
			for (int o = 0; o < no; o++) {
				int k = g->obj[o].kind;
				if (k == TG_O_INPUT ||
				    (n == 0 && (k == TG_O_WEIGHT || k == TG_O_OPT)))
					s.host[o] = 1;
				if (k == TG_O_INPUT)
					for (int e = 0; e < nd; e++)
						drop(&s, e, o);
			}
		if (d < 0) { /* host task: pulls what it reads, owns what it writes */
			for (int j = a; j < z; j++) {
				int o = tobj[j];
				if (trd[j] && !s.host[o]) {
					for (int e = 0; e < nd; e++)
						if (s.res[(size_t)e * no + o]) {
							xfer(&s, TG_L_D2H, o);
							break;
						}
					s.host[o] = 1;
				}
			}
			for (int i = 0; i < t->nwrite; i++) {
				s.host[t->write[i]] = 1;
				for (int e = 0; e < nd; e++)
					drop(&s, e, t->write[i]);
			}
		} else {
			size_t base = (size_t)d * no;
			uint64_t ws = 0;
			for (int j = a; j < z; j++) {
				ws += foot(g, tobj[j]);
				pin[tobj[j]] = 1;
			}
			if (ws > capacity) {
				char a1[32], a2[32], a3[32];
				rc = sp_error(-ENOMEM,
				              "taskgraph: task %d (kind %d, pack %d) needs %s on "
				              "device %d, capacity %s (short by %s)",
				              t->id, t->kind, t->pack, sp_format_size(ws, a1, 32),
				              d, sp_format_size(capacity, a2, 32),
				              sp_format_size(ws - capacity, a3, 32));
				break;
			}
			for (int j = a; j < z; j++) /* resident ones first: they are used now */
				if (s.res[base + tobj[j]])
					s.stamp[base + tobj[j]] = ++s.clock;
			for (int j = a; j < z; j++) {
				int o = tobj[j];
				if (s.res[base + o])
					continue;
				while (s.used[d] + foot(g, o) > capacity) {
					int v = victim(&s, d, pin);
					if (v < 0) { /* cannot happen: ws <= capacity */
						rc = sp_error(
						    -ENOMEM,
						    "taskgraph: nothing to evict on device %d", d);
						break;
					}
					evict(&s, d, v, writeback_clean);
				}
				if (rc)
					break;
				if (trd[j]) {
					int p2p = 0;
					for (int e = 0; e < nd && !p2p; e++)
						p2p = e != d && s.res[(size_t)e * no + o];
					if (p2p)
						xfer(&s, TG_L_P2P, o);
					else if (s.host[o])
						xfer(&s, TG_L_H2D, o);
				}
				s.res[base + o] = 1;
				s.used[d] += foot(g, o);
				s.stamp[base + o] = ++s.clock;
			}
			for (int i = 0; i < t->nwrite; i++) { /* this copy is now the only one */
				int o = t->write[i];
				s.host[o] = 0;
				for (int e = 0; e < nd; e++)
					if (e != d)
						drop(&s, e, o);
			}
			for (int j = a; j < z; j++) {
				pin[tobj[j]] = 0;
				s.dnext[base + tobj[j]] = rdn[r0 + j - a];
			}
			if (t->kind == TG_ALLREDUCE && s.count && nd > 1) /* ring share */
				sw.bytes[TG_L_P2P][TG_O_GRAD] +=
				    2 * g->obj[t->read[0]].bytes * (uint64_t)(nd - 1) / nd;
		}
		for (int j = a; j < z; j++) { /* dead: next use overwrites it, or none; an
			                               * input after its last use this iteration */
			int o = tobj[j];
			s.gread[o] = rgr[r0 + j - a];
			if (!s.gread[o] || (g->obj[o].kind == TG_O_INPUT && rwr[r0 + j - a])) {
				for (int e = 0; e < nd; e++)
					drop(&s, e, o);
				s.host[o] = 0;
			}
		}
	}
	sw.peak_stash_objs = (uint64_t)g->peak_stash;
	if (!rc)
		*out = sw;
out:
	free(toff);
	free(tobj);
	free(trd);
	free(rdn);
	free(rgr);
	free(rwr);
	free(gpos);
	free(s.res);
	free(s.host);
	free(s.gread);
	free(s.dnext);
	free(s.stamp);
	free(s.used);
	free(pin);
	return rc;
}

int tg_time_predict(const struct tg_graph *g, const struct tg_plan *p, const struct tg_hw *hw,
                    const struct tg_swap *sw, struct tg_time *out)
{
	SP_CHECK_ARG(g && p && hw && sw && out, "taskgraph: null argument to tg_time_predict");
	SP_CHECK_ARG(hw->ndev > 0 && hw->flops > 0 && hw->h2d_bw > 0 && hw->d2h_bw > 0,
	             "taskgraph: hw needs devices, FLOP/s and H2D/D2H bandwidths > 0");
	double in = 0, outb = 0, p2p = 0;
	for (int k = 0; k < TG_NOKIND; k++) {
		in += (double)sw->bytes[TG_L_H2D][k];
		outb += (double)sw->bytes[TG_L_D2H][k];
		p2p += (double)sw->bytes[TG_L_P2P][k];
	}
	int n = p->ndev;
	double link = hw->host_link_bw > 0 ? hw->host_link_bw : hw->h2d_bw * n;
	double h2d = in / (hw->h2d_bw * n < link ? hw->h2d_bw * n : link);
	double d2h = outb / (hw->d2h_bw * n < link ? hw->d2h_bw * n : link);
	double pp = hw->p2p_bw > 0 ? p2p / (hw->p2p_bw * n) : p2p / (hw->h2d_bw * n) * 2;
	double tr = (h2d > d2h ? h2d : d2h) + pp;
	double comp = g->makespan_units / hw->flops;
	double upd = 0;
	if (p->upd_cpu) /* CPU update streams weights+grads+opt state through host memory */
		for (int o = 0; o < g->nobj; o++)
			if (g->obj[o].kind == TG_O_WEIGHT)
				upd += 8.0 * (double)g->obj[o].bytes /
				       (hw->mem_bw > 0 ? hw->mem_bw / 20 : 1e10);
	struct tg_time t = {.compute_s = comp + upd, .transfer_s = tr, .bubble = g->bubble};
	/* Transfers add to compute. The executor prefetches, but measured on the
	 * model backend (make bench-schedules) it hides little of them: swapped
	 * stashes are needed by the very backward that follows, the host link is
	 * shared, and an all-reduce waits for every replica. max(compute,
	 * transfers) underestimated transfer-bound plans by up to 60%; the sum is
	 * within about 30% on those and exact where transfers are small. */
	t.iter_s = t.compute_s + tr;
	*out = t;
	return 0;
}
