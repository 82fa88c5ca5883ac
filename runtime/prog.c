/* runtime/prog.c — programs: objects and tasks in a topological order, checks,
 * the next-use tables the executor hints the vmm with, and binding the objects
 * to vmm objects.
 *
 * Next uses are cyclic: the program is one iteration and runs again, so the
 * next use of an object after the last task that touches it is its first use
 * in the next iteration (position + ntask). Per reference the tables keep the
 * next use anywhere and whether it reads the object (a pure write, or a use
 * by nobody, means the contents are dead after this task), and the next use
 * by a task predicted on the same place (per-place Belady).
 */
#include "runtime/internal.h"

#include "common/log.h"

#include <stdlib.h>
#include <string.h>

void rt_prog_init(struct rt_prog *p)
{
	memset(p, 0, sizeof(*p));
}

static void free_tables(struct rt_prog *p)
{
	if (p->next_pos)
		for (int i = 0; i < p->ntask; i++) {
			free(p->next_pos[i]);
			free(p->next_reads[i]);
			free(p->next_place[i]);
			free(p->ref_rank[i]);
		}
	free(p->next_pos);
	free(p->next_reads);
	free(p->next_place);
	free(p->ref_rank);
	free(p->first_use);
	p->ref_rank = NULL;
	p->next_pos = NULL;
	p->next_reads = NULL;
	p->next_place = NULL;
	p->first_use = NULL;
	p->prepared = 0;
}

void rt_prog_free(struct rt_prog *p)
{
	if (!p)
		return;
	free_tables(p);
	free(p->obj);
	free(p->task);
	free(p->ev);
	free(p->ran_on);
	free(p->refpool);
	free(p->deppool);
	free(p->rset);
	free(p->ref_orig);
	memset(p, 0, sizeof(*p));
}

int rt_prog_obj(struct rt_prog *p, uint64_t bytes, enum vmm_kind kind, const char *name, int *out)
{
	SP_CHECK_ARG(p && out, "rt_prog_obj: NULL argument");
	SP_CHECK_ARG((unsigned)kind < VMM_KINDS, "rt_prog_obj: kind %d is not a vmm kind",
	             (int)kind);
	if (p->nobj == p->capobj) {
		int nc = p->capobj ? 2 * p->capobj : 256;
		struct rt_obj *no = realloc(p->obj, (size_t)nc * sizeof(*no));
		if (!no)
			return sp_error(-ENOMEM, "rt_prog_obj: %d objects", nc);
		p->obj = no;
		p->capobj = nc;
	}
	struct rt_obj *o = &p->obj[p->nobj];
	memset(o, 0, sizeof(*o));
	o->bytes = bytes;
	o->kind = kind;
	o->rset = -1;
	snprintf(o->name, sizeof(o->name), "%s", name ? name : "obj");
	free_tables(p);
	*out = p->nobj++;
	return 0;
}

/* Refs and deps live in pools; tasks keep offsets until prepare turns them into
 * pointers (the pools move while growing). */
int rt_prog_task(struct rt_prog *p, const struct rt_task *t, const struct rt_ref *refs, int nref,
                 const int *deps, int ndep, int *out)
{
	SP_CHECK_ARG(p && t && (refs || !nref) && (deps || !ndep) && nref >= 0 && ndep >= 0,
	             "rt_prog_task: bad arguments");
	if (p->ntask == p->captask) {
		int nc = p->captask ? 2 * p->captask : 256;
		struct rt_task *nt = realloc(p->task, (size_t)nc * sizeof(*nt));
		if (!nt)
			return sp_error(-ENOMEM, "rt_prog_task: %d tasks", nc);
		p->task = nt;
		p->captask = nc;
	}
	if (p->nrefpool + (size_t)nref > p->caprefpool) {
		size_t nc = p->caprefpool ? 2 * p->caprefpool : 1024;
		while (nc < p->nrefpool + (size_t)nref)
			nc *= 2;
		struct rt_ref *np = realloc(p->refpool, nc * sizeof(*np));
		if (!np)
			return sp_error(-ENOMEM, "rt_prog_task: %zu references", nc);
		p->refpool = np;
		p->caprefpool = nc;
	}
	if (p->ndeppool + (size_t)ndep > p->capdeppool) {
		size_t nc = p->capdeppool ? 2 * p->capdeppool : 1024;
		while (nc < p->ndeppool + (size_t)ndep)
			nc *= 2;
		int *np = realloc(p->deppool, nc * sizeof(*np));
		if (!np)
			return sp_error(-ENOMEM, "rt_prog_task: %zu dependencies", nc);
		p->deppool = np;
		p->capdeppool = nc;
	}
	struct rt_task *nt = &p->task[p->ntask];
	*nt = *t;
	nt->nref = nref;
	nt->ndep = ndep;
	nt->ref = (struct rt_ref *)(uintptr_t)p->nrefpool;
	nt->dep = (int *)(uintptr_t)p->ndeppool;
	if (nref)
		memcpy(p->refpool + p->nrefpool, refs, (size_t)nref * sizeof(*refs));
	if (ndep)
		memcpy(p->deppool + p->ndeppool, deps, (size_t)ndep * sizeof(*deps));
	p->nrefpool += (size_t)nref;
	p->ndeppool += (size_t)ndep;
	free_tables(p);
	*out = p->ntask++;
	return 0;
}

