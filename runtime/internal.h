/* runtime/internal.h — what the runtime's sources share; only runtime/ includes it. */
#ifndef SP_RUNTIME_INTERNAL_H
#define SP_RUNTIME_INTERNAL_H

#include "runtime/runtime.h"

/* The vmm place of a task's device (RT_HOST -> VMM_HOST). */
static inline int rt_place(int dev)
{
	return dev == RT_HOST ? VMM_HOST : dev;
}

#endif
