/* driver_cuda.h: extras of the CUDA backend beyond the driver table
 * (driver.h): device enumeration for other parts of the library.  Both
 * driver_cuda.c and driver_none.c (no toolkit) define what is here. */
#ifndef XSEG_DRIVER_CUDA_H
#define XSEG_DRIVER_CUDA_H

/* Number of CUDA devices the driver reports; 0 when libcuda.so.1 does not
 * load, cuInit fails or the library was built without the toolkit.  The
 * first call probes (thread-safe); later calls return the cached count. */
int xseg_cuda_device_count(void);

#endif /* XSEG_DRIVER_CUDA_H */
