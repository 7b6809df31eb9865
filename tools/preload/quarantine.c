/* quarantine.c: cheap frees that keep cudaFree's guarantee (docs/preload.md,
 * "Frees").  The real cudaFree / cuMemFree wait for the device before the
 * memory is gone, so memory freed by them may be reused by anything at once,
 * even though kernels queued before the free (on any stream, blocking or
 * not) may still read it.  Instead of one device synchronisation per free,
 * a freed xseg block goes into its device's quarantine: xseg still counts it
 * live, so it cannot be handed out again.  One synchronisation of the device
 * (cuCtxSynchronize through the real function, begun after every free of
 * the list) releases the whole list to xseg (xseg_free).  A drain happens:
 *  - when the list passes its bound: more bytes than the bound or `count`
 *    blocks (XSEG_PRELOAD_QUARANTINE=BOUND[,COUNT]; BOUND in bytes, or a
 *    percentage of the application's peak live bytes on the device, at
 *    least 2 MiB; default 0.5%,1024).  That drain runs on the freeing
 *    thread (XSEG_PRELOAD_DRAIN=inline, the default) or on a drain thread
 *    (=thread), so that the freeing thread goes on queueing work while the
 *    sync waits.  The thread was the default until 2026-12-05: on the H100
 *    it held cuda_churn's mapped peak 11% over live against 3.5% inline,
 *    for 1% of wall time (docs/preload.md), as blocks in flight on it are
 *    still xseg's when the program allocates again;
 *  - before an allocation that xseg's cached bytes (mapped - allocated)
 *    cannot serve, and after one that made xseg map more: the quarantined
 *    blocks could have served it (on the caller, waiting for the thread's);
 *  - when an allocation fails (out of memory, the cap): drain, then retry;
 *  - at exit when XSEG_PRELOAD_STATS is set, so the stats are exact: the
 *    current device's list only, through its current context (at exit a
 *    context is never made for a sync; what stays is reported as held).
 * A second free of a quarantined pointer is refused (a set of the list's
 * pointers), as the real free refuses a pointer it no longer knows; the
 * pointer queries (ptrquery.c) ask the set and the list in flight too. */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <xseg.h>

#include "preload.h"

#define DEFAULT_PCT 0.5                 /* of the application's peak live bytes */
#define FLOOR ((size_t)2 << 20)         /* a bound in percent is at least this */
#define DEFAULT_COUNT 1024
#define MAX_COUNT 65536

typedef struct qent {
    void *ptr;
    size_t size;
} qent;

typedef struct quar {
    pthread_mutex_t lock;
    qent *items;   /* the list: count entries of g_count */
    qent *spare;   /* an empty array a drain swaps in */
    void **set;    /* open addressing: the list's pointers (g_set_size slots) */
    size_t count, bytes;
    atomic_size_t held;     /* bytes, readable without the lock */
    atomic_size_t inflight; /* bytes taken by the drain thread, not yet freed */
    atomic_ulong threaded;  /* drains the drain thread made */
    atomic_ulong leaked, leaked_bytes; /* never given back: a capture refused the sync */
    atomic_size_t last_bound;
    atomic_ulong quarantined, drains, why[PL_Q_WHY_COUNT], freed_bytes, errors;
    atomic_size_t peak;
} quar;

static quar g_q[PL_MAX_DEVICES];
static double g_pct = DEFAULT_PCT;     /* > 0: the bound is a percentage */
static size_t g_bound, g_count = DEFAULT_COUNT, g_set_size;
static char g_spec[64] = "0.5%";
static int g_async = 0;            /* XSEG_PRELOAD_DRAIN=thread (1) or inline (0, the default) */
static pthread_once_t g_locks_once = PTHREAD_ONCE_INIT;

static void init_locks(void)
{
    for (int d = 0; d < PL_MAX_DEVICES; d++)
        pthread_mutex_init(&g_q[d].lock, NULL);
}

