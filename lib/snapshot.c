/* snapshot.c: JSON dump of every segment and block.  STUB: owned by the
 * monitoring work. */
#include "internal.h"

xseg_status xseg_snapshot_json(xseg_t *xs, char *buf, size_t cap, size_t *len)
{
    (void)buf; (void)cap; (void)len;
    return xseg_fail(xs, XSEG_ERR_INTERNAL, "xseg_snapshot_json: not implemented yet");
}
