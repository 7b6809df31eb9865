/* history.c: the ring buffer of the last N allocator events (conf key
 * history) and its JSON rendering.  STUB: owned by the monitoring work. */
#include "internal.h"

void xseg_hist_add(xseg_t *xs, xev_kind kind, uintptr_t addr, size_t size, void *stream)
{
    (void)xs; (void)kind; (void)addr; (void)size; (void)stream;
}

xseg_status xseg_history_json(xseg_t *xs, char *buf, size_t cap, size_t *len)
{
    (void)buf; (void)cap; (void)len;
    return xseg_fail(xs, XSEG_ERR_INTERNAL, "xseg_history_json: not implemented yet");
}
