/* driver_cuda.h: extras of the CUDA backend beyond the driver table
 * (driver.h): device enumeration and the loaded libcuda entry points
 * (cuda_syms.h) for other parts of the library.  Both driver_cuda.c and
 * driver_none.c (no toolkit) define what is here. */
#ifndef XSEG_DRIVER_CUDA_H
#define XSEG_DRIVER_CUDA_H

/* Number of CUDA devices the driver reports; 0 when libcuda.so.1 does not
 * load, cuInit fails or the library was built without the toolkit.  The
 * first call probes (thread-safe); later calls return the cached count. */
int xseg_cuda_device_count(void);

/* The libcuda entry point "cu<name>" of cuda_syms.h (e.g. "cuCtxSynchronize"),
 * as loaded by the CUDA backend at the ABI version the list gives, so that
 * no other file opens libcuda; cast it to that signature.  Loads libcuda on
 * first use (thread-safe).  NULL when the name is not in the list, libcuda
 * does not load, or the library was built without the toolkit. */
void *xseg_cuda_sym(const char *name);

#endif /* XSEG_DRIVER_CUDA_H */
