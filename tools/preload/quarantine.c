/* quarantine.c: cheap frees that keep cudaFree's guarantee (docs/preload.md,
 * "Frees").  The real cudaFree / cuMemFree wait for the device before the
 * memory is gone, so memory freed by them may be reused by anything at once,
 * even though kernels queued before the free (on any stream, blocking or
 * not) may still read it.  Instead of one device synchronisation per free,
 * a freed xseg block goes into its device's quarantine: xseg still counts it
 * live, so it cannot be handed out again.  One synchronisation of the device
 * (cuCtxSynchronize through the real function, after every free of the
 * list) releases the whole list to xseg (xseg_free).  A drain happens:
 *  - when the list passes its bound: more bytes than the bound or `count`
 *    blocks (XSEG_PRELOAD_QUARANTINE=BOUND[,COUNT]; BOUND in bytes, or a
 *    percentage of the application's peak live bytes on the device, at
 *    least 2 MiB; default 1%,1024): the quarantine adds at most that to
 *    the memory xseg maps;
 *  - before an allocation that xseg's cached bytes (mapped - allocated)
 *    cannot serve, and after one that made xseg map more: the quarantined
 *    blocks could have served it;
 *  - when an allocation fails (out of memory, the cap): drain, then retry;
 *  - at exit when XSEG_PRELOAD_STATS is set, so the stats are exact: the
 *    current device's list only, through its current context (at exit a
 *    context is never made for a sync; what stays is reported as held).
 * A second free of a quarantined pointer is refused (a set of the list's
 * pointers), as the real free refuses a pointer it no longer knows. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xseg.h>

#include "preload.h"

#define DEFAULT_PCT 1.0                 /* of the application's peak live bytes */
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
    atomic_size_t last_bound;
    atomic_ulong quarantined, drains, why[PL_Q_WHY_COUNT], freed_bytes, errors;
    atomic_size_t peak;
} quar;

static quar g_q[PL_MAX_DEVICES];
static double g_pct = DEFAULT_PCT;     /* > 0: the bound is a percentage */
static size_t g_bound, g_count = DEFAULT_COUNT, g_set_size;
static char g_spec[64] = "1%";
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
                     "bytes such as 64m, or a percentage such as 1%%; COUNT 1 to %d); 1%%,%d "
                     "is used", env, MAX_COUNT, DEFAULT_COUNT);
            bound = 0;
            pct = DEFAULT_PCT;
            count = DEFAULT_COUNT;
        } else {
            snprintf(g_spec, sizeof g_spec, "%.*s", (int)(comma ? (size_t)(comma - env)
                                                                : strlen(env)), env);
        }
    }
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

size_t pl_q_drain(int d, xseg_t *xs, int why)
{
    quar *q = &g_q[d];
    pthread_mutex_lock(&q->lock);
    if (!q->count) {
        pthread_mutex_unlock(&q->lock);
        return 0;
    }
    qent *take = q->items;
    size_t n = q->count, bytes = q->bytes;
    q->items = q->spare;
    q->spare = NULL;
    q->count = q->bytes = 0;
    memset(q->set, 0, g_set_size * sizeof *q->set);
    atomic_store(&q->held, 0);
    pthread_mutex_unlock(&q->lock);
    /* Every free of `take` returned before this point: the sync below
     * waits for all the work queued before any of them. */
    pl_sync_device(d);
    for (size_t i = 0; i < n; i++)
        if (xseg_free(xs, take[i].ptr) != XSEG_OK)
            atomic_fetch_add(&q->errors, 1);
    pthread_mutex_lock(&q->lock);
    if (!q->spare) {
        q->spare = take;
        take = NULL;
    }
    pthread_mutex_unlock(&q->lock);
    free(take);
    atomic_fetch_add(&q->drains, 1);
    atomic_fetch_add(&q->why[why], 1);
    atomic_fetch_add(&q->freed_bytes, bytes);
    return bytes;
}

