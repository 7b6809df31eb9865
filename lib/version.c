/* version.c: the library's version string (xseg_version), a leaf that the
 * monitoring files below the entry points (shm.c) can name. */
#include "xseg.h"

const char *xseg_version(void)
{
    return XSEG_VERSION_STRING;
}
