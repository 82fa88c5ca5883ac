/* taskgraph/sim.c — swap-volume prediction and analytical iteration time.
 *
 * tg_sim_swap replays the global order three times (iterations) and counts the
 * transfers of the middle one (steady state), following the rules the executor
 * and the vmm apply, so that measured volume can equal the prediction:
 *  - tasks go in the executor's issue order (issue_order: an all-reduce's
 *    members together), next uses are global positions (its hints);
 *  - a task acquires the objects already on its device first, then the others
 *    (read set, then write set, each object once; none of no bytes); that is
 *    also their LRU order; when room cannot be made, the device is emptied and
 *    the task acquires them again (empty_device: the executor's way out);
 *  - a missing object that the task reads comes by P2P from a device holding a
 *    valid copy, else by H2D; one it only writes is allocated, nothing moves;
 *  - room is made by Belady on the device (farthest next use there; ties: least
 *    recently used there, then lower object index); an evicted copy is written
 *    back (D2H) only when no other valid copy exists and its next use reads it,
 *    or always with writeback_clean (per-GPU virtual memory, the dp-swap baseline);
 *    one whose write-back finds no room in the host pool is passed over;
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
#include "common/pool.h"

/* The bytes a device copy of o occupies (the vmm's size classes). */
static uint64_t foot(const struct tg_graph *g, int o)
{
	uint64_t a = g->dev_align;
	if (!a)
		return sp_size_class(g->obj[o].bytes, g->size_class_bits, g->size_class_min);
	uint64_t b = (g->obj[o].bytes + a - 1) & ~(a - 1); /* vmm_device_footprint */
	b = sp_size_class(b, g->size_class_bits, 64 * a);
	return (b + a - 1) & ~(a - 1);
}

#define NEVER (1 << 30)

struct simst {
	const struct tg_graph *g;
	int nd, no;
	unsigned char *res;   /* [d*no + o] device copy valid */
	unsigned char *host;  /* [o] host copy valid */
	unsigned char *gread; /* [o] the next use anywhere reads it */
	int *dnext;           /* [d*no + o] next use on device d (replay position); row nd:
	                         on the host (host tasks) */
	int *gnext;           /* [o] next use anywhere */
	uint64_t *stamp;      /* [d*no + o] last acquisition on d (LRU) */
	uint64_t clock;
	uint64_t *used;
	int count;
	struct tg_swap *sw;
	struct timing *tm; /* tg_sim_time: the replay in time; NULL: volume only */
	/* the host pool when a disk tier takes what it cannot hold (hcap > 0) */
	uint64_t hcap, hused;
	unsigned char *disk;      /* [o] disk copy valid */
	unsigned char *hpin;      /* [o] its host copy may not be evicted now: HP_* */
	int *fly, *fly_dev, nfly; /* the running task's copies in flight, to fly_dev[i] */
	unsigned char *fly_out;   /* [i] a copy out of fly_dev[i] (D2H), else into it */
	int *fly_dep;             /* [i] a copy into a device: the object whose copy-out
	                             freed its space (it starts after that one), or -1 */
	int *fly_end;             /* land_one's scratch */
	int *skip;                /* device victims passed over (dev_acquire) */
	int nohints;              /* the executor has given no next uses yet: the host
	                             pool's victims by LRU alone */
	uint64_t *hstamp;         /* [o] the host copy's allocation or last host use (LRU) */
	/* with g->dev_align: each device's pool, as the vmm places copies in it */
	struct sp_pool *hpool; /* ... and the host pool's (with hcap): NULL if not */
	int32_t *hblk;         /* [o] the host copy's block there */
	struct sp_pool *pool;  /* [d] */
	int32_t *blk;          /* [d*no + o] the copy's block */
	uint32_t *owners;      /* sp_pool_window's scratch */
};

/* The replay in time (tg_sim_time): each device runs its tasks in the global
 * order, a task starting when its device is free, its objects' writers and
 * readers are done and its copies have landed. A copy is issued when the task
 * enters its device's prefetch window (the task `lookahead` places earlier on
 * that device has started: the executor's SPILL_PREFETCH), once the space it
 * takes is free: a victim leaves after its last task on that device ends, and
 * after its write-back when it has one. Copies queue per device and on the
 * shared host link (each one holds the link for bytes / host link), P2P per
 * receiving device; CPU tasks queue on the CPU. */
struct timing {
	double flops, h2d_bw, d2h_bw, link_bw, p2p_bw, cpu_upd_bw, disk_bw;
	int lookahead;
	double *dev_free, cpu_free, link_in, link_out, disk_q;
	double *h2d_q, *d2h_q, *p2p_q; /* per device */
	double *wend;                  /* [o] its last writer's end */
	double *uend;                  /* [o] its last user's end */
	double *dend;                  /* [d*no + o] its last user's end on device d */
	double *tend;                  /* [task] end, this iteration */
	double *starts;                /* [d*lookahead + k] the device's recent starts */
	int *nstart;                   /* [d] tasks started on d */
	double iter_end[3];
	double space; /* the current acquisition: when the space it evicted is free */
};

/* A copy of bytes to (h2d) or from device d on its queue and the shared link,
 * ready at t: its end. */
static double copy_at(struct timing *m, int d, int h2d, double bytes, double t)
{
	double *q = h2d ? &m->h2d_q[d] : &m->d2h_q[d], *l = h2d ? &m->link_in : &m->link_out;
	double st = t > *q ? t : *q;
	st = st > *l ? st : *l;
	*l = st + bytes / m->link_bw;
	*q = st + bytes / (h2d ? m->h2d_bw : m->d2h_bw);
	return *q;
}

static void xfer(struct simst *s, int link, int o)
{
	if (s->count)
		s->sw->bytes[link][s->g->obj[o].kind] += s->g->obj[o].bytes;
}

/* A transfer of bytes between the host and the disk's drives (striped, so one
 * queue at their summed bandwidth), ready at t: its end. */
static double disk_at(struct timing *m, double bytes, double t)
{
	double st = t > m->disk_q ? t : m->disk_q;
	m->disk_q = st + bytes / m->disk_bw;
	return m->disk_q;
}

/* Why a host copy may not be evicted: acquired by a host task, the object is
 * being brought, or a copy of it is in flight to the running task's device
 * (the vmm's busy and x.active) — then also whether the object is written
 * there, its host copy (the copy's source) going when the copy lands. */
enum { HP_FREE, HP_PINNED, HP_FLY, HP_FLY_WRITTEN };

static void written_on(struct simst *s, int d, int o);

/* The vmm waited for a disk transfer (a write-down, a read) and time ran past
 * the running task's copies in flight: at its next look for room they have
 * landed (a disk transfer takes longer than a device copy; a copy-out's wait
 * does not land them: it may end before the copies queued ahead of them on
 * the device's incoming stream). test_predicted holds this exact. */
static void land(struct simst *s)
{
	for (int i = 0; i < s->nfly; i++) {
		int o = s->fly[i];
		if (s->hpin[o] == HP_FLY_WRITTEN)
			written_on(s, s->fly_dev[i], o);
		s->hpin[o] = HP_FREE;
	}
	s->nfly = 0;
}

/* The host waits for a transfer (vmm_swap_make_space: the latest started
 * that holds a host copy) and looks again: the copies issued since the last
 * sync started together, each device's copies in and out queued on their
 * own streams, equal bytes taking equal time; a copy into a device starts
 * only once the copy-out whose space it took has ended (the vmm's
 * space_wait), which delays the copies queued behind it; what has ended by
 * the end of the waited one has landed. */
