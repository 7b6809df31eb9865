/* trace.h: reader of the `xseg-trace v1` allocation-trace format.
 *
 * A trace is gzip-compressed (or plain) text, one event a line:
 *     # comment
 *     a,<id>,<bytes>,<stream>     allocate <bytes> for <id> on <stream>
 *     f,<id>                      free <id>
 * (see shared/traces/README.md).  xseg_trace_load() reads a whole trace into
 * a compact array of events.  Ids are remapped to dense "slots" at load time:
 * a slot is an index in [0, nslots) that is unique among the allocations
 * live at any moment, so a replay keeps its pointers in a plain array.
 * Stream numbers are remapped to indices into `streams`.
 *
 * Hostile input never crashes the reader: every malformed line gives
 * XSEG_TRACE_ERR_FORMAT with a message naming the line number and content.
 * Nothing here prints, aborts or exits.
 */
#ifndef XSEG_TRACE_H
#define XSEG_TRACE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum xseg_trace_status {
    XSEG_TRACE_OK = 0,
    XSEG_TRACE_ERR_IO = 1,          /* cannot open / read / decompress */
    XSEG_TRACE_ERR_FORMAT = 2,      /* malformed content (line in the error) */
    XSEG_TRACE_ERR_NOMEM = 3,       /* out of host memory */
    XSEG_TRACE_ERR_INVALID_ARG = 4  /* NULL argument or unknown reader */
} xseg_trace_status;

typedef enum xseg_trace_op {
    XSEG_TRACE_ALLOC = 0,
    XSEG_TRACE_FREE = 1
} xseg_trace_op;

/* How compressed input is read. */
typedef enum xseg_trace_reader {
    XSEG_TRACE_READ_AUTO = 0,     /* zlib when built with it, else gzip -dc */
    XSEG_TRACE_READ_ZLIB = 1,     /* zlib (XSEG_TRACE_ERR_INVALID_ARG without) */
    XSEG_TRACE_READ_GZIP_CMD = 2  /* popen("gzip -dc") for gzip files */
} xseg_trace_reader;

/* Limits: values above these are format errors. */
#define XSEG_TRACE_MAX_ID ((uint64_t)INT64_MAX)     /* ids, stream numbers */
#define XSEG_TRACE_MAX_BYTES ((uint64_t)INT64_MAX)  /* one allocation */
#define XSEG_TRACE_MAX_LINE 4096                    /* bytes per line */
#define XSEG_TRACE_MAX_STREAMS 65536                /* distinct streams */
#define XSEG_TRACE_MAX_LINES ((uint64_t)UINT32_MAX - 2)

/* One event: 16 bytes. */
typedef struct xseg_trace_event {
    uint64_t bytes;  /* alloc: bytes requested; free: bytes of the block freed */
    uint32_t slot;   /* dense live index, in [0, nslots) */
    uint16_t stream; /* index into xseg_trace.streams (free: the alloc's) */
    uint8_t op;      /* xseg_trace_op */
    uint8_t reserved;
} xseg_trace_event;

typedef struct xseg_trace {
    char *name;                /* the path (or name) it was loaded from */
    xseg_trace_event *events;  /* nevents events, in trace order */
    uint64_t *ids;             /* original id of each event (parallel array) */
    size_t nevents;
    size_t nallocs;
    size_t nfrees;
    uint32_t nslots;           /* most allocations live at once */
    uint64_t *streams;         /* stream number of each stream index */
    size_t nstreams;
    uint64_t peak_live_bytes;  /* highest sum of requested bytes live */
    uint64_t total_alloc_bytes;
    size_t live_at_end;        /* allocations never freed */
    uint64_t live_bytes_at_end;
    uint64_t nlines;           /* lines read, comments and blanks included */
    uint32_t *skipped_lines;   /* line numbers of comment / blank lines */
    size_t nskipped;
} xseg_trace;

typedef struct xseg_trace_error {
    xseg_trace_status status;
    uint64_t line;             /* 1-based line of a format error, else 0 */
    char message[640];         /* "name:line: what: \"content\"" */
} xseg_trace_error;

/* Load a trace file (gzip or plain text; detected by content).  On success
 * *out owns the trace (xseg_trace_free).  On failure *out is NULL and err
 * (may be NULL) says why. */
xseg_trace_status xseg_trace_load(const char *path, xseg_trace **out,
                                  xseg_trace_error *err);
xseg_trace_status xseg_trace_load_with(const char *path, xseg_trace_reader reader,
                                       xseg_trace **out, xseg_trace_error *err);
/* Parse trace text held in memory (uncompressed); `name` labels messages. */
xseg_trace_status xseg_trace_parse(const char *text, size_t len, const char *name,
                                   xseg_trace **out, xseg_trace_error *err);
void xseg_trace_free(xseg_trace *t);

/* 1-based line number of event `index` (0 when out of range). */
uint64_t xseg_trace_line_of(const xseg_trace *t, size_t index);
/* Stream number of an event (as written in the trace). */
uint64_t xseg_trace_stream_of(const xseg_trace *t, const xseg_trace_event *e);
const char *xseg_trace_status_name(xseg_trace_status status);
/* 1 when built with zlib. */
int xseg_trace_have_zlib(void);

#ifdef __cplusplus
}
#endif
#endif /* XSEG_TRACE_H */
