/* driver_none.c: the CUDA backend's stand-in when the library is built
 * without the CUDA toolkit (no cuda.h): no table, never available. */
#include "driver.h"
#include "driver_cuda.h"

const xseg_driver *const xseg_driver_cuda_ptr = NULL;

int xseg_cuda_available(void)
{
    return 0;
}

int xseg_cuda_device_count(void)
{
    return 0;
}

void *xseg_cuda_sym(const char *name)
{
    (void)name;
    return NULL;
}