static void land_one(struct simst *s)
{
	int w = -1;
	for (int i = s->nfly - 1; i >= 0 && w < 0; i--)
		if (s->host[s->fly[i]])
			w = i;
	if (w < 0 || s->g->obj[s->fly[w]].bytes != s->g->obj[s->fly[0]].bytes) {
		land(s); /* (copies of other sizes: all of them) */
		return;
	}
	/* ... in copy times (each copy one unit, equal bytes): a copy out of a
	 * device ends at its rank on that device's outgoing stream; a copy into one
	 * ends a unit after the later of the copy before it on that stream and the
	 * copy-out whose space it took (the vmm's space_wait). What ends by the
	 * waited one's end has landed. */
	int *end = s->fly_end; /* [i] its end, in units */
	for (int i = 0; i < s->nfly; i++) {
		int e = 0;
		for (int j = 0; j < i; j++)
			if (s->fly_dev[j] == s->fly_dev[i] && s->fly_out[j] == s->fly_out[i])
				e = end[j] > e ? end[j] : e;
		if (!s->fly_out[i])
			for (int j = 0; j < i; j++)
				if (s->fly_out[j] && s->fly[j] == s->fly_dep[i])
					e = end[j] > e ? end[j] : e;
		end[i] = e + 1;
	}
	int T = end[w], kept = 0;
	for (int i = 0; i < s->nfly; i++) {
		int o = s->fly[i];
		if (end[i] > T) { /* still in flight */
			s->fly_dev[kept] = s->fly_dev[i];
			s->fly_out[kept] = s->fly_out[i];
			s->fly_dep[kept] = s->fly_dep[i];
			s->fly[kept++] = o;
			continue;
		}
		if (s->hpin[o] == HP_FLY_WRITTEN)
			written_on(s, s->fly_dev[i], o);
		s->hpin[o] = HP_FREE;
	}
	s->nfly = kept;
}

/* The bytes a host copy of o occupies in the host pool. */
static uint64_t hfoot(const struct tg_graph *g, int o)
{
	uint64_t a = g->host_align ? g->host_align : 1;
	return (g->obj[o].bytes + a - 1) / a * a;
}

/* A host copy of o is allocated (after host_room) and valid. */
static void host_add(struct simst *s, int o)
{
	if (!s->host[o] && s->hcap)
		s->hused += hfoot(s->g, o);
	s->host[o] = 1;
	s->hstamp[o] = ++s->clock;
}

static void host_drop(struct simst *s, int o)
{
	if (s->host[o] && s->hcap)
		s->hused -= hfoot(s->g, o);
	s->host[o] = 0;
	if (s->hpool && s->hblk[o] >= 0) {
		sp_pool_free(s->hpool, s->hblk[o], 0);
		s->hblk[o] = -1;
	}
}

/* The vmm's window cost (vmm/swap.c window_cost) of o's copy, next needed at
 * nu: its device footprint, twice if it is its object's only valid copy, over
 * 1 + how much later than now it is needed (bytes alone when never). */
static double copy_cost(const struct simst *s, int o, int nu, int now)
{
	double c = (double)foot(s->g, o);
	int nvalid = s->host[o] + s->disk[o];
	for (int e = 0; e < s->nd; e++)
		nvalid += s->res[(size_t)e * s->no + o];
	if (nvalid < 2)
		c *= 2;
	if (nu >= NEVER)
		return c * 1e-6;
	return c / (double)(1 + (nu > now ? nu - now : 0));
}

/* The host copy's next use, as the vmm ranks it (vmm_copy_next_use): the
 * sooner of its next use by a host task and its object's anywhere. */
static int host_next(const struct simst *s, int o)
{
	const int *hn = s->dnext + (size_t)s->nd * s->no;
	return hn[o] < s->gnext[o] ? hn[o] : s->gnext[o];
}

/* Is there room for a host copy of o? With the host pool modelled: its copy
 * is placed there now (sp_pool_alloc_end, as vmm try_alloc on the host). */
static int host_fits(struct simst *s, int o)
{
	if (!s->hpool)
		return s->hused + hfoot(s->g, o) <= s->hcap;
	int k = s->g->obj[o].kind;
	int high = k == TG_O_WEIGHT || k == TG_O_GRAD || k == TG_O_OPT;
	return sp_pool_alloc_end(s->hpool, s->g->obj[o].bytes, (uint32_t)o + 1, high,
	                         &s->hblk[o]) == 0;
}

/* The vmm's window cost on the host pool (vmm/swap.c window_cost): a host
 * copy's device footprint, twice if it is its object's only copy, over 1 + how
 * much later than the nearest evictable host copy it is needed; -1 if pinned
 * or in flight. Without hints every next use is unknown: bytes alone. */
struct hwcost {
	struct simst *s;
	int now;
};
static double host_window_cost(void *arg, uint32_t owner)
{
	struct hwcost *w = arg;
	int o = (int)owner;
	if (w->s->hpin[o])
		return -1;
	return copy_cost(w->s, o, w->s->nohints ? NEVER : host_next(w->s, o), w->now);
}

/* The host copy to evict when the pool has the bytes for o but no hole: the
 * first of the cheapest window, or -1 (then Belady). */
static int host_window_victim(struct simst *s, int o)
{
	if (!s->hpool)
		return -1;
	uint64_t need = sp_pool_round(s->hpool, s->g->obj[o].bytes);
	if (sp_pool_avail(s->hpool) < need)
		return -1;
	struct hwcost w = {s, NEVER};
	for (int q = 0; q < s->no && !s->nohints; q++)
		if (s->host[q] && !s->hpin[q] && host_next(s, q) < w.now)
			w.now = host_next(s, q);
	int n = sp_pool_window(s->hpool, need, host_window_cost, &w, s->owners, s->no);
	return n > 0 ? (int)s->owners[0] : -1;
}

/* The object's host and disk copies go: written elsewhere, or dead. */
static void host_disk_drop(struct simst *s, int o)
{
	host_drop(s, o);
	s->disk[o] = 0;
}

/* Makes room for a host copy of o (a host pool of hcap bytes with a disk tier
 * under it), by the vmm's rules: the victim is the host copy needed the
 * farthest (the sooner of its object's next use anywhere and its next use by
 * a host task), then the least recently allocated or used there, then the
 * lower index; one with no valid disk copy is written down first. *free_at (may be NULL) receives when the space is
 * free (its write-downs landed). -ENOMEM when the pinned copies fill it. */