/* "123", "64k", "256m", "2g" into *bytes, or "1.5%" into *pct: 1 when
 * parsed up to the end or a comma. */
static int parse_bound(const char *s, size_t *bytes, double *pct)
{
    char *end = NULL;
    double p = strtod(s, &end);
    if (end != s && *end == '%' && (end[1] == '\0' || end[1] == ',') && p > 0 && p <= 100) {
        *pct = p;
        return 1;
    }
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s || *s == '-')
        return 0;
    int shift = 0;
    switch (*end) {
    case 'k': case 'K': shift = 10; end++; break;
    case 'm': case 'M': shift = 20; end++; break;
    case 'g': case 'G': shift = 30; end++; break;
    default: break;
    }
    if ((*end != '\0' && *end != ',') || (shift && v > (SIZE_MAX >> shift)))
        return 0;
    *bytes = (size_t)(v << shift);
    *pct = 0;
    return 1;
}

static int parse_count(const char *s, size_t *count)
{
    char *end = NULL;
    unsigned long v = strtoul(s, &end, 10);
    if (end == s || *end || *s == '-' || v < 1 || v > MAX_COUNT)
        return 0;
    *count = v;
    return 1;
}

int pl_q_configure(const char *env, char *why, size_t why_len)
{
    pthread_once(&g_locks_once, init_locks);
    size_t bound = 0, count = DEFAULT_COUNT;
    double pct = DEFAULT_PCT;
    if (env && *env) {
        const char *comma = strchr(env, ',');
        if (!parse_bound(env, &bound, &pct) || (comma && !parse_count(comma + 1, &count))) {
            snprintf(why, why_len, "XSEG_PRELOAD_QUARANTINE=%s is not BOUND[,COUNT] (BOUND: "
                     "bytes such as 64m, or a percentage such as 1%%; COUNT 1 to %d); 0.5%%,%d "
                     "is used", env, MAX_COUNT, DEFAULT_COUNT);
            bound = 0;
            pct = DEFAULT_PCT;
            count = DEFAULT_COUNT;
        } else {
            snprintf(g_spec, sizeof g_spec, "%.*s", (int)(comma ? (size_t)(comma - env)
                                                                : strlen(env)), env);
        }
    }
    const char *drain = getenv("XSEG_PRELOAD_DRAIN");
    g_async = drain && strcmp(drain, "thread") == 0;
    if (drain && *drain && strcmp(drain, "inline") != 0 && strcmp(drain, "thread") != 0 && !*why)
        snprintf(why, why_len, "XSEG_PRELOAD_DRAIN=%s is neither thread nor inline; inline is "
                 "used", drain);
    g_pct = pct;
    g_bound = bound;
    g_count = count;
    g_set_size = 16;
    while (g_set_size < 2 * count)
        g_set_size *= 2;
    return pct > 0 || bound > 0;
}

const char *pl_q_spec(void)
{
    return g_spec;
}

/* The bound in bytes for an application whose live bytes peaked at live_peak. */
static size_t bound_for(size_t live_peak)
{
    if (g_pct <= 0)
        return g_bound;
    double b = (double)live_peak * g_pct / 100.0;
    return b > (double)FLOOR ? (size_t)b : FLOOR;
}

/* ---- the set of quarantined pointers ---- */

static size_t slot_of(const void *p)
{
    uint64_t h = ((uint64_t)(uintptr_t)p >> 8) * 0x9e3779b97f4a7c15ull;
    return (size_t)(h >> 20) & (g_set_size - 1);
}

static int set_has(const quar *q, const void *p)
{
    for (size_t i = slot_of(p);; i = (i + 1) & (g_set_size - 1)) {
        if (q->set[i] == p)
            return 1;
        if (!q->set[i])
            return 0;
    }
}

static void set_add(quar *q, void *p)
{
    size_t i = slot_of(p);
    while (q->set[i])
        i = (i + 1) & (g_set_size - 1);
    q->set[i] = p;
}