void pl_q_drain_at_exit(xseg_t *const *xs)
{
    int d = pl_current_device(); /* the CUDA runtime may have let go of the others */
    if (d >= 0 && d < PL_MAX_DEVICES && xs[d] && atomic_load(&g_q[d].held))
        pl_q_drain(d, xs[d], PL_Q_EXIT);
}

/* ---- free ---- */

static void note_peak(quar *q, size_t bytes)
{
    size_t old = atomic_load(&q->peak);
    while (bytes > old && !atomic_compare_exchange_weak(&q->peak, &old, bytes))
        ;
}

int pl_q_free(int d, xseg_t *xs, void *ptr, size_t size, size_t live_peak)
{
    size_t bound = bound_for(live_peak);
    quar *q = &g_q[d];
    int over;
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
        pl_sync_device(d);
        return xseg_free(xs, ptr) == XSEG_OK ? PL_SERVED : PL_FAILED;
    }
    q->items[q->count++] = (qent){ptr, size};
    set_add(q, ptr);
    q->bytes += size;
    atomic_store(&q->held, q->bytes);
    note_peak(q, q->bytes);
    over = q->bytes > bound || q->count >= g_count;
    pthread_mutex_unlock(&q->lock);
    atomic_fetch_add(&q->quarantined, 1);
    atomic_store(&q->last_bound, bound);
    if (over)
        pl_q_drain(d, xs, PL_Q_BOUND);
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
    if (!atomic_load_explicit(&g_q[d].held, memory_order_relaxed) || !look(xs, &mapped, &cached))
        return 0;
    if (cached < size && pl_q_drain(d, xs, PL_Q_GROWTH) > 0) /* it would grow for sure */
        return 0;
    return mapped;
}

void pl_q_after_alloc(int d, xseg_t *xs, size_t mapped_before)
{
    size_t mapped = 0, cached = 0;
    if (mapped_before && atomic_load_explicit(&g_q[d].held, memory_order_relaxed) &&
        look(xs, &mapped, &cached) && mapped > mapped_before)
        pl_q_drain(d, xs, PL_Q_GROWTH); /* it grew all the same: no more of that */
}

size_t pl_q_held(int d)
{
    return atomic_load(&g_q[d].held);
}

/* ---- fork, report ---- */

void pl_q_fork_child(void)
{
    for (int d = 0; d < PL_MAX_DEVICES; d++) {
        quar *q = &g_q[d];
        pthread_mutex_init(&q->lock, NULL); /* another thread may have held it */
        q->count = q->bytes = 0;
        if (q->set)
            memset(q->set, 0, g_set_size * sizeof *q->set);
        atomic_store(&q->held, 0);
    }
}

int pl_q_json(int d, char *buf, size_t cap)
{
    quar *q = &g_q[d];
    return snprintf(buf, cap,
                    "\"quarantine_bound\":\"%s\",\"quarantine_bound_bytes\":%zu,"
                    "\"quarantine_count\":%zu,\"quarantined\":%lu,"
                    "\"drains\":%lu,\"drains_bound\":%lu,\"drains_growth\":%lu,"
                    "\"drains_oom\":%lu,\"drains_exit\":%lu,\"quarantine_peak_bytes\":%zu,"
                    "\"quarantine_freed_bytes\":%lu,\"quarantine_free_errors\":%lu,"
                    "\"quarantine_held_bytes\":%zu",
                    g_spec, atomic_load(&q->last_bound), g_count, atomic_load(&q->quarantined), atomic_load(&q->drains),
                    atomic_load(&q->why[PL_Q_BOUND]), atomic_load(&q->why[PL_Q_GROWTH]),
                    atomic_load(&q->why[PL_Q_OOM]), atomic_load(&q->why[PL_Q_EXIT]),
                    atomic_load(&q->peak), atomic_load(&q->freed_bytes),
                    atomic_load(&q->errors), atomic_load(&q->held));
}
