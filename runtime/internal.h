/* runtime/internal.h — what the runtime's sources share; only runtime/ includes it. */
#ifndef SP_RUNTIME_INTERNAL_H
#define SP_RUNTIME_INTERNAL_H

#include "runtime/runtime.h"

/* The vmm place of a task's device (RT_HOST -> VMM_HOST). */
static inline int rt_place(int dev)
{
	return dev == RT_HOST ? VMM_HOST : dev;
}

/* The counter an object's references are ranked by (rt_prog.ref_rank): its
 * own, or its replica set's (rebinding moves references between the set's
 * members, never out of the set). Counters: nobj + nrset. */
static inline int rt_rank_key(const struct rt_prog *p, int obj)
{
	return p->obj[obj].rset >= 0 ? p->nobj + p->obj[obj].rset : obj;
}

#endif