static int host_room(struct simst *s, int o, double *free_at)
{
	const struct tg_graph *g = s->g;
	double at = 0;
	if (!s->hcap || s->host[o] || !g->obj[o].bytes)
		goto out;
	while (!host_fits(s, o)) {
		int w = host_window_victim(s, o), v = w, vn = 0;
		for (int q = 0; q < s->no && w < 0; q++) {
			if (!s->host[q] || s->hpin[q] || q == o)
				continue;
			int qn = s->nohints ? 0 : host_next(s, q);
			if (v < 0 || qn > vn || (qn == vn && s->hstamp[q] < s->hstamp[v])) {
				v = q;
				vn = qn;
			}
		}
		if (v < 0 && s->nfly) {
			/* only copies in flight besides the pinned ones: the vmm waits
			 * for a transfer and looks again (vmm_swap_make_space) */
			land_one(s);
			continue;
		}
		if (v < 0) {
			char a[32], b[32];
			return sp_error(-ENOMEM,
			                "taskgraph: the host pool (%s) cannot hold object %d (%s) "
			                "besides the copies in use",
			                sp_format_size(s->hcap, a, 32), o,
			                sp_format_size(g->obj[o].bytes, b, 32));
		}
		host_drop(s, v);
		if (!s->disk[v]) {
			xfer(s, TG_L_H2DISK, v);
			s->disk[v] = 1;
			if (s->tm) {
				double e = disk_at(s->tm, (double)g->obj[v].bytes, s->tm->wend[v]);
				at = e > at ? e : at;
			}
			land(s);
		}
	}
out:
	if (free_at)
		*free_at = at;
	return 0;
}

/* o comes from its disk copy into a (made) host copy, ready at t: its end. */
static double disk_read(struct simst *s, int o, double t)
{
	xfer(s, TG_L_DISK2H, o);
	host_add(s, o);
	land(s);
	return s->tm ? disk_at(s->tm, (double)s->g->obj[o].bytes, t) : 0;
}

static void drop(struct simst *s, int d, int o)
{
	size_t i = (size_t)d * s->no + o;
	if (s->res[i]) {
		s->res[i] = 0;
		s->used[d] -= foot(s->g, o);
		if (s->pool && s->blk[i] >= 0)
			sp_pool_free(&s->pool[d], s->blk[i], 0);
		if (s->pool)
			s->blk[i] = -1;
	}
}

/* Is there room for o on device d? With pools: its copy is placed there now
 * (sp_pool_alloc_end, from the top for long-lived kinds, as vmm try_alloc). */
static int room_for(struct simst *s, int d, int o, uint64_t capacity)
{
	if (!s->pool)
		return s->used[d] + foot(s->g, o) <= capacity;
	int k = s->g->obj[o].kind;
	int high = k == TG_O_WEIGHT || k == TG_O_GRAD || k == TG_O_OPT;
	return sp_pool_alloc_end(&s->pool[d], foot(s->g, o), (uint32_t)o + 1, high,
	                         &s->blk[(size_t)d * s->no + o]) == 0;
}

/* The vmm's window cost (vmm/swap.c window_cost): a copy's bytes, twice if it
 * is its object's only valid copy, over 1 + how much later than the nearest
 * evictable copy it is needed here; -1 if it cannot go. */
struct wcost {
	struct simst *s;
	int d;
	const unsigned char *pin;
	int now;
};
static double window_cost(void *arg, uint32_t owner)
{
	struct wcost *w = arg;
	int o = (int)owner;
	if (w->pin[o])
		return -1;
	return copy_cost(w->s, o, w->s->dnext[(size_t)w->d * w->s->no + o], w->now);
}

/* The victim when o has the bytes on device d but no hole: the first copy of
 * the cheapest window (vmm_pool_window), or -1 (then Belady). */
static int window_victim(struct simst *s, int d, int o, const unsigned char *pin)
{
	if (!s->pool)
		return -1;
	struct sp_pool *pl = &s->pool[d];
	uint64_t need = sp_pool_round(pl, foot(s->g, o));
	if (sp_pool_avail(pl) < need)
		return -1;
	struct wcost w = {s, d, pin, NEVER};
	size_t base = (size_t)d * s->no;
	for (int q = 0; q < s->no; q++)
		if (s->res[base + q] && !pin[q] && s->dnext[base + q] < w.now)
			w.now = s->dnext[base + q];
	int n = sp_pool_window(pl, need, window_cost, &w, s->owners, s->no);
	return n > 0 ? (int)s->owners[0] : -1;
}

static int other_copy(const struct simst *s, int d, int o)
{
	if (s->host[o] || s->disk[o])
		return 1;
	for (int e = 0; e < s->nd; e++)
		if (e != d && s->res[(size_t)e * s->no + o])
			return 1;
	return 0;
}

