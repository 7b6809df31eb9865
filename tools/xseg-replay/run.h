/* run.h: replays one trace for xseg-replay: load, then --repeat replays
 * through fresh allocators, keeping the fastest. */
#ifndef XSEG_REPLAY_RUN_H
#define XSEG_REPLAY_RUN_H

#include "cli.h"
#include "peak.h"
#include "replay.h"
#include "trace.h"

typedef struct replay_report {
    const char *path;
    xseg_trace *trace;            /* NULL when the load failed */
    double load_seconds;
    char backend[16];
    int repeats;                  /* replays done */
    xseg_replay_result result;    /* the fastest replay (or the failing one) */
    uint64_t driver_ns[2][XSEG_OP_COUNT]; /* its driver time by xseg_side and op */
    int failed;                   /* load, allocator or replay failure */
    const char *stage;            /* what failed: "load", "allocator", "replay", "peak" */
    xseg_trace_error load_error;  /* stage "load" */
    char error[1024];             /* what failed, for stderr and JSON */
    xseg_peak peak;               /* --peak-snapshot: the first replay at its mapped peak */
    uint64_t peak_mapped;         /* that replay's mapped peak (xseg_stats) */
} replay_report;

/* Check that an allocator can be created with the conf and device.
 * 0: yes; else the exit status (2: bad conf, 1: other), message printed. */
int run_check_allocator(const replay_cli *c);
/* Load and replay `path`; 0 or -1 (rep->failed, rep->error set). */
int run_trace(const replay_cli *c, const char *path, replay_report *rep);
void run_report_free(replay_report *rep);

#endif
