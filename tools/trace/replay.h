/* replay.h: the replay engine: runs a loaded trace through an allocator
 * (xseg_alloc / xseg_free, stream = (void *)(uintptr_t)stream number) and
 * measures time, memory and driver traffic.
 *
 * On a backend other than host, stream numbers above 2 are refused (they
 * would be taken for CUstream handles; 0, 1, 2 are the default, legacy and
 * per-thread streams).  Use a fresh allocator per replay: peak mapped bytes and driver calls are
 * read from its stats and cover its whole life.  An allocation that fails
 * with XSEG_ERR_OOM is counted and skipped (its free too) and the replay
 * goes on; any other failure stops it.  Both are reported as the first
 * error, with the event index and trace line.
 */
#ifndef XSEG_REPLAY_H
#define XSEG_REPLAY_H

#include <stdint.h>
#include "trace.h"
#include "xseg.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct xseg_replay_opts {
    /* Write a pattern derived from the id into the first and last 64 bytes
     * and at every 1 MiB of each allocation, and check it at free: a
     * mismatch means overlapping blocks.  Needs CPU-accessible memory (the
     * host backend); on another backend the replay fails at once. */
    int verify;
    /* Free what is still live at the end (after the measurement). */
    int free_at_end;
    /* Called after every allocation that succeeded, with the requested bytes
     * live then (NULL: none; timed with the events, so it adds to them). */
    void (*after_alloc)(void *arg, xseg_t *xs, uint64_t live_bytes);
    void *arg;
} xseg_replay_opts;

typedef struct xseg_replay_result {
    uint64_t events;            /* trace events replayed */
    double seconds;             /* the trace events only */
    double events_per_s;
    uint64_t peak_live_bytes;   /* from the trace: requested bytes live */
    uint64_t peak_mapped_bytes; /* xseg_stats.mapped_bytes.peak */
    double frag_ratio;          /* peak mapped / peak live (0 if none live) */
    uint64_t maps;              /* driver_calls[XSEG_OP_MAP] */
    uint64_t unmaps;            /* driver_calls[XSEG_OP_UNMAP] */
    double map_unmap_per_1000;  /* (maps + unmaps) per 1000 events */
    uint64_t driver_calls[XSEG_OP_COUNT];
    uint64_t ooms;              /* allocations that failed with XSEG_ERR_OOM */
    uint64_t freed_at_end;      /* frees done by free_at_end */
    uint64_t verified_blocks;   /* blocks whose pattern was checked */
    /* The second half of the trace, from event half_event (events / 2) on:
     * the driver calls made then (all threads) and the caller's driver time
     * then (xseg_driver_time): how far the workload's steady state is from
     * calling no driver function once its memory is mapped. */
    uint64_t half_event;
    uint64_t second_half_calls[XSEG_OP_COUNT];
    uint64_t second_half_caller_ns;
    xseg_stats stats;           /* stats after the trace events */
    /* First error: status XSEG_OK when none.  A verify mismatch reports
     * XSEG_ERR_INTERNAL with corrupted = 1. */
    xseg_status status;
    int corrupted;
    uint64_t error_event;       /* event index (0-based) */
    uint64_t error_line;        /* trace line (1-based; 0: not an event) */
    char error_message[768];
} xseg_replay_result;

/* Replay `t` through `xs`.  Returns r->status: XSEG_OK, the status of the
 * first failure, or XSEG_ERR_INVALID_ARG for NULL arguments. */
xseg_status xseg_replay_run(xseg_t *xs, const xseg_trace *t, const xseg_replay_opts *opts,
                            xseg_replay_result *r);

/* The allocator's driver time so far by side (XSEG_SIDE_*) and op
 * (xseg_driver_time; 0 where it fails). */
void xseg_replay_driver_ns(xseg_t *xs, uint64_t ns[2][XSEG_OP_COUNT]);

#ifdef __cplusplus
}
#endif
#endif /* XSEG_REPLAY_H */
