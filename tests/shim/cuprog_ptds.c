/* tests/shim/cuprog_ptds.c — cuprog_workset built for the per-thread default
 * stream: its copies reach the driver as the _ptds exports and its launches
 * as cuLaunchKernel_ptsz (cuGetProcAddress with the per-thread flag). */
#define CUDA_API_PER_THREAD_DEFAULT_STREAM 1
#include "cuprog_workset.c"
