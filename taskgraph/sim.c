/* taskgraph/sim.c — swap-volume prediction and analytical iteration time.
 *
 * tg_sim_swap replays the global order three times (iterations) and counts the
 * transfers of the middle one (steady state): per device a resident set bounded by the capacity,
 * Belady eviction (farthest next use on that device), dirty tracking (a clean copy
 * is dropped, a dirty one written back if anyone uses it later; with
 * writeback_clean every eviction is written back, as per-GPU virtual memory does).
 * A read of a copy valid only on another GPU moves over P2P. Host tasks (UPD on
 * the CPU) pull dirty copies down and invalidate device copies they overwrite. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "taskgraph/taskgraph.h"

#define NEVER (1 << 30)

struct simst {
	const struct tg_graph *g;
	int nd;
	unsigned char *res, *dirty; /* [d*nobj + o] */
	unsigned char *host;        /* host copy valid */
	int *dnext;                 /* [d*nobj+o] next use position on device d */
	int *gnext;                 /* [o] next use anywhere */
	uint64_t *used;
	int count;
	struct tg_swap *sw;
};

static void xfer(struct simst *s, int link, int o)
{
	if (s->count)
		s->sw->bytes[link][s->g->obj[o].kind] += s->g->obj[o].bytes;
}

static void evict(struct simst *s, int d, int o, int wbclean)
{
	size_t i = (size_t)d * s->g->nobj + o;
	int other = 0;
	for (int e = 0; e < s->nd; e++)
		if (e != d && s->res[(size_t)e * s->g->nobj + o])
			other = 1;
	if (wbclean || (s->dirty[i] && s->gnext[o] < NEVER && !other)) {
		xfer(s, TG_L_D2H, o);
		s->host[o] = 1;
	}
	s->res[i] = 0;
	s->dirty[i] = 0;
	s->used[d] -= s->g->obj[o].bytes;
}

