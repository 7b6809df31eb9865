/* prom.c: Prometheus text exposition of the stats.  STUB: owned by the
 * monitoring work. */
#include "internal.h"

xseg_status xseg_stats_prometheus(xseg_t *xs, char *buf, size_t cap, size_t *len)
{
    (void)buf; (void)cap; (void)len;
    return xseg_fail(xs, XSEG_ERR_INTERNAL, "xseg_stats_prometheus: not implemented yet");
}
