/* peaksnap.c: XSEG_PRELOAD_PEAK_SNAPSHOT=FILE (docs/preload.md, "Where the
 * peak goes"): what each device's allocator held when its mapped bytes were
 * at their highest, to find out why a program's mapped peak is over its live
 * peak.  After every allocation xseg served, the device's mapped bytes are
 * read; a new high takes the allocator's snapshot and stats with the
 * application's live bytes and the quarantine's at that moment
 * (tools/trace/peak.c), kept in memory; at exit the last one of each device
 * is written to FILE ("%p" in it: the pid) as one JSON line, for
 * tools/peak-report.  A diagnostic: a stats read per allocation and a
 * snapshot per new high, so off unless set.  A high reached between two
 * allocations (the reclaim worker mapping ahead and unmapping again) is not
 * seen: the line gives the stats' own mapped peak next to the one it
 * caught, so a miss shows. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <xseg.h>

#include "peak.h"
#include "preload.h"

typedef struct dev_peak {
    pthread_mutex_t lock;
    atomic_size_t high; /* p.high, readable without the lock */
    xseg_peak p;
    xseg_t *xs;         /* whose: its mapped peak at exit */
    _Atomic pid_t pid;  /* taken in this process, not in a fork's parent */
} dev_peak;

static dev_peak g_peak[PL_MAX_DEVICES];
static const char *g_path;
static pthread_once_t g_init = PTHREAD_ONCE_INIT;

static void init_locks(void)
{
    for (int d = 0; d < PL_MAX_DEVICES; d++)
        pthread_mutex_init(&g_peak[d].lock, NULL);
}

void pl_peak_after_alloc(int d, xseg_t *xs, size_t app_live)
{
    if (!g_path || d < 0 || d >= PL_MAX_DEVICES)
        return;
    dev_peak *dp = &g_peak[d];
    if (xseg_peak_mapped(xs, 0) <= atomic_load(&dp->high))
        return;
    pthread_mutex_lock(&dp->lock);
    if (xseg_peak_see(&dp->p, xs, app_live, pl_q_held(d)) == 1) {
        dp->xs = xs;
        atomic_store(&dp->pid, getpid());
        atomic_store(&dp->high, dp->p.high);
    }
    pthread_mutex_unlock(&dp->lock);
}

static void write_peaks(void)
{
    FILE *f = pl_open_at_exit("XSEG_PRELOAD_PEAK_SNAPSHOT", g_path);
    if (!f)
        return;
    for (int d = 0; d < PL_MAX_DEVICES; d++) {
        dev_peak *dp = &g_peak[d];
        if (atomic_load(&dp->pid) != getpid())
            continue; /* none taken here: in a fork child the lock may be held for good */
        pthread_mutex_lock(&dp->lock);
        fprintf(f, "{\"pid\":%d,\"device\":%d", (int)getpid(), d);
        xseg_peak_write(f, &dp->p, xseg_peak_mapped(dp->xs, 1));
        pthread_mutex_unlock(&dp->lock);
    }
    fclose(f);
}

void pl_peak_configure(const char *path)
{
    pthread_once(&g_init, init_locks);
    if (!path || !*path)
        return;
    g_path = path;
    atexit(write_peaks);
}
