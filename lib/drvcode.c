/* drvcode.c: names of driver result codes (CUresult numbers), independent
 * of the backend, so messages read the same on host and cuda. */
#include "driver.h"

/* One case per code: the switch compiles to a jump table / binary search. */
const char *xseg_drv_code_name(int code)
{
    switch (code) {
    case 0: return "CUDA_SUCCESS";
    case 1: return "CUDA_ERROR_INVALID_VALUE";
    case 2: return "CUDA_ERROR_OUT_OF_MEMORY";
    case 3: return "CUDA_ERROR_NOT_INITIALIZED";
    case 4: return "CUDA_ERROR_DEINITIALIZED";
    case 5: return "CUDA_ERROR_PROFILER_DISABLED";
    case 34: return "CUDA_ERROR_STUB_LIBRARY";
    case 46: return "CUDA_ERROR_DEVICE_UNAVAILABLE";
    case 100: return "CUDA_ERROR_NO_DEVICE";
    case 101: return "CUDA_ERROR_INVALID_DEVICE";
    case 102: return "CUDA_ERROR_DEVICE_NOT_LICENSED";
    case 200: return "CUDA_ERROR_INVALID_IMAGE";
    case 201: return "CUDA_ERROR_INVALID_CONTEXT";
    case 205: return "CUDA_ERROR_MAP_FAILED";
    case 206: return "CUDA_ERROR_UNMAP_FAILED";
    case 208: return "CUDA_ERROR_ALREADY_MAPPED";
    case 211: return "CUDA_ERROR_NOT_MAPPED";
    case 214: return "CUDA_ERROR_ECC_UNCORRECTABLE";
    case 304: return "CUDA_ERROR_OPERATING_SYSTEM";
    case 400: return "CUDA_ERROR_INVALID_HANDLE";
    case 401: return "CUDA_ERROR_ILLEGAL_STATE";
    case 500: return "CUDA_ERROR_NOT_FOUND";
    case 600: return "CUDA_ERROR_NOT_READY";
    case 700: return "CUDA_ERROR_ILLEGAL_ADDRESS";
    case 701: return "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES";
    case 702: return "CUDA_ERROR_LAUNCH_TIMEOUT";
    case 709: return "CUDA_ERROR_CONTEXT_IS_DESTROYED";
    case 710: return "CUDA_ERROR_ASSERT";
    case 714: return "CUDA_ERROR_HARDWARE_STACK_ERROR";
    case 715: return "CUDA_ERROR_ILLEGAL_INSTRUCTION";
    case 716: return "CUDA_ERROR_MISALIGNED_ADDRESS";
    case 719: return "CUDA_ERROR_LAUNCH_FAILED";
    case 800: return "CUDA_ERROR_NOT_PERMITTED";
    case 801: return "CUDA_ERROR_NOT_SUPPORTED";
    case 802: return "CUDA_ERROR_SYSTEM_NOT_READY";
    case 803: return "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH";
    case 804: return "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE";
    case 999: return "CUDA_ERROR_UNKNOWN";
    default: return "CUDA_ERROR_UNRECOGNIZED";
    }
}