/* The arrays of q, allocated on first use: 1 when there. */
static int ensure(quar *q)
{
    if (!q->set && !(q->set = calloc(g_set_size, sizeof *q->set)))
        return 0;
    if (!q->items)
        q->items = malloc(g_count * sizeof *q->items);
    return q->items != NULL;
}

/* ---- drain ---- */

/* Take q's list, leaving it empty: 0 when it was empty. */
static int take(quar *q, qent **items, size_t *n, size_t *bytes)
{
    pthread_mutex_lock(&q->lock);
    if (!q->count) {
        pthread_mutex_unlock(&q->lock);
        return 0;
    }
    *items = q->items;
    *n = q->count;
    *bytes = q->bytes;
    q->items = q->spare;
    q->spare = NULL;
    q->count = q->bytes = 0;
    memset(q->set, 0, g_set_size * sizeof *q->set);
    atomic_store(&q->held, 0);
    pthread_mutex_unlock(&q->lock);
    return 1;
}

/* Sync the device (in ctx when given), then give a taken list to xseg.
 * Every block of it was put there by a free call before it was taken, and
 * the program queued its work on the block before that call: the sync,
 * begun after the take, waits for all of that work.  A sync a stream
 * capture refuses is tried again every millisecond for `patience` ms (the
 * drain thread: the capture may end); still refused, the blocks are never
 * given back (kernels may still use them): counted as leaked.  Any other
 * failure (a dead context, CUDA torn down) leaves no kernel running. */
static void release(int d, xseg_t *xs, void *ctx, qent *items, size_t n, size_t bytes, int why,
                    int patience)
{
    quar *q = &g_q[d];
    pl_result rc = pl_sync_ctx(d, ctx);
    for (int t = 0; PL_CAPTURE_ERROR(rc) && t < patience; t++) {
        nanosleep(&(struct timespec){0, 1000000}, NULL);
        rc = pl_sync_ctx(d, ctx);
    }
    if (PL_CAPTURE_ERROR(rc)) {
        atomic_fetch_add(&q->leaked, n);
        atomic_fetch_add(&q->leaked_bytes, bytes);
        n = bytes = 0;
    }
    for (size_t i = 0; i < n; i++)
        if (xseg_free(xs, items[i].ptr) != XSEG_OK)
            atomic_fetch_add(&q->errors, 1);
    pthread_mutex_lock(&q->lock);
    if (!q->spare) {
        q->spare = items;
        items = NULL;
    }
    pthread_mutex_unlock(&q->lock);
    free(items);
    atomic_fetch_add(&q->drains, 1);
    atomic_fetch_add(&q->why[why], 1);
    atomic_fetch_add(&q->freed_bytes, bytes);
}

size_t pl_q_drain(int d, xseg_t *xs, int why)
{
    qent *items;
    size_t n, bytes;
    if (!take(&g_q[d], &items, &n, &bytes))
        return 0;
    release(d, xs, NULL, items, n, bytes, why, 0);
    return bytes;
}

/* ---- the drain thread: a bound's drain off the caller's path ----
 * One thread for the process, started on first need.  Each device has at
 * most one list in flight (g_job[d]); a free that passes the bound while
 * one is in flight waits for it (its sync began earlier, so it ends no
 * later than a sync begun now), then hands its own list over.  So at most
 * two bounds' worth (plus a block each) wait for a sync per device.
 * Contexts: only a free made in the device's primary context (the CUDA
 * runtime's, and the frameworks') hands its list over; the job holds a
 * retain of that context until its sync is done, so a program that lets
 * go of the context meanwhile does not destroy it under the sync.  Other
 * contexts drain on the caller.  At exit (a handler registered when the
 * thread starts, so it runs before the CUDA runtime's own teardown) no list
 * is handed over any more and the ones in flight are waited for (2 s). */

