/* tests/shim/cuprog_resolve.c — what the program gets when it asks for driver
 * functions, with or without the shim (SHIM_EXPECTED=1 when preloaded):
 *   - an entry point the shim does not handle is the driver's own, by every
 *     path (direct, dlsym, cuGetProcAddress);
 *   - cuMemAlloc at version 3010 is the 32-bit v1 ABI, the driver's own;
 *     at 12000 it is cuMemAlloc_v2, the shim's wrapper;
 *   - cuLaunchKernel with the per-thread flag is the _ptsz variant;
 *   - "cuGetProcAddress" itself resolves to the shim's resolver;
 *   - dlsym(RTLD_NEXT, ...) still resolves relative to the caller;
 *   - cuIpcGetMemHandle on managed memory is refused with a CUDA error.
 * Prints one line per check and "resolve: ok" at the end; exit 1 on a failure.
 */
#include "tests/shim/fakecu.h"

#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fails;

static void expect(int ok, const char *what)
{
	printf("%s: %s\n", ok ? "ok  " : "FAIL", what);
	if (!ok)
		fails++;
}

/* The file that defines p: "shim", "driver" or something else. */
static const char *owner(void *p)
{
	Dl_info di;
	if (!p || !dladdr(p, &di) || !di.dli_fname)
		return "?";
	if (strstr(di.dli_fname, "libspill-preload"))
		return "shim";
	if (strstr(di.dli_fname, "libcuda.so"))
		return "driver";
	return di.dli_fname;
}

static const char *sym(void *p)
{
	Dl_info di;
	return p && dladdr(p, &di) && di.dli_sname ? di.dli_sname : "?";
}

typedef CUresult (*gpa_fn)(const char *, void **, int, cuuint64_t,
                           CUdriverProcAddressQueryResult *);

int main(void)
{
	int shim = getenv("SHIM_EXPECTED") && atoi(getenv("SHIM_EXPECTED"));
	const char *wrapped = shim ? "shim" : "driver";
	void *h = dlopen("libcuda.so.1", RTLD_NOW);
	gpa_fn gpa = h ? (gpa_fn)dlsym(h, "cuGetProcAddress_v2") : NULL;
	expect(gpa && !strcmp(owner((void *)gpa), wrapped),
	       "dlsym(cuGetProcAddress_v2) is wrapped");
	if (!gpa)
		return 1;
	CUdriverProcAddressQueryResult st;
	void *p = NULL;

	/* not handled: the driver's function, whichever way */
	expect(gpa("cuDeviceGetName", &p, 12000, 0, &st) == CUDA_SUCCESS &&
	           st == CU_GET_PROC_ADDRESS_SUCCESS && p == (void *)&cuDeviceGetName &&
	           !strcmp(owner(p), "driver"),
	       "cuDeviceGetName passes through unchanged");
	expect(dlsym(h, "cuStreamQuery") == (void *)&cuStreamQuery &&
	           !strcmp(owner((void *)&cuStreamQuery), "driver"),
	       "dlsym(cuStreamQuery) passes through unchanged");
	p = (void *)1;
	expect(gpa("cuNoSuchFunction", &p, 12000, 0, &st) == CUDA_ERROR_NOT_FOUND && !p &&
	           st == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND,
	       "an unknown name gets the driver's answer");

	/* versions pick the ABI */
	expect(gpa("cuMemAlloc", &p, 3010, 0, &st) == CUDA_SUCCESS &&
	           !strcmp(sym(p), "cuMemAlloc") && !strcmp(owner(p), "driver"),
	       "cuMemAlloc at 3010 is the driver's 32-bit v1");
	expect(gpa("cuMemAlloc", &p, 12000, 0, &st) == CUDA_SUCCESS &&
	           !strcmp(sym(p), "cuMemAlloc_v2") && !strcmp(owner(p), wrapped),
	       "cuMemAlloc at 12000 is cuMemAlloc_v2, wrapped");
	expect(gpa("cuLaunchKernel", &p, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
	           &st) == CUDA_SUCCESS &&
	           !strcmp(sym(p), "cuLaunchKernel_ptsz") && !strcmp(owner(p), wrapped),
	       "cuLaunchKernel per-thread is cuLaunchKernel_ptsz, wrapped");
	expect(gpa("cuLaunchKernel", &p, 12000, 0, &st) == CUDA_SUCCESS &&
	           !strcmp(sym(p), "cuLaunchKernel") && !strcmp(owner(p), wrapped),
	       "cuLaunchKernel legacy is cuLaunchKernel, wrapped");
	expect(gpa("cuGetProcAddress", &p, 12000, 0, &st) == CUDA_SUCCESS &&
	           !strcmp(sym(p), "cuGetProcAddress_v2") && !strcmp(owner(p), wrapped),
	       "cuGetProcAddress resolves to the wrapped resolver");
	expect(gpa("cuGetProcAddress", &p, 11030, 0, &st) == CUDA_SUCCESS &&
	           !strcmp(sym(p), "cuGetProcAddress") && !strcmp(owner(p), wrapped),
	       "cuGetProcAddress at 11030 is the 4-argument one, wrapped");

	/* RTLD_NEXT from here: libc's getpid, not something else */
	void *gp = dlsym(RTLD_NEXT, "getpid");
	expect(gp && strstr(owner(gp), "libc"), "dlsym(RTLD_NEXT, getpid) finds libc's");

	/* the 32-bit v1 ABI still works through the shim (not tracked) */
	CUdevice dev;
	CUcontext ctx;
	if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) ||
	    cuCtxSetCurrent(ctx))
		return 1;
	typedef CUresult (*alloc_v1)(unsigned int *, unsigned int);
	alloc_v1 a1 = NULL;
	unsigned int small = 0;
	CUresult r1 = CUDA_ERROR_UNKNOWN;
	if (gpa("cuMemAlloc", (void **)&a1, 3010, 0, &st) == CUDA_SUCCESS && a1)
		r1 = a1(&small, 4096);
	expect(r1 == CUDA_SUCCESS || r1 == CUDA_ERROR_OUT_OF_MEMORY,
	       "cuMemAlloc v1 answers with its own ABI");
	if (r1 == CUDA_SUCCESS)
		expect(cuMemFree((CUdeviceptr)small) == CUDA_SUCCESS, "a v1 allocation frees");

	/* IPC of managed memory: a CUDA error, never a crash */
	CUdeviceptr d = 0;
	CUipcMemHandle ih;
	expect(cuMemAlloc(&d, 1 << 20) == CUDA_SUCCESS, "cuMemAlloc");
	CUresult ri = cuIpcGetMemHandle(&ih, d);
	expect(shim ? ri == CUDA_ERROR_NOT_SUPPORTED : ri == CUDA_SUCCESS,
	       shim ? "cuIpcGetMemHandle of managed memory is refused"
	            : "cuIpcGetMemHandle works without the shim");
	CUdeviceptr base = 0;
	size_t size = 0;
	expect(cuMemGetAddressRange(&base, &size, d + 100) == CUDA_SUCCESS && base == d &&
	           size == (1 << 20),
	       "cuMemGetAddressRange gives the allocation as asked");
	expect(cuMemFree(d) == CUDA_SUCCESS, "cuMemFree");
	printf("resolve: %s\n", fails ? "FAILED" : "ok");
	return fails ? 1 : 0;
}
