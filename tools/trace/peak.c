/* peak.c: an allocator at its mapped peak (peak.h): snapshot and stats at
 * each new high of the mapped bytes, one JSON line on request. */
#include <stdlib.h>
#include <string.h>
#include "peak.h"

/* One of xseg's JSON renderers into a malloc'd buffer, grown until it fits,
 * on one line; NULL when it fails. */
static char *render(xseg_t *xs, xseg_status (*fn)(xseg_t *, char *, size_t, size_t *))
{
    size_t cap = 1 << 16, len = 0;
    for (int tries = 0; tries < 8; tries++) {
        char *buf = malloc(cap);
        if (!buf)
            return NULL;
        xseg_status st = fn(xs, buf, cap, &len);
        if (st == XSEG_OK) {
            for (char *nl = memchr(buf, '\n', len); nl; nl = memchr(nl, '\n', buf + len - nl))
                *nl = ' '; /* one line (a newline in JSON is whitespace) */
            return buf;
        }
        free(buf);
        if (st != XSEG_ERR_BUFFER_TOO_SMALL)
            return NULL;
        cap = len + 1 > cap * 2 ? len + 1 : cap * 2;
    }
    return NULL;
}

size_t xseg_peak_mapped(xseg_t *xs, int peak)
{
    xseg_stats st = {.size = sizeof st};
    if (xseg_get_stats(xs, &st) != XSEG_OK)
        return 0;
    return peak ? st.mapped_bytes.peak : st.mapped_bytes.current;
}

int xseg_peak_see(xseg_peak *p, xseg_t *xs, size_t app_live, size_t quarantined)
{
    size_t mapped = xseg_peak_mapped(xs, 0);
    if (mapped <= p->high)
        return 0;
    char *snap = render(xs, xseg_snapshot_json), *stats = render(xs, xseg_stats_json);
    if (!snap || !stats) {
        free(snap);
        free(stats);
        return -1;
    }
    xseg_peak_clear(p);
    *p = (xseg_peak){mapped, snap, stats, app_live, quarantined, p->highs + 1};
    return 1;
}

void xseg_peak_write(FILE *f, const xseg_peak *p, size_t final_peak)
{
    fprintf(f,
            ",\"mapped\":%zu,\"mapped_peak_at_exit\":%zu,\"app_live\":%zu,"
            "\"quarantined\":%zu,\"highs\":%lu,\"stats\":%s,\"snapshot\":%s}\n",
            p->high, final_peak, p->app_live, p->quarantined, p->highs, p->stats, p->snap);
}

void xseg_peak_clear(xseg_peak *p)
{
    free(p->snap);
    free(p->stats);
    p->snap = p->stats = NULL;
    p->high = 0;
}
