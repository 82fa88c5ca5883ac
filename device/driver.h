/* device/driver.h — the driver backend: one GPU through a table of CUDA driver
 * entry points the caller resolved.
 *
 * The preload shim lives inside someone else's CUDA program: it must run its
 * own copies, maps and events in the program's context and through the real
 * driver functions, never through its own hooks and never through a second
 * cudart. So this backend links nothing from CUDA; it calls exactly the
 * functions in struct dev_driver_api (concrete exports such as cuMemcpyAsync or
 * cuMemAlloc_v2, resolved by the caller) in the context given there. One device
 * (index 0). Kernels: only CPU kernels on DEV_HOST streams (as host functions);
 * device kernels are the program's business. Everything else of device.h works.
 * Built only with the CUDA toolkit's headers (SPILL_HAVE_CUDA); without them
 * dev_open of DEV_BACKEND_DRIVER is -ENODEV.
 */
#ifndef SP_DEVICE_DRIVER_H
#define SP_DEVICE_DRIVER_H

#include "device/device.h"

#if SPILL_HAVE_CUDA
#include <cuda.h>

/* The entry points the backend calls, each with its concrete ABI. */
struct dev_driver_api {
	CUcontext ctx; /* made current (pushed) around each call when it is not */
	CUdevice device;
	CUresult (*ctx_get_current)(CUcontext *);
	CUresult (*ctx_push)(CUcontext);  /* cuCtxPushCurrent_v2 */
	CUresult (*ctx_pop)(CUcontext *); /* cuCtxPopCurrent_v2 */
	CUresult (*get_error_string)(CUresult, const char **);
	CUresult (*device_total_mem)(size_t *, CUdevice); /* cuDeviceTotalMem_v2 */
	CUresult (*device_get_name)(char *, int, CUdevice);
	CUresult (*mem_alloc)(CUdeviceptr *, size_t); /* cuMemAlloc_v2 */
	CUresult (*mem_free)(CUdeviceptr);            /* cuMemFree_v2 */
	CUresult (*host_alloc)(void **, size_t, unsigned int);
	CUresult (*host_free)(void *);
	CUresult (*addr_reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
	CUresult (*addr_free)(CUdeviceptr, size_t);
	CUresult (*mem_create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
	                       unsigned long long);
	CUresult (*mem_release)(CUmemGenericAllocationHandle);
	CUresult (*mem_map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
	                    unsigned long long);
	CUresult (*mem_unmap)(CUdeviceptr, size_t);
	CUresult (*mem_set_access)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
	CUresult (*granularity)(size_t *, const CUmemAllocationProp *,
	                        CUmemAllocationGranularity_flags);
	CUresult (*stream_create)(CUstream *, unsigned int);
	CUresult (*stream_destroy)(CUstream); /* cuStreamDestroy_v2 */
	CUresult (*stream_sync)(CUstream);
	CUresult (*stream_wait_event)(CUstream, CUevent, unsigned int);
	CUresult (*event_create)(CUevent *, unsigned int);
	CUresult (*event_destroy)(CUevent); /* cuEventDestroy_v2 */
	CUresult (*event_record)(CUevent, CUstream);
	CUresult (*event_query)(CUevent);
	CUresult (*event_sync)(CUevent);
	CUresult (*event_elapsed)(float *, CUevent, CUevent); /* cuEventElapsedTime_v2 */
	CUresult (*memcpy_async)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
	CUresult (*memset_d8_async)(CUdeviceptr, unsigned char, size_t, CUstream);
	CUresult (*launch_host_func)(CUstream, CUhostFn, void *);
	/* optional: waits for all the context's work before a host chunk leaves a
	 * device address (NULL: only the backend's own streams are waited for) */
	CUresult (*ctx_sync)(void);
};

/* dev_config.driver for DEV_BACKEND_DRIVER: must outlive the context. */

/* Work queued on the program's stream cs after this call waits for e. */
int dev_driver_stream_wait(struct dev_event *e, CUstream cs) SP_MUST_CHECK;
/* Records e on the program's stream cs (a later record replaces the capture). */
int dev_driver_event_record(struct dev_event *e, CUstream cs) SP_MUST_CHECK;
#endif

#endif