typedef struct job {
    int state;      /* 0 none, 1 posted, 2 running */
    xseg_t *xs;
    void *ctx;      /* the device's primary context, retained for the job */
    qent *items;
    size_t n, bytes;
} job;

static job g_job[PL_MAX_DEVICES];
static pthread_mutex_t g_jlock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_jwake = PTHREAD_COND_INITIALIZER, g_jdone = PTHREAD_COND_INITIALIZER;
static int g_thread;        /* 0 not started, 1 running, -1 cannot start */
static int g_stopping;      /* exit began: drains on the caller */

static int next_posted(void)
{
    for (int d = 0; d < PL_MAX_DEVICES; d++)
        if (g_job[d].state == 1)
            return d;
    return -1;
}

static void *drainer(void *arg)
{
    (void)arg;
    pl_inside = 1; /* its CUDA calls are this library's own */
    pl_capture_relaxed(); /* its syncs never break a capture of the program's */
    pthread_mutex_lock(&g_jlock);
    for (;;) {
        int d = next_posted();
        if (d < 0) {
            pthread_cond_wait(&g_jwake, &g_jlock);
            continue;
        }
        job j = g_job[d];
        g_job[d].state = 2;
        pthread_mutex_unlock(&g_jlock);
        release(d, j.xs, j.ctx, j.items, j.n, j.bytes, PL_Q_BOUND, 5000);
        pl_primary_release(d);
        atomic_fetch_add(&g_q[d].threaded, 1);
        atomic_fetch_sub(&g_q[d].inflight, j.bytes);
        pthread_mutex_lock(&g_jlock);
        g_job[d].state = 0;
        pthread_cond_broadcast(&g_jdone);
    }
    return NULL;
}

static int wait_job(int d, int secs);

static void stop_drains(void)
{
    pthread_mutex_lock(&g_jlock);
    g_stopping = 1;
    for (int d = 0; d < PL_MAX_DEVICES; d++)
        wait_job(d, 2);
    pthread_mutex_unlock(&g_jlock);
}

/* Under g_jlock: 1 when the drain thread runs (started now if needed),
 * with every signal blocked (the program's handlers never run on it). */
static int thread_ready(void)
{
    if (g_stopping)
        return 0;
    if (g_thread)
        return g_thread > 0;
    sigset_t all, old;
    pthread_t t;
    pthread_attr_t attr;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    g_thread = pthread_create(&t, &attr, drainer, NULL) == 0 ? 1 : -1;
    pthread_attr_destroy(&attr);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (g_thread > 0)
        atexit(stop_drains);
    return g_thread > 0;
}

/* Under g_jlock: wait for device d's list in flight, at most `secs`
 * seconds (0: no limit).  1 when there is none any more. */
static int wait_job(int d, int secs)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += secs;
    while (g_job[d].state) {
        if (!secs)
            pthread_cond_wait(&g_jdone, &g_jlock);
        else if (pthread_cond_timedwait(&g_jdone, &g_jlock, &until) != 0)
            break;
    }
    return g_job[d].state == 0;
}

/* The bound passed: hand the list to the drain thread (after the one in
 * flight, if any), or drain it here when there is no thread or the free
 * was not made in the device's primary context. */
static void drain_bound(int d, xseg_t *xs)
{
    void *cur = g_async ? pl_current_ctx(d) : NULL;
    void *ctx = cur ? pl_primary_retain(d) : NULL;
    qent *items;
    size_t n, bytes;
    pthread_mutex_lock(&g_jlock);
    if (!ctx || ctx != cur || !thread_ready()) {
        pthread_mutex_unlock(&g_jlock);
        if (ctx)
            pl_primary_release(d);
        pl_q_drain(d, xs, PL_Q_BOUND);
        return;
    }
    wait_job(d, 0);
    if (take(&g_q[d], &items, &n, &bytes)) {
        atomic_fetch_add(&g_q[d].inflight, bytes);
        g_job[d] = (job){1, xs, ctx, items, n, bytes};
        pthread_cond_signal(&g_jwake);
        ctx = NULL; /* the job's retain now */
    }
    pthread_mutex_unlock(&g_jlock);
    if (ctx)
        pl_primary_release(d);
}

