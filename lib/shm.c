/* shm.c: publication of live stats in /dev/shm for xseg-top (conf key
 * stats_shm).  STUB: owned by the monitoring work. */
#include "internal.h"

void xseg_shm_update(xseg_t *xs)
{
    (void)xs;
}

xseg_status xseg_monitor_init(xseg_t *xs)
{
    (void)xs;
    return XSEG_OK;
}

void xseg_monitor_fini(xseg_t *xs)
{
    (void)xs;
}
