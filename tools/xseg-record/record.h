/* record.h: xseg-record's trace in memory: the alloc/free events of an
 * `xseg-trace v1` file (shared/traces/README.md) with ids mapped to dense
 * slots, so the replay keeps its pointers in a plain array. */
#ifndef XSEG_RECORD_H
#define XSEG_RECORD_H

#include <stddef.h>
#include <stdint.h>

typedef struct rec_event {
    uint64_t bytes;   /* alloc: size; free: 0 */
    uint64_t stream;  /* alloc: stream number */
    uint32_t slot;
    uint8_t is_free;
} rec_event;

typedef struct rec_trace {
    rec_event *ev;
    size_t n, cap;
    uint32_t nslots;
    size_t peak_index;     /* event after which requested live bytes peak */
    uint64_t peak_live;
} rec_trace;

/* Read a trace (plain text, or gzip through `gzip -dc`).  0, or -1 with a
 * message in err. */
int rec_load(const char *path, rec_trace *t, char *err, size_t errlen);
void rec_free(rec_trace *t);

#endif