size_t pl_q_reclaim(int d, xseg_t *xs, int why)
{
    size_t bytes = pl_q_drain(d, xs, why), flying = atomic_load(&g_q[d].inflight);
    if (!flying)
        return bytes;
    pthread_mutex_lock(&g_jlock);
    int done = wait_job(d, why == PL_Q_EXIT ? 2 : 0); /* at exit: never hang on CUDA */
    pthread_mutex_unlock(&g_jlock);
    return bytes + (done ? flying : 0);
}

void pl_q_drain_at_exit(xseg_t *const *xs)
{
    int d = pl_current_device(); /* the CUDA runtime may have let go of the others */
    if (d >= 0 && d < PL_MAX_DEVICES && xs[d] && pl_q_held(d))
        pl_q_reclaim(d, xs[d], PL_Q_EXIT);
}

/* ---- free ---- */

static void note_peak(quar *q, size_t bytes)
{
    size_t old = atomic_load(&q->peak);
    while (bytes > old && !atomic_compare_exchange_weak(&q->peak, &old, bytes))
        ;
}

static int in_flight(int d, const void *ptr);

int pl_q_free(int d, xseg_t *xs, void *ptr, size_t size, size_t live_peak)
{
    size_t bound = bound_for(live_peak);
    quar *q = &g_q[d];
    int over;
    /* A second free of a block the drain thread has in flight: it would be
     * freed twice, the second time perhaps as somebody's new block.  Looked
     * up before q->lock (the drain takes g_jlock, then q->lock); a block
     * moving from the list to the drain in between is not seen, so this is
     * a best effort, as the driver's own double-free checks are. */
    if (atomic_load(&q->inflight) && in_flight(d, ptr))
        return PL_FAILED;
    pthread_mutex_lock(&q->lock);
    while (q->count >= g_count) { /* full (other threads pushed): drain first */
        pthread_mutex_unlock(&q->lock);
        pl_q_drain(d, xs, PL_Q_BOUND);
        pthread_mutex_lock(&q->lock);
    }
    if (q->set && set_has(q, ptr)) {
        pthread_mutex_unlock(&q->lock);
        return PL_FAILED; /* freed already: a double free */
    }
    if (!ensure(q)) { /* no memory for the list: free as cudaFree would */
        pthread_mutex_unlock(&q->lock);
        if (PL_CAPTURE_ERROR(pl_sync_device(d)))
            return PL_FAILED;
        return xseg_free(xs, ptr) == XSEG_OK ? PL_SERVED : PL_FAILED;
    }
    q->items[q->count++] = (qent){ptr, size};
    set_add(q, ptr);
    q->bytes += size;
    atomic_store(&q->held, q->bytes);
    note_peak(q, q->bytes + atomic_load(&q->inflight));
    over = q->bytes > bound || q->count >= g_count;
    pthread_mutex_unlock(&q->lock);
    atomic_fetch_add(&q->quarantined, 1);
    atomic_store(&q->last_bound, bound);
    if (over)
        drain_bound(d, xs);
    return PL_SERVED;
}

/* ---- allocation ---- */

/* xseg's mapped and cached bytes: 1 when read. */
static int look(xseg_t *xs, size_t *mapped, size_t *cached)
{
    xseg_stats st = {.size = sizeof st};
    if (xseg_get_stats(xs, &st) != XSEG_OK)
        return 0;
    size_t live = st.allocated_bytes.current;
    *mapped = st.mapped_bytes.current;
    *cached = *mapped > live ? *mapped - live : 0;
    return 1;
}

size_t pl_q_before_alloc(int d, xseg_t *xs, size_t size)
{
    size_t mapped = 0, cached = 0;
    if (!pl_q_held(d) || !look(xs, &mapped, &cached))
        return 0;
    if (cached < size && pl_q_reclaim(d, xs, PL_Q_GROWTH) > 0) /* it would grow for sure */
        return 0;
    return mapped;
}