int rt_prog_replicas(struct rt_prog *p, const int *objs, int n, int accum)
{
	SP_CHECK_ARG(p && objs && n >= 1 && n <= DEV_MAX, "rt_prog_replicas: bad arguments");
	for (int d = 0; d < n; d++) {
		SP_CHECK_ARG(objs[d] >= 0 && objs[d] < p->nobj,
		             "rt_prog_replicas: object %d does not exist", objs[d]);
		SP_CHECK_ARG(p->obj[objs[d]].rset < 0,
		             "rt_prog_replicas: object %s is in a replica set already",
		             p->obj[objs[d]].name);
		for (int e = 0; e < d; e++)
			SP_CHECK_ARG(objs[e] != objs[d], "rt_prog_replicas: object %s twice",
			             p->obj[objs[d]].name);
	}
	if (p->nrset == p->caprset) {
		int nc = p->caprset ? 2 * p->caprset : 64;
		int *nr = realloc(p->rset, (size_t)nc * DEV_MAX * sizeof(int));
		if (!nr)
			return sp_error(-ENOMEM, "rt_prog_replicas: %d sets", nc);
		p->rset = nr;
		p->caprset = nc;
	}
	int s = p->nrset++;
	for (int d = 0; d < DEV_MAX; d++)
		p->rset[s * DEV_MAX + d] = d < n ? objs[d] : -1;
	for (int d = 0; d < n; d++) {
		p->obj[objs[d]].rset = s;
		p->obj[objs[d]].accum = !!accum;
	}
	free_tables(p);
	return 0;
}

/* Task pointers into the pools; offsets are kept in the low bits until then. */
static void fix_pointers(struct rt_prog *p)
{
	size_t r = 0, d = 0;
	for (int i = 0; i < p->ntask; i++) {
		struct rt_task *t = &p->task[i];
		t->ref = p->refpool + r;
		t->dep = p->deppool + d;
		r += (size_t)t->nref;
		d += (size_t)t->ndep;
	}
}

static int reads(enum vmm_access m)
{
	return m == VMM_READ || m == VMM_WRITE;
}

/* Place slot of a task's device for the per-place tables: devices, then the CPU. */
static int place_slot(const struct rt_prog *p, int dev)
{
	return dev == RT_HOST ? p->nplaces - 1 : dev;
}

