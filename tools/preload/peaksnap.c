/* peaksnap.c: XSEG_PRELOAD_PEAK_SNAPSHOT=FILE (docs/preload.md, "Where the
 * peak goes"): what each device's allocator held when its mapped bytes were
 * at their highest, to find out why a program's mapped peak is over its live
 * peak.  After every allocation xseg served, the device's mapped bytes are
 * read; a new high takes the allocator's snapshot (xseg_snapshot_json) and
 * the stats, with the application's live bytes and the quarantine's at that
 * moment, kept in memory; at exit the last one of each device is written to
 * FILE ("%p" in it: the pid) as one JSON line.  A diagnostic: a stats read
 * per allocation and a snapshot per new high, so off unless set.  A high
 * reached between two allocations (the reclaim worker mapping ahead and
 * unmapping again) is not seen: the line gives the stats' own mapped peak
 * next to the one it caught, so a miss shows. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <xseg.h>

#include "preload.h"

typedef struct peak {
    pthread_mutex_t lock;
    atomic_size_t high;  /* mapped bytes of the kept snapshot */
    char *snap, *stats;  /* malloc'd JSON, or NULL */
    size_t app_live, quarantined;
    unsigned long taken; /* snapshots taken (new highs) */
    xseg_t *xs;          /* whose: its mapped peak at exit */
    pid_t pid;           /* taken in this process, not in a fork's parent */
} peak;

static peak g_peak[PL_MAX_DEVICES];
static const char *g_path;
static pthread_once_t g_init = PTHREAD_ONCE_INIT;

static void init_locks(void)
{
    for (int d = 0; d < PL_MAX_DEVICES; d++)
        pthread_mutex_init(&g_peak[d].lock, NULL);
}

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
                *nl = ' '; /* one line in the file (a newline in JSON is whitespace) */
            return buf;
        }
        free(buf);
        if (st != XSEG_ERR_BUFFER_TOO_SMALL)
            return NULL;
        cap = len + 1 > cap * 2 ? len + 1 : cap * 2;
    }
    return NULL;
}

static size_t mapped_now(xseg_t *xs, int want_peak)
{
    xseg_stats st = {.size = sizeof st};
    if (xseg_get_stats(xs, &st) != XSEG_OK)
        return 0;
    return want_peak ? st.mapped_bytes.peak : st.mapped_bytes.current;
}

void pl_peak_after_alloc(int d, xseg_t *xs, size_t app_live)
{
    if (!g_path || d < 0 || d >= PL_MAX_DEVICES)
        return;
    peak *p = &g_peak[d];
    if (mapped_now(xs, 0) <= atomic_load(&p->high))
        return;
    pthread_mutex_lock(&p->lock);
    size_t mapped = mapped_now(xs, 0); /* again, under the lock: one snapshot per high */
    if (mapped > atomic_load(&p->high)) {
        char *snap = render(xs, xseg_snapshot_json), *stats = render(xs, xseg_stats_json);
        if (snap && stats) {
            free(p->snap);
            free(p->stats);
            p->snap = snap;
            p->stats = stats;
            p->app_live = app_live;
            p->quarantined = pl_q_held(d);
            p->taken++;
            p->xs = xs;
            p->pid = getpid();
            atomic_store(&p->high, mapped);
        } else {
            free(snap);
            free(stats);
        }
    }
    pthread_mutex_unlock(&p->lock);
}

static void write_peaks(void)
{
    FILE *f = pl_open_at_exit("XSEG_PRELOAD_PEAK_SNAPSHOT", g_path);
    if (!f)
        return;
    for (int d = 0; d < PL_MAX_DEVICES; d++) {
        peak *p = &g_peak[d];
        pthread_mutex_lock(&p->lock);
        if (p->snap && p->pid == getpid())
            fprintf(f,
                    "{\"pid\":%d,\"device\":%d,\"mapped\":%zu,\"mapped_peak_at_exit\":%zu,"
                    "\"app_live\":%zu,\"quarantined\":%zu,\"highs\":%lu,\"stats\":%s,"
                    "\"snapshot\":%s}\n",
                    (int)getpid(), d, atomic_load(&p->high), mapped_now(p->xs, 1), p->app_live,
                    p->quarantined, p->taken, p->stats, p->snap);
        pthread_mutex_unlock(&p->lock);
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
