/* peak.h: an allocator at its mapped peak (xseg-replay --peak-snapshot,
 * libxseg_preload's XSEG_PRELOAD_PEAK_SNAPSHOT): the snapshot and stats
 * taken at the highest mapped bytes seen, with the caller's live bytes then,
 * written as one JSON line that tools/peak-report reads.  Not thread-safe:
 * a caller with threads holds its own lock around take and write. */
#ifndef XSEG_PEAK_H
#define XSEG_PEAK_H

#include <stddef.h>
#include <stdio.h>
#include "xseg.h"

typedef struct xseg_peak {
    size_t high;          /* mapped bytes of the kept snapshot; 0: none kept */
    char *snap, *stats;   /* malloc'd JSON on one line, or NULL */
    size_t app_live;      /* the caller's live bytes then */
    size_t quarantined;   /* the caller's freed-but-held bytes then */
    unsigned long highs;  /* snapshots taken (new highs) */
} xseg_peak;

/* xs's mapped bytes now (peak: their peak so far); 0 when unreadable. */
size_t xseg_peak_mapped(xseg_t *xs, int peak);
/* If xs's mapped bytes are above p->high, take its snapshot and stats into
 * p: 1 taken, 0 not a new high, -1 the JSON could not be rendered (host
 * memory; p unchanged). */
int xseg_peak_see(xseg_peak *p, xseg_t *xs, size_t app_live, size_t quarantined);
/* The rest of one line, after the caller's "{" and its own members
 * ("{\"pid\":12,\"device\":0"): ,"mapped":...,"mapped_peak_at_exit":
 * final_peak,"app_live","quarantined","highs","stats":{...},"snapshot":{...}}
 * and the newline.  Only when a snapshot was kept (p->snap). */
void xseg_peak_write(FILE *f, const xseg_peak *p, size_t final_peak);
void xseg_peak_clear(xseg_peak *p);

#endif
