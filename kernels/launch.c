/* kernels/launch.c — kn_<op>_launch(): check the args, then queue the op's
 * dev_kernel on a stream with its cost. Kept apart from ops.c so code that
 * calls kernels directly does not need the device backends linked in.
 * On a failed check nothing is queued and nothing is written. */
#include "kernels/internal.h"

#define KN_LAUNCH_(name, args)                                                                 \
	int kn_##name##_launch(struct dev_stream *s, const struct args *a)                     \
	{                                                                                      \
		SP_CHECK(kn_##name##_check(a));                                                \
		if (!s)                                                                        \
			return sp_error(-EINVAL, "kn_" #name "_launch: stream is NULL");       \
		return dev_launch(s, &kn_##name##_kernel, a, sizeof(*a), kn_##name##_cost(a)); \
	}
KN_OPS(KN_LAUNCH_)