void pl_q_after_alloc(int d, xseg_t *xs, size_t mapped_before)
{
    size_t mapped = 0, cached = 0;
    if (mapped_before && pl_q_held(d) && look(xs, &mapped, &cached) && mapped > mapped_before)
        pl_q_reclaim(d, xs, PL_Q_GROWTH); /* it grew all the same: no more of that */
}

size_t pl_q_held(int d)
{
    return atomic_load_explicit(&g_q[d].held, memory_order_relaxed) +
           atomic_load_explicit(&g_q[d].inflight, memory_order_relaxed);
}

/* The list the drain thread has in flight holds ptr. */
static int in_flight(int d, const void *ptr)
{
    int hit = 0;
    pthread_mutex_lock(&g_jlock);
    const job *j = &g_job[d];
    for (size_t i = 0; j->state && i < j->n && !hit; i++)
        hit = j->items[i].ptr == ptr;
    pthread_mutex_unlock(&g_jlock);
    return hit;
}

int pl_q_holds(int d, const void *ptr)
{
    quar *q = &g_q[d];
    if (!pl_q_held(d))
        return 0;
    pthread_mutex_lock(&q->lock);
    int held = q->set && set_has(q, ptr);
    pthread_mutex_unlock(&q->lock);
    return held || in_flight(d, ptr);
}

/* ---- fork, report ---- */

/* The child has no drain thread and none of the parent's lists: those
 * blocks are the parent's allocators', which the child never uses. */
void pl_q_fork_child(void)
{
    pthread_mutex_init(&g_jlock, NULL);
    pthread_cond_init(&g_jwake, NULL);
    pthread_cond_init(&g_jdone, NULL);
    g_thread = 0;
    g_stopping = 0;
    for (int d = 0; d < PL_MAX_DEVICES; d++) {
        quar *q = &g_q[d];
        pthread_mutex_init(&q->lock, NULL); /* another thread may have held it */
        q->count = q->bytes = 0;
        if (q->set)
            memset(q->set, 0, g_set_size * sizeof *q->set);
        atomic_store(&q->held, 0);
        atomic_store(&q->inflight, 0);
        g_job[d].state = 0;
    }
}

int pl_q_json(int d, char *buf, size_t cap)
{
    quar *q = &g_q[d];
    return snprintf(buf, cap,
                    "\"quarantine_bound\":\"%s\",\"quarantine_bound_bytes\":%zu,"
                    "\"quarantine_count\":%zu,\"quarantine_drain\":\"%s\",\"quarantined\":%lu,"
                    "\"drains\":%lu,\"drains_bound\":%lu,\"drains_thread\":%lu,"
                    "\"drains_growth\":%lu,\"drains_oom\":%lu,\"drains_exit\":%lu,"
                    "\"quarantine_peak_bytes\":%zu,\"quarantine_freed_bytes\":%lu,"
                    "\"quarantine_free_errors\":%lu,\"quarantine_held_bytes\":%zu,"
                    "\"quarantine_leaked_blocks\":%lu,\"quarantine_leaked_bytes\":%lu",
                    g_spec, atomic_load(&q->last_bound), g_count, g_async ? "thread" : "inline",
                    atomic_load(&q->quarantined), atomic_load(&q->drains),
                    atomic_load(&q->why[PL_Q_BOUND]), atomic_load(&q->threaded),
                    atomic_load(&q->why[PL_Q_GROWTH]), atomic_load(&q->why[PL_Q_OOM]),
                    atomic_load(&q->why[PL_Q_EXIT]), atomic_load(&q->peak),
                    atomic_load(&q->freed_bytes), atomic_load(&q->errors), pl_q_held(d),
                    atomic_load(&q->leaked), atomic_load(&q->leaked_bytes));
}