static int evict(struct simst *s, int d, int o, int wbclean)
{
	double free_at = s->tm ? s->tm->dend[(size_t)d * s->no + o] : 0, room;
	if (wbclean || (!other_copy(s, d, o) && s->gread[o])) {
		if (!s->host[o]) {
			SP_CHECK(host_room(s, o, &room));
			free_at = room > free_at ? room : free_at;
		}
		xfer(s, TG_L_D2H, o);
		if (!s->host[o])
			host_add(s, o);
		if (s->hcap && s->hpin[o] == HP_FREE) { /* the space is handed on in
			                                    * stream order: not waited for */
			s->hpin[o] = HP_FLY;
			s->fly_dev[s->nfly] = d;
			s->fly_out[s->nfly] = 1;
			s->fly_dep[s->nfly] = -1;
			s->fly[s->nfly++] = o;
		}
		if (s->tm) /* the space is free once the copy-out lands */
			free_at = copy_at(s->tm, d, 0, (double)s->g->obj[o].bytes, free_at);
	}
	if (s->tm && free_at > s->tm->space)
		s->tm->space = free_at;
	drop(s, d, o);
	return 0;
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

/* The earliest start of device task t (iteration `it`): its device free, its
 * dependencies and its objects' writers ended, and for what it writes their
 * readers too. */
static double task_ready(const struct simst *s, const struct tg_task *t)
{
	const struct timing *m = s->tm;
	double r = 0;
	for (int i = 0; i < t->ndep; i++)
		r = m->tend[t->dep[i]] > r ? m->tend[t->dep[i]] : r;
	for (int i = 0; i < t->nread; i++)
		r = m->wend[t->read[i]] > r ? m->wend[t->read[i]] : r;
	for (int i = 0; i < t->nwrite; i++) {
		int o = t->write[i];
		r = m->wend[o] > r ? m->wend[o] : r;
		r = m->uend[o] > r ? m->uend[o] : r;
	}
	return r;
}

/* Task t ran [st, end) on device d (-1: the CPU). */
static void task_done(struct simst *s, const struct tg_task *t, int d, double st, double end,
                      int it)
{
	struct timing *m = s->tm;
	m->tend[t->id] = end;
	for (int i = 0; i < t->nread + t->nwrite; i++) {
		int o = i < t->nread ? t->read[i] : t->write[i - t->nread];
		m->uend[o] = end > m->uend[o] ? end : m->uend[o];
		if (d >= 0)
			m->dend[(size_t)d * s->no + o] = end;
	}
	for (int i = 0; i < t->nwrite; i++)
		m->wend[t->write[i]] = end;
	if (d >= 0) {
		m->starts[(size_t)d * m->lookahead + (size_t)(m->nstart[d] % m->lookahead)] = st;
		m->nstart[d]++;
		m->dev_free[d] = end;
	} else {
		m->cpu_free = end;
	}
	m->iter_end[it] = end > m->iter_end[it] ? end : m->iter_end[it];
}

/* Task t (on device d) ends later, at end: a tensor-parallel set ends when
 * its slowest member does (the exchanges are barriers). */
static void stretch(struct simst *s, const struct tg_task *t, int d, double end, int it)
{
	struct timing *m = s->tm;
	m->tend[t->id] = end;
	for (int i = 0; i < t->nread + t->nwrite; i++) {
		int o = i < t->nread ? t->read[i] : t->write[i - t->nread];
		m->uend[o] = end > m->uend[o] ? end : m->uend[o];
		if (d >= 0)
			m->dend[(size_t)d * s->no + o] = end;
	}
	for (int i = 0; i < t->nwrite; i++)
		m->wend[t->write[i]] = end;
	if (d >= 0 && m->dev_free[d] < end)
		m->dev_free[d] = end;
	m->iter_end[it] = end > m->iter_end[it] ? end : m->iter_end[it];
}

/* o is acquired for writing on device d: its copy there is now the only one
 * (the others go at once, so later acquisitions of the task find the room). */
static void written_on(struct simst *s, int d, int o)
{
	host_disk_drop(s, o);
	for (int e = 0; e < s->nd; e++)
		if (e != d)
			drop(s, e, o);
}

/* o is acquired for writing on the host: its copy there is now the only one. */
static void written_on_host(struct simst *s, int o)
{
	for (int e = 0; e < s->nd; e++)
		drop(s, e, o);
	s->disk[o] = 0;
}

/* An object written on the host (the executor's VMM_OVERWRITE there): room
 * for it, every other copy dropped. */
static int host_write(struct simst *s, int o)
{
	if (!s->g->obj[o].bytes)
		return 0;
	written_on_host(s, o);
	SP_CHECK(host_room(s, o, NULL));
	host_add(s, o);
	return 0;
}

/* The executor's initial state: each replica's weights and optimizer state,
 * pack by pack, written into the host pool. */
static int host_init(struct simst *s)
{
	const struct tg_graph *g = s->g;
	for (int o = 0; o < g->nobj && !g->nmodels; o++) /* a graph made by hand */
		if (g->obj[o].kind == TG_O_WEIGHT || g->obj[o].kind == TG_O_OPT)
			SP_CHECK(host_write(s, o));
	for (int m = 0; m < g->nmodels; m++) {
		const struct tg_model_objs *mo = &g->mobj[m];
		for (int i = 0; i < mo->nrep * mo->P * (mo->tp > 1 ? mo->tp : 1); i++) {
			if (mo->W[i] >= 0)
				SP_CHECK(host_write(s, mo->W[i]));
			if (mo->Wnew && mo->Wnew[i] >= 0) /* 2BW: the second version */
				SP_CHECK(host_write(s, mo->Wnew[i]));
			if (mo->O[i] >= 0)
				SP_CHECK(host_write(s, mo->O[i]));
		}
	}
	return 0;
}

/* A new iteration (a program: every step's): each microbatch's input and
 * target, written on the host. */
static int host_inputs(struct simst *s)
{
	const struct tg_graph *g = s->g;
	for (int o = 0; o < g->nobj && !g->nmodels; o++) /* a graph made by hand */
		if (g->obj[o].kind == TG_O_INPUT)
			SP_CHECK(host_write(s, o));
	for (int m = 0; m < g->nmodels; m++) {
		const struct tg_model_objs *mo = &g->mobj[m];
		for (int k = 0; k < mo->nmb * mo->nstep * (mo->tp > 1 ? mo->tp : 1); k++) {
			int x = mo->X[k], rc = 0;
			if (x >= 0)
				SP_CHECK(host_write(s, x));
			if (x >= 0) /* held while its target finds room (write_inputs) */
				s->hpin[x] = HP_PINNED;
			if (mo->Y[k] >= 0)
				rc = host_write(s, mo->Y[k]);
			if (x >= 0)
				s->hpin[x] = HP_FREE;
			SP_CHECK(rc);
		}
	}
	return 0;
}

/* A task on the host (the CPU update) acquires its n objects obj[] there in
 * the order ord[] (indices into obj), those already there first when
 * resident_first: one it reads comes from a device (D2H) or the disk; one it
 * writes then has its only copy there. *ready: when the copies landed. */
static int host_acquire(struct simst *s, const int *obj, const unsigned char *reads,
                        const unsigned char *writes, int n, const int *ord, int resident_first,
                        double *ready)
{
	const struct tg_graph *g = s->g;
	int rc = 0;
	for (int pass = resident_first ? 0 : 1; pass < 2 && !rc; pass++)
		for (int i = 0; i < n && !rc; i++) {
			int j = ord[i], o = obj[j];
			if (s->hpin[o] || (pass == 0 && !s->host[o]) || !g->obj[o].bytes)
				continue;
			if (s->host[o]) {
				s->hstamp[o] = ++s->clock;
				s->hpin[o] = HP_PINNED;
				if (writes[j])
					written_on_host(s, o);
				continue;
			}
			double room = 0, at = 0;
			if ((rc = host_room(s, o, &room)) < 0)
				break;
			int src = -1;
			for (int e = 0; e < s->nd && src < 0 && reads[j]; e++)
				if (s->res[(size_t)e * s->no + o])
					src = e;
			double w = s->tm ? s->tm->wend[o] : 0;
			w = room > w ? room : w;
			if (src >= 0) {
				xfer(s, TG_L_D2H, o);
				if (s->tm)
					at = copy_at(s->tm, src, 0, (double)g->obj[o].bytes, w);
				host_add(s, o);
			} else if (reads[j] && s->disk[o]) {
				at = disk_read(s, o, w);
			} else {
				host_add(s, o);
			}
			*ready = at > *ready ? at : *ready;
			s->hpin[o] = HP_PINNED;
			if (writes[j])
				written_on_host(s, o);
		}
	for (int j = 0; j < n; j++)
		s->hpin[obj[j]] = HP_FREE;
	return rc;
}

/* The host task's acquisition as the executor's (runtime/exec.c
 * acquire_all_on): when its copies split the pool so that the task finds no
 * room although its bytes fit, every host copy that can leave is evicted (to
 * disk unless its disk copy is valid), the transfers land, and the objects
 * are acquired again, largest first. */
static int host_task(struct simst *s, const int *obj, const unsigned char *reads,
                     const unsigned char *writes, int n, double *ready)
{
	const struct tg_graph *g = s->g;
	int ord[n > 0 ? n : 1];
	for (int i = 0; i < n; i++)
		ord[i] = i;
	int rc = host_acquire(s, obj, reads, writes, n, ord, 1, ready);
	if (rc != -ENOMEM)
		return rc;
	uint64_t need = 0;
	for (int i = 0; i < n; i++)
		need += g->obj[obj[i]].bytes;
	if (!s->hcap || need > s->hcap)
		return rc;
	double at = 0;
	for (int q = 0; q < s->no; q++) {
		if (!s->host[q] || s->hpin[q])
			continue;
		host_drop(s, q);
		if (!s->disk[q]) {
			xfer(s, TG_L_H2DISK, q);
			s->disk[q] = 1;
			if (s->tm) {
				double e = disk_at(s->tm, (double)g->obj[q].bytes, s->tm->wend[q]);
				at = e > at ? e : at;
			}
		}
	}
	land(s); /* vmm_sync */
	*ready = at > *ready ? at : *ready;
	for (int i = 1; i < n; i++) /* largest first, ties by position (stable) */
		for (int k = i; k > 0 && g->obj[obj[ord[k]]].bytes > g->obj[obj[ord[k - 1]]].bytes;
		     k--) {
			int t = ord[k];
			ord[k] = ord[k - 1];
			ord[k - 1] = t;
		}
	return host_acquire(s, obj, reads, writes, n, ord, 0, ready);
}

/* Task t's queue in the executor: its device, or the host's (ndev). */
static int queue_of(const struct tg_graph *g, const struct tg_task *t)
{
	return t->dev >= 0 ? t->dev : g->ndev;
}

/* Is u a member of the all-reduce t belongs to (same model and pack, both
 * summing or both broadcasting)? */
static int same_collective(const struct tg_task *t, const struct tg_task *u)
{
	return u->kind == TG_ALLREDUCE && u->model == t->model && u->pack == t->pack &&
	       (u->root < 0) == (t->root < 0);
}

/* The executor's issue order in its check mode (exec.ordered), as positions
 * in the global order: program order, except that the members of one
 * all-reduce go together, at the first point where each of them is the next
 * task of its queue with its dependencies gone; until then later tasks go
 * ahead of them (runtime/exec.c: pick, collective_ready). Hints and dead
 * contents still follow program positions, as the executor's do. perm[k] is
 * the position of the k-th task issued; program order when the scratch
 * cannot be had. */
static void issue_order(const struct tg_graph *g, int *perm)
{
	int nt = g->ntask, nq = g->ndev + 1, k = 0, next = 0, ng = 0;
	int *pos = malloc(((size_t)nt + 1) * sizeof(int));   /* [task id] its position */
	int *grp = malloc(((size_t)nt + 1) * sizeof(int));   /* [position] its all-reduce */
	int *first = malloc(((size_t)nt + 1) * sizeof(int)); /* [group] its first member */
	int *mnext = malloc(((size_t)nt + 1) * sizeof(int)); /* [position] next member */
	unsigned char *done = calloc((size_t)nt + 1, 1);     /* [position] issued */
	int *head = calloc((size_t)nq, sizeof(int));         /* [queue] first not issued */
	for (int i = 0; i < nt; i++)
		perm[i] = i;
	if (!pos || !grp || !first || !mnext || !done || !head)
		goto out;
	for (int i = 0; i < nt; i++)
		pos[g->order[i]] = i;
	for (int p = nt - 1; p >= 0; p--) { /* the members of each, in order */
		const struct tg_task *t = &g->task[g->order[p]];
		grp[p] = mnext[p] = -1;
		if (t->kind != TG_ALLREDUCE)
			continue;
		int x = 0;
		while (x < ng && !same_collective(t, &g->task[g->order[first[x]]]))
			x++;
		mnext[p] = x < ng ? first[x] : -1;
		first[x] = p;
		grp[p] = x;
		ng += x == ng;
	}
	while (k < nt) {
		while (next < nt && done[next])
			next++;
		int issued = 0;
		for (int p = next; p < nt && !issued; p++) {
			if (done[p])
				continue;
			const struct tg_task *t = &g->task[g->order[p]];
			int ok = 1;
			if (grp[p] < 0) {
				for (int i = 0; i < t->ndep && ok; i++)
					ok = done[pos[t->dep[i]]];
				if (!ok)
					break; /* the executor waits here */
				done[p] = 1;
				perm[k++] = p;
				issued = 1;
				continue;
			}
			for (int m = first[grp[p]]; m >= 0 && ok;
			     m = mnext[m]) { /* all at heads? */
				const struct tg_task *u = &g->task[g->order[m]];
				int q = queue_of(g, u);
				while (head[q] < nt &&
				       (done[head[q]] ||
				        queue_of(g, &g->task[g->order[head[q]]]) != q))
					head[q]++;
				ok = head[q] == m;
				for (int i = 0; i < u->ndep && ok; i++)
					ok = done[pos[u->dep[i]]];
			}
			if (!ok)
				continue; /* passed over */
			for (int m = first[grp[p]]; m >= 0; m = mnext[m]) {
				done[m] = 1;
				perm[k++] = m;
			}
			issued = 1;
		}
		if (!issued) { /* cannot happen with a valid graph: program order */
			for (int i = 0; i < nt; i++)
				perm[i] = i;
			break;
		}
	}
out:
	free(pos);
	free(grp);
	free(first);
	free(mnext);
	free(done);
	free(head);
}

/* Task t acquires its n objects obj[] (reads[], writes[]) on device d, those
 * already there first, then the others in order, as the executor does; pin[]
 * marks the task's objects (never victims). A device victim whose write-back
 * finds no room in the host pool is passed over for the others, as the vmm
 * does (vmm_swap_make_space). *ready: when its copies have landed. Returns 0,
 * or -ENOMEM when nothing else can be evicted. */
static int dev_acquire(struct simst *s, const struct tg_task *t, int d, uint64_t capacity,
                       int writeback_clean, const int *obj, const unsigned char *reads,
                       const unsigned char *writes, int n, unsigned char *pin, double *ready)
{
	const struct tg_graph *g = s->g;
	struct timing *tm = s->tm;
	int nd = s->nd, no = s->no, rc = 0, nskip = 0;
	size_t base = (size_t)d * no;
	for (int j = 0; j < n; j++) /* resident ones first: they are used now */
		if (s->res[base + obj[j]]) {
			s->stamp[base + obj[j]] = ++s->clock;
			if (writes[j])
				written_on(s, d, obj[j]);
		}
	/* its copies are issued when it enters the prefetch window */
	double pf = 0;
	if (tm && tm->nstart[d] >= tm->lookahead)
		pf =
		    tm->starts[(size_t)d * tm->lookahead + (size_t)(tm->nstart[d] % tm->lookahead)];
	for (int j = 0; j < n; j++) {
		int o = obj[j];
		if (s->res[base + o] || !g->obj[o].bytes) /* the executor skips empty ones */
			continue;
		if (tm)
			tm->space = pf;
		int p2p = 0;
		for (int e = 0; e < nd && !p2p; e++)
			p2p = e != d && s->res[(size_t)e * no + o];
		double w = tm ? tm->wend[o] : 0;
		s->hpin[o] = HP_PINNED; /* its host copy stays while it comes */
		if (reads[j] && !p2p && !s->host[o] && s->disk[o]) {
			/* disk -> host first, then room on the device */
			double room;
			if ((rc = host_room(s, o, &room)) < 0) {
				s->hpin[o] = HP_FREE;
				break;
			}
			w = disk_read(s, o, room > w ? room : w);
		}
		int space_from = -1;
		while (!rc && !room_for(s, d, o, capacity)) {
			int v = window_victim(s, d, o, pin);
			if (v < 0)
				v = victim(s, d, pin);
			if (v < 0) {
				char a1[32];
				rc =
				    sp_error(-ENOMEM,
				             "taskgraph: task %d (kind %d, pack %d): no room for "
				             "object %d on device %d: %d copies there could not be "
				             "written back to the host pool (%s)",
				             t->id, t->kind, t->pack, o, d, nskip,
				             sp_format_size(s->hcap, a1, 32));
				break;
			}
			int nf = s->nfly;
			rc = evict(s, d, v, writeback_clean);
			if (s->nfly > nf && s->fly_out[s->nfly - 1])
				space_from = v; /* its copy-out frees the space */
			if (rc == -ENOMEM) {    /* no room below for its write-back: the others */
				pin[v] = 2;
				s->skip[nskip++] = v;
				rc = 0;
			}
		}
		while (nskip)
			pin[s->skip[--nskip]] = 0;
		s->hpin[o] = HP_FREE;
		if (rc)
			break;
		double at = tm ? tm->space : 0; /* the space is there */
		if (reads[j]) {
			double b = (double)g->obj[o].bytes;
			double rd = at > w ? at : w;
			if (p2p) {
				xfer(s, TG_L_P2P, o);
				if (tm) {
					double st = rd > tm->p2p_q[d] ? rd : tm->p2p_q[d];
					at = tm->p2p_q[d] = st + b / tm->p2p_bw;
				}
			} else if (s->host[o]) {
				xfer(s, TG_L_H2D, o);
				if (tm)
					at = copy_at(tm, d, 1, b, rd);
			}
		}
		*ready = at > *ready ? at : *ready;
		s->res[base + o] = 1;
		s->used[d] += foot(g, o);
		s->stamp[base + o] = ++s->clock;
		if (reads[j] && (p2p || s->host[o])) { /* in flight */
			s->hpin[o] = writes[j] ? HP_FLY_WRITTEN : HP_FLY;
			s->fly_dev[s->nfly] = d;
			s->fly_out[s->nfly] = 0;
			s->fly_dep[s->nfly] = space_from;
			s->fly[s->nfly++] = o;
			if (writes[j]) /* the disk copy goes at once */
				s->disk[o] = 0;
		} else if (writes[j]) {
			written_on(s, d, o);
		}
	}
	return rc;
}

/* The executor's way out when a task does not get its objects on device d:
 * every copy there is evicted in object order (vmm_evict: a copy that is its
 * object's only valid one is written back, the others dropped) and the
 * copies in flight land (vmm_sync). Returns 0 or -ENOMEM (a write-back finds
 * no room in the host pool). */
static int empty_device(struct simst *s, int d, int writeback_clean)
{
	size_t base = (size_t)d * s->no;
	land(s);
	for (int o = 0; o < s->no; o++) {
		if (!s->res[base + o] || !s->g->obj[o].bytes)
			continue;
		int sole = 1;
		for (int e = 0; e < s->nd && sole; e++)
			sole = e == d || !s->res[(size_t)e * s->no + o];
		if (writeback_clean || (sole && !s->host[o] && !s->disk[o]))
			SP_CHECK(evict(s, d, o, 1));
		else
			drop(s, d, o);
	}
	land(s);
	return 0;
}

static int replay(const struct tg_graph *g, uint64_t capacity, int writeback_clean,
                  struct timing *tm, struct tg_swap *out)
{
	SP_CHECK_ARG(g && out, "taskgraph: null graph or result");
	int rc = 0, nd = g->ndev, no = g->nobj, nt = g->ntask;
	size_t dn = (size_t)nd * no, pn = dn + (size_t)no; /* the places: devices, host */
	struct tg_swap sw;
	memset(&sw, 0, sizeof(sw));
	struct simst s = {
	    .g = g, .nd = nd, .no = no, .sw = &sw, .tm = tm, .hcap = g->host_capacity};
	/* per task its distinct objects in acquisition-list order (read set, then the
	 * write set's others) and whether it reads each: toff[t]..toff[t+1] */
	int *toff = malloc(((size_t)nt + 1) * sizeof(int));
	int nl = 0;
	for (int i = 0; i < nt; i++)
		nl += g->task[i].nread + g->task[i].nwrite;
	int *tobj = malloc(((size_t)nl + 1) * sizeof(int));
	unsigned char *trd = malloc((size_t)nl + 1);
	unsigned char *twr = calloc((size_t)nl + 1, 1); /* ... and whether it writes it */
	/* per reference of the replay (position n, list entry): next use on the task's
	 * device and whether the next use anywhere reads it */
	int *rdn = malloc(((size_t)3 * nl + 1) * sizeof(int));
	unsigned char *rgr = malloc((size_t)3 * nl + 1);
	/* per reference: the next use anywhere is in a later iteration, and where */
	unsigned char *rwr = malloc((size_t)3 * nl + 1);
	int *rgn = malloc(((size_t)3 * nl + 1) * sizeof(int));
	int *gpos = malloc(((size_t)no + 1) * sizeof(int));
	s.res = calloc(dn + 1, 1);
	s.host = calloc((size_t)no + 1, 1);
	s.gread = calloc((size_t)no + 1, 1);
	s.dnext = malloc((pn + 1) * sizeof(int));
	s.gnext = malloc(((size_t)no + 1) * sizeof(int));
	s.disk = calloc((size_t)no + 1, 1);
	s.hpin = calloc((size_t)no + 1, 1);
	s.fly = malloc(((size_t)no + 1) * sizeof(int));
	s.fly_dev = malloc(((size_t)no + 1) * sizeof(int));
	s.fly_out = malloc((size_t)no + 1);
	s.fly_dep = malloc(((size_t)no + 1) * sizeof(int));
	s.fly_end = malloc(((size_t)no + 1) * sizeof(int));
	s.skip = malloc(((size_t)no + 1) * sizeof(int));
	s.hstamp = calloc((size_t)no + 1, sizeof(uint64_t));
	s.stamp = calloc(dn + 1, sizeof(uint64_t));
	s.used = calloc((size_t)nd + 1, sizeof(uint64_t));
	unsigned char *pin = calloc((size_t)no + 1, 1);
	int *perm = malloc(((size_t)nt + 1) * sizeof(int)); /* the issue order */
	if (!toff || !tobj || !trd || !twr || !rdn || !rgr || !rwr || !gpos || !s.res || !s.host ||
	    !s.gread || !s.dnext || !s.stamp || !s.used || !pin || !s.disk || !s.hpin || !s.fly ||
	    !s.gnext || !rgn || !s.hstamp || !s.fly_dev || !s.fly_out || !s.fly_dep || !s.fly_end ||
	    !s.skip || !perm) {
		rc = sp_error(-ENOMEM, "taskgraph: simulation state for %d objects x %d devices",
		              no, nd);
		goto out;
	}
	if (g->dev_align && !(g->dev_align & (g->dev_align - 1))) {
		s.pool = calloc((size_t)nd, sizeof(*s.pool));
		s.blk = malloc((dn + 1) * sizeof(int32_t));
		s.owners = malloc(((size_t)no + 1) * sizeof(uint32_t));
		if (!s.pool || !s.blk || !s.owners) {
			rc = sp_error(-ENOMEM, "taskgraph: pools for %d objects x %d devices", no,
			              nd);
			goto out;
		}
		for (size_t i = 0; i < dn; i++)
			s.blk[i] = -1;
		for (int d = 0; d < nd && !rc; d++)
			rc = sp_pool_init(&s.pool[d], capacity & ~(g->dev_align - 1), g->dev_align,
			                  (uint32_t)(2 * no + 8));
		if (rc)
			goto out;
		uint64_t ha = g->host_align;
		if (s.hcap && ha && !(ha & (ha - 1))) { /* the host pool too */
			s.hpool = calloc(1, sizeof(*s.hpool));
			s.hblk = malloc(((size_t)no + 1) * sizeof(int32_t));
			if (!s.hpool || !s.hblk) {
				free(s.hpool);
				s.hpool = NULL;
				rc = sp_error(-ENOMEM, "taskgraph: the host pool for %d objects",
				              no);
				goto out;
			}
			for (int o = 0; o < no; o++)
				s.hblk[o] = -1;
			SP_CHECK_GOTO(
			    sp_pool_init(s.hpool, s.hcap & ~(ha - 1), ha, (uint32_t)(2 * no + 8)),
			    rc, out);
		}
	}
	nl = 0;
	for (int i = 0; i < nt; i++) {
		const struct tg_task *t = &g->task[i];
		toff[i] = nl;
		for (int j = 0; j < t->nread + t->nwrite; j++) {
			int o = j < t->nread ? t->read[j] : t->write[j - t->nread];
			if (pin[o]) { /* read and written: one entry */
				for (int e = toff[i]; e < nl; e++)
					twr[e] |= tobj[e] == o && j >= t->nread;
				continue;
			}
			pin[o] = 1;
			tobj[nl] = o;
			twr[nl] = j >= t->nread;
			trd[nl++] = j < t->nread;
		}
		for (int j = toff[i]; j < nl; j++)
			pin[tobj[j]] = 0;
	}
	toff[nt] = nl;
	/* next uses, scanning a fourth copy first so that they wrap around (cyclic) */
	for (size_t i = 0; i < pn; i++)
		s.dnext[i] = NEVER;
	for (int o = 0; o < no; o++)
		gpos[o] = NEVER;
	for (int n = 4 * nt - 1; n >= 0; n--) {
		const struct tg_task *t = &g->task[g->order[n % nt]];
		int a = toff[t->id], z = toff[t->id + 1], r0 = (n / nt) * nl + a;
		size_t pb = (size_t)(t->dev >= 0 ? t->dev : nd) * no; /* its place's row */
		for (int j = a; j < z; j++) {
			int o = tobj[j];
			if (n < 3 * nt) {
				rgr[r0 + j - a] = s.gread[o];
				rwr[r0 + j - a] = gpos[o] / nt != n / nt;
				rgn[r0 + j - a] = gpos[o];
				rdn[r0 + j - a] = s.dnext[pb + o];
			}
			s.gread[o] = trd[j];
			gpos[o] = n;
			s.dnext[pb + o] = n;
		}
	}
	/* now dnext, gpos and gread describe the first uses; replay */
	memcpy(s.gnext, gpos, (size_t)no * sizeof(int));
	issue_order(g, perm);
	int gk = -1; /* the first member of an all-reduce being acquired */
	for (int k = 0; k < 3 * nt && !rc; k++) {
		int n = k / nt * nt + perm[k % nt]; /* its program position */
		const struct tg_task *t = &g->task[g->order[n % nt]];
		int a = toff[t->id], z = toff[t->id + 1], r0 = (n / nt) * nl + a, d = t->dev;
		s.count = n >= nt && n < 2 * nt;
		/* the initial state, written into the host pool, and the first
		 * inputs come before the executor's first hints (rt_run_open,
		 * rt_run_step_begin): the host makes room by LRU then */
		s.nohints = k == 0;
		if (k == 0)
			rc = host_init(&s);
		if (k % nt == 0 && !rc) /* a new iteration: inputs are new data, on the host */
			rc = host_inputs(&s);
		s.nohints = 0;
		if (rc)
			break;
		int it = n / nt;
		double ready = tm ? task_ready(&s, t) : 0;
		if (d < 0) { /* host task: pulls what it reads, owns what it writes */
			if ((rc = host_task(&s, tobj + a, trd + a, twr + a, z - a, &ready)) < 0)
				break;
			if (tm) { /* an update streams W, G and optimizer state through memory */
				double st = ready > tm->cpu_free ? ready : tm->cpu_free, dur = 0;
				if (t->kind == TG_UPD) /* 2BW's copy of the old version: 2x */
					for (int i = 0; i < t->nwrite; i++)
						if (g->obj[t->write[i]].kind == TG_O_WEIGHT)
							dur += (t->write[i] == t->read[0] ? 8.0
							                                  : 2.0) *
							       (double)g->obj[t->write[i]].bytes /
							       tm->cpu_upd_bw;
				task_done(&s, t, -1, st, st + dur, it);
			}
			for (int j = a; j < z; j++) {
				s.dnext[dn + tobj[j]] = rdn[r0 + j - a];
				s.gnext[tobj[j]] = rgn[r0 + j - a];
			}
		} else {
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
			/* the executor's acquisition; when it fails for room, once more
			 * after emptying the device (runtime/exec.c acquire_all_on) */
			for (int attempt = 0; attempt < 2; attempt++) {
				if (attempt) {
					if (rc != -ENOMEM)
						break;
					rc = empty_device(&s, d, writeback_clean);
					if (rc < 0)
						break;
				}
				rc = dev_acquire(&s, t, d, capacity, writeback_clean, tobj + a,
				                 trd + a, twr + a, z - a, pin, &ready);
				if (rc == 0)
					break;
			}
			if (rc < 0)
				break;
			/* the members of an all-reduce are acquired one after the
			 * other and held, then launched; their hints come after
			 * (issue_collective): the check mode syncs after the last */
			int defer = 0;
			if (t->kind == TG_ALLREDUCE && (k + 1) % nt) {
				int n2 = perm[(k + 1) % nt];
				defer = same_collective(t, &g->task[g->order[n2]]);
			}
			if (gk < 0)
				gk = k;
			if (!defer) {
				land(&s); /* the check mode syncs after each task */
				for (int kk = gk; kk <= k; kk++) {
					int nn = kk / nt * nt + perm[kk % nt];
					const struct tg_task *u = &g->task[g->order[nn % nt]];
					int ua = toff[u->id], uz = toff[u->id + 1];
					int ur0 = (nn / nt) * nl + ua;
					size_t ub = (size_t)u->dev * no;
					for (int j = ua; j < uz; j++) {
						pin[tobj[j]] = 0;
						s.dnext[ub + tobj[j]] = rdn[ur0 + j - ua];
						s.gnext[tobj[j]] = rgn[ur0 + j - ua];
					}
				}
				gk = -1;
			}
			if (t->kind == TG_ALLREDUCE && t->root < 0 && s.count && nd > 1) {
				/* the ring: 2(N-1) |G| over its N members, member d's
				 * share rounded so that the N shares add up exactly (the
				 * executor counts whole chunks: 3 devices do not divide
				 * a power of two) */
				uint64_t all = 2 * g->obj[t->read[0]].bytes * (uint64_t)(nd - 1);
				uint64_t m = (uint64_t)(d % nd);
				int ring = 0; /* one member a device: replica d's task */
				for (int mi = 0; mi < g->nmodels; mi++)
					ring |=
					    g->mobj[mi].id == t->model && g->mobj[mi].nrep == nd;
				sw.bytes[TG_L_P2P][TG_O_GRAD] +=
				    ring ? all * (m + 1) / nd - all * m / nd : all / nd;
			}
			if (tm) {
				double st = ready > tm->dev_free[d] ? ready : tm->dev_free[d];
				double dur = t->flops / tm->flops;
				if (t->xchg_bytes > 0) /* tensor parallelism: the partial sums */
					dur += t->xchg_bytes / tm->p2p_bw;
				if (t->kind == TG_ALLREDUCE && t->root < 0 &&
				    nd > 1) /* the ring on the peer links */
					dur = 2.0 * (double)g->obj[t->read[0]].bytes * (nd - 1) /
					      nd / tm->p2p_bw;
				task_done(&s, t, d, st, st + dur, it);
				if (t->tp_set >= 0 && t->member == g->tp - 1) { /* the set's end */
					double mx = 0;
					for (int mem = 0; mem < g->tp; mem++)
						if (tm->tend[t->id - mem] > mx)
							mx = tm->tend[t->id - mem];
					for (int mem = 1; mem < g->tp; mem++) {
						const struct tg_task *u = &g->task[t->id - mem];
						if (tm->tend[u->id] < mx)
							stretch(&s, u, u->dev, mx, it);
					}
				}
			}
		}
		for (int j = a; j < z; j++) { /* dead: next use overwrites it, or none; an
			                               * input after its last use this iteration */
			int o = tobj[j];
			s.gread[o] = rgr[r0 + j - a];
			if (!s.gread[o] || (g->obj[o].kind == TG_O_INPUT && rwr[r0 + j - a])) {
				for (int e = 0; e < nd; e++)
					drop(&s, e, o);
				host_disk_drop(&s, o);
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
	free(twr);
	free(rdn);
	free(rgr);
	free(rwr);
	free(rgn);
	free(s.gnext);
	free(gpos);
	free(s.res);
	free(s.host);
	free(s.disk);
	free(s.hpin);
	free(s.fly);
	free(s.fly_dev);
	free(s.fly_out);
	free(s.fly_dep);
	free(s.fly_end);
	free(s.skip);
	free(s.hstamp);
	for (int d = 0; s.pool && d < nd; d++)
		sp_pool_fini(&s.pool[d]);
	free(s.pool);
	if (s.hpool)
		sp_pool_fini(s.hpool);
	free(s.hpool);
	free(s.hblk);
	free(s.blk);
	free(s.owners);
	free(s.gread);
	free(s.dnext);
	free(s.stamp);
	free(s.used);
	free(pin);
	free(perm);
	return rc;
}

int tg_sim_swap(const struct tg_graph *g, uint64_t capacity, int writeback_clean,
                struct tg_swap *out)
{
	return replay(g, capacity, writeback_clean, NULL, out);
}

int tg_sim_time(const struct tg_graph *g, const struct tg_plan *p, const struct tg_hw *hw,
                int writeback_clean, struct tg_swap *sw, struct tg_time *out)
{
	SP_CHECK_ARG(g && p && hw && sw && out, "taskgraph: null argument to tg_sim_time");
	SP_CHECK_ARG(hw->ndev > 0 && hw->flops > 0 && hw->h2d_bw > 0 && hw->d2h_bw > 0,
	             "taskgraph: hw needs devices, FLOP/s and H2D/D2H bandwidths > 0");
	int nd = g->ndev, no = g->nobj;
	struct timing m = {.flops = hw->flops,
	                   .h2d_bw = hw->h2d_bw,
	                   .d2h_bw = hw->d2h_bw,
	                   .link_bw = hw->host_link_bw > 0 ? hw->host_link_bw : hw->h2d_bw * nd,
	                   .p2p_bw = hw->p2p_bw > 0 ? hw->p2p_bw : hw->h2d_bw / 2,
	                   .cpu_upd_bw = hw->mem_bw > 0 ? hw->mem_bw / 20 : 1e10,
	                   .disk_bw = hw->disk_bw > 0 ? hw->disk_bw : 1e9,
	                   .lookahead = 3};
	m.dev_free = calloc((size_t)nd * 4, sizeof(double));
	m.wend = calloc((size_t)no * 2 + 1, sizeof(double));
	m.dend = calloc((size_t)nd * no + 1, sizeof(double));
	m.tend = calloc((size_t)g->ntask + 1, sizeof(double));
	m.starts = calloc((size_t)nd * m.lookahead, sizeof(double));
	m.nstart = calloc((size_t)nd, sizeof(int));
	int rc = 0;
	if (!m.dev_free || !m.wend || !m.dend || !m.tend || !m.starts || !m.nstart) {
		rc = sp_error(-ENOMEM, "taskgraph: timing of %d tasks", g->ntask);
		goto out;
	}
	m.h2d_q = m.dev_free + nd;
	m.d2h_q = m.h2d_q + nd;
	m.p2p_q = m.d2h_q + nd;
	m.uend = m.wend + no;
	rc = replay(g, hw->capacity, writeback_clean, &m, sw);
	if (rc == 0) {
		struct tg_time t;
		SP_CHECK_GOTO(tg_time_predict(g, p, hw, sw, &t), rc, out);
		/* the middle iteration, per step of it */
		t.iter_s = (m.iter_end[1] - m.iter_end[0]) / tg_graph_steps(g);
		*out = t;
	}
out:
	free(m.dev_free);
	free(m.wend);
	free(m.dend);
	free(m.tend);
	free(m.starts);
	free(m.nstart);
	return rc;
}

static uint64_t sum_link(const struct tg_swap *sw, int link)
{
	uint64_t b = 0;
	for (int k = 0; k < TG_NOKIND; k++)
		b += sw->bytes[link][k];
	return b;
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
	double disk = (double)(sum_link(sw, TG_L_H2DISK) + sum_link(sw, TG_L_DISK2H)) /
	              (hw->disk_bw > 0 ? hw->disk_bw : 1e9);
	double xchg = 0; /* tensor parallelism: the busiest device's exchanges */
	for (int d = 0; d < g->ndev && g->tp > 1; d++) {
		double b = 0;
		for (int i = 0; i < g->ntask; i++)
			b += g->task[i].dev == d ? g->task[i].xchg_bytes : 0;
		if (b > xchg)
			xchg = b;
	}
	double tr =
	    (h2d > d2h ? h2d : d2h) + pp + disk + xchg / (hw->p2p_bw > 0 ? hw->p2p_bw : hw->h2d_bw);
	double comp = g->makespan_units / hw->flops;
	double upd = 0;
	if (p->upd_cpu) /* CPU update streams weights+grads+opt state through host memory */
		for (int o = 0; o < g->nobj; o++)
			if (g->obj[o].kind == TG_O_WEIGHT)
				upd += 8.0 * (double)g->obj[o].bytes /
				       (hw->mem_bw > 0 ? hw->mem_bw / 20 : 1e10);
	for (int mi = 0; p->upd_cpu && mi < g->nmodels; mi++) /* 2BW: W is Wnew's copy, 2x */
		for (int i = 0; g->mobj[mi].Wnew &&
		                i < g->mobj[mi].nrep * g->mobj[mi].P * (g->tp > 1 ? g->tp : 1);
		     i++)
			if (g->mobj[mi].Wnew[i] >= 0)
				upd -= 6.0 * (double)g->obj[g->mobj[mi].W[i]].bytes /
				       (hw->mem_bw > 0 ? hw->mem_bw / 20 : 1e10);
	/* per step: the program's makespan and transfers over its steps, the
	 * update once a step */
	double ns = tg_graph_steps(g);
	struct tg_time t = {
	    .compute_s = comp / ns + upd, .transfer_s = tr / ns, .bubble = g->bubble};
	/* Transfers add to compute. The executor prefetches, but measured on the
	 * model backend (make bench-schedules) it hides little of them: swapped
	 * stashes are needed by the very backward that follows, the host link is
	 * shared, and an all-reduce waits for every replica. max(compute,
	 * transfers) underestimated transfer-bound plans by up to 60%; the sum is
	 * within about 30% on those and exact where transfers are small. */
	t.iter_s = t.compute_s + t.transfer_s;
	*out = t;
	return 0;
}

void tg_graph_set_hw(struct tg_graph *g, const struct tg_hw *hw)
{
	g->size_class_bits = hw->size_class_bits;
	g->size_class_min = hw->size_class_min;
	g->dev_align = hw->dev_align;
	g->host_capacity = hw->host_capacity;
	g->host_align = hw->host_align;
}