int rt_prog_prepare(struct rt_prog *p)
{
	SP_CHECK_ARG(p, "rt_prog_prepare: NULL program");
	SP_CHECK_ARG(p->ntask > 0, "rt_prog_prepare: the program has no tasks");
	free_tables(p);
	fix_pointers(p);
	int rc = 0, maxdev = 0;
	for (int i = 0; i < p->ntask; i++) {
		const struct rt_task *t = &p->task[i];
		if (t->dev != RT_HOST && (t->dev < 0 || t->dev >= DEV_MAX))
			return sp_error(-EINVAL,
			                "task %d (%s): device %d is not a device or RT_HOST", i,
			                t->name, t->dev);
		if (t->dev + 1 > maxdev)
			maxdev = t->dev + 1;
		if (!t->fn)
			return sp_error(-EINVAL, "task %d (%s) has no callback", i, t->name);
		for (int r = 0; r < t->nref; r++) {
			const struct rt_ref *f = &t->ref[r];
			if (f->obj < 0 || f->obj >= p->nobj)
				return sp_error(-EINVAL, "task %d (%s): object %d does not exist",
				                i, t->name, f->obj);
			if (f->mode != VMM_READ && f->mode != VMM_WRITE && f->mode != VMM_OVERWRITE)
				return sp_error(-EINVAL, "task %d (%s): access %d of object %s", i,
				                t->name, (int)f->mode, p->obj[f->obj].name);
			for (int q = 0; q < r; q++)
				if (t->ref[q].obj == f->obj)
					return sp_error(
					    -EINVAL,
					    "task %d (%s) lists object %s twice (give one "
					    "access: WRITE reads and writes)",
					    i, t->name, p->obj[f->obj].name);
		}
		for (int d = 0; d < t->ndep; d++)
			if (t->dep[d] < 0 || t->dep[d] >= i)
				return sp_error(
				    -EINVAL,
				    "task %d (%s) depends on task %d: dependencies must "
				    "be earlier tasks",
				    i, t->name, t->dep[d]);
		if ((t->flags & RT_TASK_COLLECTIVE) && (!t->constrained || t->dev == RT_HOST))
			return sp_error(-EINVAL,
			                "task %d (%s): a collective member runs on a fixed device",
			                i, t->name);
	}
	p->nplaces = maxdev + 1;
	int n = p->ntask, np = p->nplaces;
	p->next_pos = calloc((size_t)n, sizeof(*p->next_pos));
	p->next_reads = calloc((size_t)n, sizeof(*p->next_reads));
	p->next_place = calloc((size_t)n, sizeof(*p->next_place));
	p->ref_rank = calloc((size_t)n, sizeof(*p->ref_rank));
	p->first_use = malloc((size_t)p->nobj * (size_t)(np + 1) * sizeof(int));
	int *last = malloc((size_t)p->nobj * (size_t)(np + 1) * sizeof(int));
	uint8_t *lastr = malloc((size_t)p->nobj);
	uint32_t *seen = calloc((size_t)(p->nobj + p->nrset) + 1, sizeof(uint32_t));
	free(p->ref_orig);
	p->ref_orig = malloc((p->nrefpool ? p->nrefpool : 1) * sizeof(*p->ref_orig));
	if (!p->next_pos || !p->next_reads || !p->next_place || !p->ref_rank || !p->first_use ||
	    !last || !lastr || !seen || !p->ref_orig) {
		rc = sp_error(-ENOMEM, "rt_prog_prepare: tables for %d tasks", n);
		goto out;
	}
	for (int i = 0; i < n; i++) {
		int k = p->task[i].nref ? p->task[i].nref : 1;
		p->next_pos[i] = malloc((size_t)k * sizeof(uint64_t));
		p->next_reads[i] = malloc((size_t)k);
		p->next_place[i] = malloc((size_t)k * sizeof(uint64_t));
		p->ref_rank[i] = malloc((size_t)k * sizeof(uint32_t));
		if (!p->next_pos[i] || !p->next_reads[i] || !p->next_place[i] || !p->ref_rank[i]) {
			rc = sp_error(-ENOMEM, "rt_prog_prepare: tables for %d tasks", n);
			goto out;
		}
	}
	/* Walk two iterations backwards: "last" holds, per object (index 0) and
	 * per (object, place) (1 + slot), the nearest later use seen so far. */
	size_t stride = (size_t)np + 1;
	for (size_t i = 0; i < (size_t)p->nobj * stride; i++)
		last[i] = -1;
	for (int pos = 2 * n - 1; pos >= 0; pos--) {
		int i = pos % n;
		const struct rt_task *t = &p->task[i];
		int slot = place_slot(p, t->dev);
		for (int r = 0; r < t->nref; r++) {
			int o = t->ref[r].obj;
			if (pos < n) {
				int nx = last[(size_t)o * stride];
				int nxp = last[(size_t)o * stride + 1 + (size_t)slot];
				p->next_pos[i][r] = (uint64_t)nx;
				p->next_reads[i][r] = lastr[o];
				p->next_place[i][r] = nxp < 0 ? VMM_NO_HINT : (uint64_t)nxp;
			}
		}
		for (int r = 0; r < t->nref; r++) {
			int o = t->ref[r].obj;
			last[(size_t)o * stride] = pos;
			last[(size_t)o * stride + 1 + (size_t)slot] = pos;
			lastr[o] = (uint8_t)reads(t->ref[r].mode);
		}
	}
	for (size_t i = 0; i < (size_t)p->nobj * stride; i++)
		p->first_use[i] = last[i]; /* first use in the first iteration, or -1 */
	for (int i = 0; i < n; i++)
		for (int r = 0; r < p->task[i].nref; r++)
			p->ref_rank[i][r] = ++seen[rt_rank_key(p, p->task[i].ref[r].obj)];
	if (p->nrefpool)
		memcpy(p->ref_orig, p->refpool, p->nrefpool * sizeof(*p->ref_orig));
	p->prepared = 1;
out:
	free(last);
	free(lastr);
	free(seen);
	if (rc)
		free_tables(p);
	return rc;
}

