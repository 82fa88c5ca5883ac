/* tests/shim/cuprog_async_ptds.c — cuprog_async built for the per-thread
 * default stream: its allocations, frees and copies reach the driver as the
 * _ptsz/_ptds exports (cuMemAllocAsync_ptsz, cuMemcpy2DAsync_v2_ptsz, ...). */
#define CUDA_API_PER_THREAD_DEFAULT_STREAM 1
#include "cuprog_async.c"
