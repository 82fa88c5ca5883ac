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

/* ---- layer sequences on a stream ---- */
static int kn_stream_runner(void *ctx, const struct dev_kernel *k, const void *args, size_t size,
                            struct dev_cost cost)
{
	return dev_launch(ctx, k, args, size, cost);
}

#define KN_STREAM_RUNNER(s)                                           \
	if (!(s))                                                     \
		return sp_error(-EINVAL, "kn_layer: stream is NULL"); \
	struct kn_runner r = {kn_stream_runner, (s)}

int kn_layer_forward_launch(struct dev_stream *s, const struct kn_model_config *cfg,
                            enum kn_layer_kind kind, int B, int T, const struct kn_layer_mem *mem,
                            const struct kn_layer_io *io)
{
	KN_STREAM_RUNNER(s);
	return kn_layer_forward_run(&r, cfg, kind, B, T, mem, io);
}

int kn_layer_backward_launch(struct dev_stream *s, const struct kn_model_config *cfg,
                             enum kn_layer_kind kind, int B, int T, const struct kn_layer_mem *mem,
                             const struct kn_layer_io *io)
{
	KN_STREAM_RUNNER(s);
	return kn_layer_backward_run(&r, cfg, kind, B, T, mem, io);
}

int kn_layer_update_launch(struct dev_stream *s, const struct kn_model_config *cfg,
                           enum kn_layer_kind kind, const struct kn_layer_mem *mem,
                           const struct kn_optim_hparams *h)
{
	KN_STREAM_RUNNER(s);
	return kn_layer_update_run(&r, cfg, kind, mem, h);
}

int kn_layer_update_mixed_launch(struct dev_stream *s, const struct kn_model_config *cfg,
                                 enum kn_layer_kind kind, const struct kn_layer_mem *mem,
                                 const struct kn_optim_hparams *h)
{
	KN_STREAM_RUNNER(s);
	return kn_layer_update_mixed_run(&r, cfg, kind, mem, h);
}

int kn_layer_zero_grad_launch(struct dev_stream *s, const struct kn_model_config *cfg,
                              enum kn_layer_kind kind, const struct kn_layer_mem *mem)
{
	KN_STREAM_RUNNER(s);
	return kn_layer_zero_grad_run(&r, cfg, kind, mem);
}

int kn_block_tp_forward_launch(struct dev_stream *s, const struct kn_model_config *cfg, int t,
                               int rank, int seg, int B, int T, const struct kn_layer_mem *mem,
                               const struct kn_layer_io *io)
{
	KN_STREAM_RUNNER(s);
	return kn_block_tp_forward_run(&r, cfg, t, rank, seg, B, T, mem, io);
}

int kn_block_tp_backward_launch(struct dev_stream *s, const struct kn_model_config *cfg, int t,
                                int rank, int seg, int B, int T, const struct kn_layer_mem *mem,
                                const struct kn_layer_io *io)
{
	KN_STREAM_RUNNER(s);
	return kn_block_tp_backward_run(&r, cfg, t, rank, seg, B, T, mem, io);
}