int tg_sim_swap(const struct tg_graph *g, uint64_t capacity, int writeback_clean,
                struct tg_swap *out)
{
	SP_CHECK_ARG(g && out, "taskgraph: null graph or result");
	int rc = 0, nd = g->ndev, no = g->nobj, nt = g->ntask;
	size_t dn = (size_t)nd * no;
	struct tg_swap sw;
	memset(&sw, 0, sizeof(sw));
	struct simst s = {.g = g, .nd = nd, .sw = &sw};
	s.res = calloc(dn + 1, 1);
	s.dirty = calloc(dn + 1, 1);
	s.host = calloc((size_t)no + 1, 1);
	s.dnext = malloc((dn + 1) * sizeof(int));
	s.gnext = malloc(((size_t)no + 1) * sizeof(int));
	s.used = calloc((size_t)nd + 1, sizeof(uint64_t));
	/* next-use tables over the doubled sequence: per ref, the next position */
	int nref = 0;
	for (int i = 0; i < nt; i++)
		nref += g->task[i].nread + g->task[i].nwrite;
	int *rdn = malloc(((size_t)3 * nref + 1) * sizeof(int)),
	    *rgn = malloc(((size_t)3 * nref + 1) * sizeof(int));
	int *roff = malloc(((size_t)3 * nt + 1) * sizeof(int));
	int *live = calloc((size_t)nd + 1, sizeof(int));
	int *pin = calloc((size_t)no + 1, sizeof(int));
	if (!s.res || !s.dirty || !s.host || !s.dnext || !s.gnext || !s.used || !rdn || !rgn ||
	    !roff || !live || !pin) {
		rc = sp_error(-ENOMEM, "taskgraph: simulation state for %d objects x %d devices",
		              no, nd);
		goto out;
	}
	for (size_t i = 0; i < dn; i++)
		s.dnext[i] = NEVER;
	for (int o = 0; o < no; o++) {
		s.gnext[o] = NEVER;
		int k = g->obj[o].kind;
		s.host[o] = k == TG_O_WEIGHT || k == TG_O_OPT || k == TG_O_INPUT;
	}
	for (int n = 0, r = 0; n < 3 * nt; n++) {
		const struct tg_task *t = &g->task[g->order[n % nt]];
		roff[n] = r;
		r += t->nread + t->nwrite;
	}
	roff[3 * nt] = 3 * nref;
	for (int n = 3 * nt - 1; n >= 0; n--) {
		const struct tg_task *t = &g->task[g->order[n % nt]];
		for (int i = 0; i < t->nread + t->nwrite; i++) {
			int o = i < t->nread ? t->read[i] : t->write[i - t->nread];
			int r = roff[n] + i;
			rgn[r] = s.gnext[o];
			rdn[r] = t->dev >= 0 ? s.dnext[(size_t)t->dev * no + o] : NEVER;
		}
		for (int i = 0; i < t->nread + t->nwrite; i++) {
			int o = i < t->nread ? t->read[i] : t->write[i - t->nread];
			s.gnext[o] = n;
			if (t->dev >= 0)
				s.dnext[(size_t)t->dev * no + o] = n;
		}
	}
	/* now gnext/dnext hold first uses; replay */
	for (int n = 0; n < 3 * nt && !rc; n++) {
		const struct tg_task *t = &g->task[g->order[n % nt]];
		s.count = n >= nt && n < 2 * nt;
		int nrw = t->nread + t->nwrite, d = t->dev;
		if (d < 0) { /* host task */
			for (int i = 0; i < t->nread; i++) {
				int o = t->read[i];
				if (!s.host[o]) {
					for (int e = 0; e < nd; e++) {
						size_t x = (size_t)e * no + o;
						if (s.res[x] && s.dirty[x]) {
							xfer(&s, TG_L_D2H, o);
							s.dirty[x] = 0;
							break;
						}
					}
					s.host[o] = 1;
				}
			}
			for (int i = 0; i < t->nwrite; i++) {
				int o = t->write[i];
				s.host[o] = 1;
				for (int e = 0; e < nd; e++)
					if (s.res[(size_t)e * no + o])
						evict(&s, e, o, 0);
			}
			for (int i = 0; i < nrw; i++) {
				int o = i < t->nread ? t->read[i] : t->write[i - t->nread];
				s.gnext[o] = rgn[roff[n] + i];
			}
			continue;
		}
		size_t base = (size_t)d * no;
		uint64_t need = 0;
		for (int i = 0; i < nrw; i++) {
			int o = i < t->nread ? t->read[i] : t->write[i - t->nread];
			if (!pin[o] && !s.res[base + o])
				need += g->obj[o].bytes;
			pin[o] = 1;
		}
		uint64_t ws = 0;
		for (int i = 0; i < nrw; i++) {
			int o = i < t->nread ? t->read[i] : t->write[i - t->nread];
			if (pin[o] == 1) {
				ws += g->obj[o].bytes;
				pin[o] = 2;
			}
		}
		if (ws > capacity) {
			rc = sp_error(
			    -ENOMEM,
			    "taskgraph: task %d (kind %d, pack %d) needs %llu bytes on device %d, "
			    "capacity %llu (short by %llu)",
			    t->id, t->kind, t->pack, (unsigned long long)ws, d,
			    (unsigned long long)capacity, (unsigned long long)(ws - capacity));
		}
		while (!rc && s.used[d] + need > capacity) { /* Belady: farthest next use */
			int victim = -1, far = -1;
			for (int o = 0; o < no; o++) {
				if (!s.res[base + o] || pin[o])
					continue;
				int nx = s.dnext[base + o];
				if (nx > far ||
				    (nx == far && g->obj[o].bytes > g->obj[victim].bytes)) {
					far = nx;
					victim = o;
				}
			}
			if (victim < 0) {
				rc = sp_error(-ENOMEM, "taskgraph: nothing to evict on device %d",
				              d);
				break;
			}
			evict(&s, d, victim, writeback_clean);
		}
		for (int i = 0; i < nrw && !rc; i++) {
			int o = i < t->nread ? t->read[i] : t->write[i - t->nread];
			int isread = i < t->nread;
			if (!s.res[base + o]) {
				int from = -1;
				for (int e = 0; e < nd; e++)
					if (e != d && s.res[(size_t)e * no + o] &&
					    (from < 0 || s.dirty[(size_t)e * no + o]))
						from = e;
				if (isread) {
					if (from >= 0 &&
					    (s.dirty[(size_t)from * no + o] || !s.host[o]))
						xfer(&s, TG_L_P2P, o);
					else if (s.host[o])
						xfer(&s, TG_L_H2D, o);
				}
				s.res[base + o] = 1;
				s.used[d] += g->obj[o].bytes;
			}
		}
		for (int i = 0; i < nrw; i++) {
			int o = i < t->nread ? t->read[i] : t->write[i - t->nread];
			pin[o] = 0;
			s.dnext[base + o] = rdn[roff[n] + i];
			s.gnext[o] = rgn[roff[n] + i];
		}
		for (int i = 0; i < t->nwrite; i++) {
			int o = t->write[i];
			s.dirty[base + o] = 1;
			s.host[o] = 0;
			for (int e = 0; e < nd; e++)
				if (e != d && s.res[(size_t)e * no + o]) {
					s.res[(size_t)e * no + o] = 0;
					s.dirty[(size_t)e * no + o] = 0;
					s.used[e] -= g->obj[o].bytes;
				}
		}
		if (t->kind == TG_ALLREDUCE && s.count && nd > 1) /* ring all-reduce share */
			sw.bytes[TG_L_P2P][TG_O_GRAD] +=
			    2 * g->obj[t->read[0]].bytes * (uint64_t)(nd - 1) / nd;
	}
	sw.peak_stash_objs = (uint64_t)g->peak_stash;
	if (!rc)
		*out = sw;
out:
	free(s.res);
	free(s.dirty);
	free(s.host);
	free(s.dnext);
	free(s.gnext);
	free(s.used);
	free(rdn);
	free(rgn);
	free(roff);
	free(live);
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
	/* dp-swap swaps on demand (no overlap); the others prefetch (overlap) */
	t.iter_s =
	    p->sched == TG_DP_SWAP ? t.compute_s + tr : (t.compute_s > tr ? t.compute_s : tr);
	*out = t;
	return 0;
}