uint64_t rt_prog_min_budget(const struct rt_prog *p, const struct vmm *v, int *task)
{
	uint64_t best = 0;
	int bt = -1;
	for (int i = 0; i < p->ntask; i++) {
		const struct rt_task *t = &p->task[i];
		if (t->dev == RT_HOST && t->constrained)
			continue;
		uint64_t ws = 0;
		for (int r = 0; r < t->nref; r++) {
			uint64_t b = p->obj[t->ref[r].obj].bytes;
			ws += v && b ? vmm_device_footprint(v, b) : b;
		}
		if (ws > best) {
			best = ws;
			bt = i;
		}
	}
	if (task)
		*task = bt;
	return best;
}

int rt_prog_bind(struct rt_ctx *rt, struct rt_prog *p)
{
	SP_CHECK_ARG(rt && p, "rt_prog_bind: NULL argument");
	SP_CHECK_ARG(p->prepared && p->ntask > 0, "rt_prog_bind: prepare the program first");
	int rc = 0, i;
	for (i = 0; i < p->ntask; i++) {
		const struct rt_task *t = &p->task[i];
		if (t->dev != RT_HOST && t->dev >= rt->ndev)
			return sp_error(-EINVAL,
			                "task %d (%s) is for device %d; the context has %d", i,
			                t->name, t->dev, rt->ndev);
	}
	p->ev = calloc((size_t)p->ntask, sizeof(*p->ev));
	p->ran_on = malloc((size_t)p->ntask * sizeof(int));
	if (!p->ev || !p->ran_on) {
		rc = sp_error(-ENOMEM, "rt_prog_bind: %d task events", p->ntask);
		goto fail;
	}
	for (i = 0; i < p->ntask; i++) {
		p->ran_on[i] = -1;
		SP_CHECK_GOTO(dev_event_create(rt->dev, &p->ev[i]), rc, fail);
	}
	for (i = 0; i < p->nobj; i++) {
		struct rt_obj *o = &p->obj[i];
		o->vid = 0;
		if (!o->bytes)
			continue;
		struct vmm_obj_desc d = {.bytes = o->bytes, .kind = o->kind, .name = o->name};
		SP_CHECK_GOTO(vmm_obj_create(rt->vmm, &d, &o->vid), rc, fail);
	}
	return 0;
fail:
	rt_prog_unbind(rt, p);
	return rc;
}

void rt_prog_unbind(struct rt_ctx *rt, struct rt_prog *p)
{
	if (!rt || !p)
		return;
	for (int i = 0; i < p->nobj; i++) {
		struct rt_obj *o = &p->obj[i];
		if (o->vid && vmm_obj_destroy(rt->vmm, o->vid) < 0)
			SP_WARN(RT, "unbind %s: %s", o->name, sp_last_error());
		o->vid = 0;
	}
	for (int i = 0; p->ev && i < p->ntask; i++)
		if (p->ev[i] && dev_event_destroy(p->ev[i]) < 0)
			SP_WARN(RT, "unbind: %s", sp_last_error());
	for (int i = 0; p->ev_start && i < p->ntask; i++)
		if (p->ev_start[i] && dev_event_destroy(p->ev_start[i]) < 0)
			SP_WARN(RT, "unbind: %s", sp_last_error());
	free(p->ev_start);
	p->ev_start = NULL;
	free(p->ev);
	free(p->ran_on);
	p->ev = NULL;
	p->ran_on = NULL;
}
