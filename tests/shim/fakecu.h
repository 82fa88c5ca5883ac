/* tests/shim/fakecu.h — the extras of the host-emulated CUDA driver.
 *
 * build/<variant>/tests/shim/fake/libcuda.so.1 is a CUDA driver library for
 * tests only: the subset of the driver API that the preload shim and the test
 * programs touch, implemented over spill's host backend (device memory is host
 * memory; a reserved range with nothing mapped is PROT_NONE, so a kernel that
 * touches non-resident memory crashes the test as it would fault a GPU).
 * FAKECU_DEVICES devices (default 1), each with its own memory of
 * FAKECU_DEVICE_MEM bytes and its primary context; peer copies and access work
 * between any two. Managed memory (cuMemAllocManaged) is
 * device memory of the backend that is not counted against the device; a
 * prefetch checks its arguments and counts bytes per device
 * (fakecu_prefetched_on). "Kernels" are host functions a test registers
 * here; cuModuleLoadData accepts any image and cuModuleGetFunction
 * finds a registered kernel by name. A launch packs the parameters as the
 * real driver lays them out (each at its natural alignment, at most 8) and
 * runs the function on the stream's worker thread with the packed buffer.
 * Environment: FAKECU_DEVICE_MEM (bytes, default 1 GiB) is the device's size;
 * FAKECU_COPY_BW (bytes/s, default 0 = unthrottled) throttles copies.
 */
#ifndef SP_TESTS_FAKECU_H
#define SP_TESTS_FAKECU_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A kernel's body: params is the packed parameter buffer. */
typedef void (*fakecu_kernel_fn)(const void *params);

/* Registers kernel name (copied) with nparams parameters of the given sizes.
 * Returns 0, or -1 for a bad argument or a name registered twice. */
int fakecu_register_kernel(const char *name, fakecu_kernel_fn fn, int nparams, const size_t *sizes);

/* Bytes the emulated driver copied since it was loaded, by direction. */
enum fakecu_copy { FAKECU_H2D, FAKECU_D2H, FAKECU_D2D, FAKECU_H2H, FAKECU_COPY_KINDS };
uint64_t fakecu_copied(enum fakecu_copy kind);
/* Kernels launched since load (all streams). */
uint64_t fakecu_launches(void);
/* Device bytes mapped or allocated now, and the most at once since load:
 * of device 0, and of device dev. */
uint64_t fakecu_device_used(void);
uint64_t fakecu_device_peak(void);
uint64_t fakecu_device_used_on(int dev);
uint64_t fakecu_device_peak_on(int dev);
/* Bytes of managed memory prefetched to a device (cuMemPrefetchAsync), to
 * any device and to device dev. */
uint64_t fakecu_prefetched(void);
uint64_t fakecu_prefetched_on(int dev);

#ifdef __cplusplus
}
#endif
#endif
