/* trace_internal.h: the pieces of the trace reader shared between its files:
 * byte sources (trace_source.c), the line parser (trace_parse.c) and the trace builder (trace_build.c). */
#ifndef XSEG_TRACE_INTERNAL_H
#define XSEG_TRACE_INTERNAL_H

#include <stdio.h>
#include "trace.h"
#include "ptrmap.h" /* the library's hash map: the builder's id maps */

/* ---- byte sources (trace_source.c) ------------------------------------ */

typedef struct trace_source trace_source;
struct trace_source {
    /* > 0: bytes read; 0: clean end of input; -1: error (message in msg). */
    long (*read)(trace_source *s, char *buf, size_t n);
    void (*close)(trace_source *s);
    void *handle;          /* gzFile, FILE * (file or pipe) */
    const char *mem;       /* memory source */
    size_t mem_len;
    size_t mem_pos;
    int pipe_done;         /* gzip -dc: pclose already called */
    const char *path;      /* zlib: to strip it from zlib's messages */
    char msg[384];
};

/* Open `path` with `reader`.  0, or -1 with a message in s->msg and the
 * status to report in *status. */
int trace_source_open(trace_source *s, const char *path, xseg_trace_reader reader,
                      xseg_trace_status *status);
void trace_source_memory(trace_source *s, const char *text, size_t len);

/* ---- id maps: xseg_ptrmap (lib/ptrmap.h), integer keys ---------------- */

#define TRACE_ID_EMPTY UINT64_MAX   /* ids are <= XSEG_TRACE_MAX_ID */

/* ---- line parser (trace_parse.c) -------------------------------------- */

typedef struct trace_line {
    int op;          /* xseg_trace_op */
    uint64_t id;
    uint64_t bytes;
    uint64_t stream;
} trace_line;

enum { TRACE_LINE_EVENT = 0, TRACE_LINE_SKIP = 1, TRACE_LINE_BAD = -1 };

/* Parse one line (no newline; a trailing CR is accepted).  Returns
 * TRACE_LINE_EVENT, TRACE_LINE_SKIP (comment, blank) or TRACE_LINE_BAD with
 * what is wrong in msg. */
int trace_parse_line(const char *s, size_t n, uint64_t lineno, trace_line *out,
                     char *msg, size_t len);
/* Quote a line for a message: printable, escaped, truncated. */
void trace_quote_line(const char *s, size_t n, char *out, size_t len);

/* ---- builder: events, slots, live accounting (trace_build.c) ----------- */

typedef struct trace_builder {
    xseg_trace *t;
    size_t cap_events;
    size_t cap_streams;
    size_t cap_skipped;
    xseg_ptrmap ids;       /* live trace id -> line << 32 | slot */
    xseg_ptrmap streams;   /* stream number -> index */
    uint32_t *free_slots;  /* stack of released slots */
    size_t nfree_slots;
    size_t cap_free_slots;
    uint64_t *slot_bytes;  /* bytes of the allocation holding each slot */
    uint16_t *slot_stream;
    size_t cap_slots;
    uint64_t live_bytes;
    uint64_t last_stream;  /* cache of the last stream lookup */
    uint16_t last_stream_index;
} trace_builder;

enum { TRACE_BUILD_OK = 0, TRACE_BUILD_BAD = -1, TRACE_BUILD_NOMEM = -2 };

int trace_builder_init(trace_builder *b, const char *name);
/* Add one event read on line `lineno`. */
int trace_builder_add(trace_builder *b, const trace_line *l, uint32_t lineno,
                      char *msg, size_t len);
/* Note a comment or blank line. */
int trace_builder_skip(trace_builder *b, uint32_t lineno);
/* Hand over the finished trace (the builder is emptied). */
xseg_trace *trace_builder_finish(trace_builder *b, uint64_t nlines);
void trace_builder_discard(trace_builder *b);

#endif /* XSEG_TRACE_INTERNAL_H */
