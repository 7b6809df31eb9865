/* textbuf.h: a bounded text appender for the JSON and Prometheus renderers:
 * writes what fits into the caller's buffer and counts what would have been
 * written, so the caller can report the size needed. */
#ifndef XSEG_TEXTBUF_H
#define XSEG_TEXTBUF_H

#include <stddef.h>

typedef struct xtb {
    char *p;
    size_t cap, len;
} xtb;

void xtb_put(xtb *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
