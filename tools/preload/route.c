/* route.c: what libxseg_preload.so does with a call once it has one: the
 * device's process-wide xseg allocator (xseg_default, created lazily and
 * thread-safely from XSEG_CONF, backend cuda unless the conf names one),
 * allocation, free (xseg's pointers only: xseg_default_owner tells them
 * apart without side effects) and what makes it safe (the quarantine of
 * quarantine.c by default; XSEG_PRELOAD_FREE=sync: a device sync per free;
 * =stream: xseg's stream order), async allocations from the one legacy
 * pool (XSEG_PRELOAD_ASYNC=pool, the default; =stream: a pool per stream),
 * the cap in cudaMemGetInfo, the
 * application's live bytes, the block behind a pointer for the pointer
 * queries (ptrquery.c), and the stats written at exit
 * (XSEG_PRELOAD_STATS; XSEG_PRELOAD_PEAK_SNAPSHOT: peaksnap.c).
 * A device xseg cannot serve (no backend, no such device, a fork child's
 * inherited allocator) is passed through to CUDA for good, once said on
 * stderr with XSEG_PRELOAD_VERBOSE=1. */
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <xseg.h>

#include "preload.h"

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static int g_off;          /* the conf was refused: everything passes through */
enum { FREE_QUARANTINE, FREE_SYNC, FREE_STREAM };
static int g_free_mode = FREE_QUARANTINE;
static const char *const g_mode_names[] = {"quarantine", "sync", "stream"};
static int g_async_pool = 1; /* XSEG_PRELOAD_ASYNC: pool (default), stream */
static int g_verbose;
static const char *g_stats_path;
static _Atomic(xseg_t *) g_xs[PL_MAX_DEVICES];
static atomic_int g_pass[PL_MAX_DEVICES];
static atomic_int g_inherited[PL_MAX_DEVICES]; /* in a fork child: the parent's allocators */
static atomic_size_t g_live[PL_MAX_DEVICES], g_live_peak[PL_MAX_DEVICES]; /* requested bytes */
static atomic_ulong g_syncs[PL_MAX_DEVICES];   /* device syncs made by this library */

void pl_say(const char *fmt, ...)
{
    if (!g_verbose)
        return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "xseg-preload[%d]: %s\n", (int)getpid(), line);
}

/* ---- start-up ---- */

/* Whether "key:value,..." names key `backend`. */
static int names_backend(const char *conf)
{
    for (const char *p = conf; p && *p;) {
        p += strspn(p, " \t,");
        size_t n = strcspn(p, ":,");
        while (n && (p[n - 1] == ' ' || p[n - 1] == '\t'))
            n--;
        if (n == 7 && strncmp(p, "backend", 7) == 0)
            return 1;
        p += strcspn(p, ",");
    }
    return 0;
}

static void write_stats(void);

/* The parent's allocators refuse service in the child (XSEG_ERR_FORKED):
 * their devices pass through, and so do frees of their pointers. */
static void on_fork_child(void)
{
    for (int d = 0; d < PL_MAX_DEVICES; d++)
        if (atomic_load(&g_xs[d])) {
            atomic_store(&g_inherited[d], 1);
            atomic_store(&g_pass[d], 1);
        }
    pl_q_fork_child();
}

static void set_conf(void)
{
    const char *env = getenv("XSEG_CONF");
    env = env ? env : "";
    size_t len = strlen(env) + 32;
    char *conf = malloc(len);
    if (!conf) {
        g_off = 1;
        return;
    }
    snprintf(conf, len, "%s%s%s", names_backend(env) ? "" : "backend:cuda",
             names_backend(env) || !*env ? "" : ",", env);
    if (xseg_set_default_conf(conf) != XSEG_OK) {
        fprintf(stderr, "xseg-preload: XSEG_CONF \"%s\" refused: %s; every CUDA call passes "
                        "through\n", env, xseg_last_error());
        g_off = 1;
    }
    pl_say("conf \"%s\"", conf);
    free(conf);
}

/* XSEG_PRELOAD_FREE (quarantine, sync, stream) and XSEG_PRELOAD_QUARANTINE. */
static void set_free_mode(void)
{
    char why[256] = "";
    const char *f = getenv("XSEG_PRELOAD_FREE");
    int quarantine = pl_q_configure(getenv("XSEG_PRELOAD_QUARANTINE"), why, sizeof why);
    if (*why)
        fprintf(stderr, "xseg-preload: %s\n", why);
    g_free_mode = quarantine ? FREE_QUARANTINE : FREE_SYNC;
    if (f && strcmp(f, "stream") == 0)
        g_free_mode = FREE_STREAM;
    else if (f && strcmp(f, "sync") == 0)
        g_free_mode = FREE_SYNC;
    else if (f && *f && strcmp(f, "quarantine") != 0)
        fprintf(stderr, "xseg-preload: XSEG_PRELOAD_FREE=%s is not quarantine, sync or stream; "
                        "%s is used\n", f, g_mode_names[g_free_mode]);
    pl_say("frees: %s (quarantine bound %s)", g_mode_names[g_free_mode], pl_q_spec());
    const char *a = getenv("XSEG_PRELOAD_ASYNC");
    g_async_pool = !(a && strcmp(a, "stream") == 0);
    if (a && *a && g_async_pool && strcmp(a, "pool") != 0)
        fprintf(stderr, "xseg-preload: XSEG_PRELOAD_ASYNC=%s is not pool or stream; pool is "
                        "used\n", a);
    pl_say("async allocations: %s", g_async_pool ? "pool" : "stream");
}

static void init(void)
{
    const char *v = getenv("XSEG_PRELOAD_VERBOSE");
    g_verbose = v && *v && strcmp(v, "0") != 0;
    set_free_mode();
    set_conf();
    pthread_atfork(NULL, NULL, on_fork_child);
    g_stats_path = getenv("XSEG_PRELOAD_STATS");
    if (g_stats_path && *g_stats_path)
        atexit(write_stats);
    pl_peak_configure(getenv("XSEG_PRELOAD_PEAK_SNAPSHOT"));
}

/* ---- devices ---- */

static void pass_device(int d, const char *why)
{
    if (d >= 0 && d < PL_MAX_DEVICES && !atomic_exchange(&g_pass[d], 1))
        pl_say("device %d: %s; its calls pass through to CUDA from now on", d, why);
}

/* The allocator of device d, created on first use; NULL: pass through. */
static xseg_t *device_xs(int d)
{
    pthread_once(&g_once, init);
    if (g_off || d < 0 || d >= PL_MAX_DEVICES || atomic_load(&g_pass[d]))
        return NULL;
    xseg_t *xs = atomic_load_explicit(&g_xs[d], memory_order_acquire);
    if (xs)
        return xs;
    if (xseg_default(d, &xs) != XSEG_OK) {
        pass_device(d, xseg_last_error());
        return NULL;
    }
    atomic_store_explicit(&g_xs[d], xs, memory_order_release);
    pl_say("device %d: xseg allocator created (backend %s)", d, xseg_backend_name(xs));
    return xs;
}

/* The application's live bytes (as requested) and their peak. */
static void live_add(int d, size_t size)
{
    size_t now = atomic_fetch_add(&g_live[d], size) + size;
    size_t peak = atomic_load(&g_live_peak[d]);
    while (now > peak && !atomic_compare_exchange_weak(&g_live_peak[d], &peak, now))
        ;
}

static void live_sub(int d, size_t size)
{
    atomic_fetch_sub(&g_live[d], size);
}

/* xseg_alloc, after the quarantine made room; out of memory with blocks in
 * quarantine: drain them and try again. */
static xseg_status alloc_from(int device, xseg_t *xs, size_t size, pl_stream stream, void **out)
{
    size_t mapped = g_free_mode == FREE_QUARANTINE ? pl_q_before_alloc(device, xs, size) : 0;
    xseg_status st = xseg_alloc(xs, size, stream, out);
    if (st == XSEG_ERR_OOM && pl_q_reclaim(device, xs, PL_Q_OOM) > 0)
        st = xseg_alloc(xs, size, stream, out);
    else if (st == XSEG_OK && mapped)
        pl_q_after_alloc(device, xs, mapped);
    return st;
}

int pl_alloc(int device, size_t size, pl_stream stream, void **out)
{
    int old = pl_inside, r = PL_PASS;
    pl_inside = 1;
    pthread_once(&g_once, init);
    if (g_async_pool)
        stream = NULL; /* one pool: the async free records its stream (free_block) */
    xseg_t *xs = device_xs(device);
    if (xs) {
        xseg_status st = alloc_from(device, xs, size, stream, out);
        if (st == XSEG_OK) {
            live_add(device, size);
            pl_peak_after_alloc(device, xs, atomic_load(&g_live[device]));
            r = PL_SERVED;
        } else if (st == XSEG_ERR_FORKED) {
            pass_device(device, "allocator inherited from the parent of a fork");
        } else {
            r = PL_FAILED;
            pl_say("allocation of %zu bytes on device %d: %s", size, device, xseg_last_error());
        }
    }
    pl_inside = old;
    return r;
}

/* ---- free ---- */

typedef pl_result (*fn_int_p)(int *);
typedef pl_result (*fn_int_int_p)(int *, int);
typedef pl_result (*fn_void)(void);
typedef pl_result (*fn_ctx_dev)(void **, int);
typedef pl_result (*fn_dev)(int);
typedef pl_result (*fn_ctx)(void *);
typedef pl_result (*fn_ctx_p)(void **);

#define FN(var, type, slot) \
    type var;               \
    do {                    \
        void *p_ = pl_real(slot); \
        memcpy(&var, &p_, sizeof p_); \
    } while (0)

int pl_current_device(void)
{
    FN(get_dev, fn_int_p, S_cuCtxGetDevice);
    int cur = -1;
    return get_dev && get_dev(&cur) == PL_SUCCESS ? cur : -1;
}

void *pl_current_ctx(int d)
{
    FN(get_cur, fn_ctx_p, S_cuCtxGetCurrent);
    void *ctx = NULL;
    if (!get_cur || pl_current_device() != d || get_cur(&ctx) != PL_SUCCESS)
        return NULL;
    return ctx;
}

typedef pl_result (*fn_state)(int, unsigned *, int *);

/* A retain of an active primary context only: retaining an inactive one
 * would create it (device memory, time) for a program that never uses it. */
void *pl_primary_retain(int d)
{
    FN(dev_get, fn_int_int_p, S_cuDeviceGet);
    FN(state, fn_state, S_cuDevicePrimaryCtxGetState);
    FN(retain, fn_ctx_dev, S_cuDevicePrimaryCtxRetain);
    int dev = 0, active = 0;
    unsigned flags = 0;
    void *ctx = NULL;
    if (!dev_get || !state || !retain || dev_get(&dev, d) != PL_SUCCESS ||
        state(dev, &flags, &active) != PL_SUCCESS || !active || retain(&ctx, dev) != PL_SUCCESS)
        return NULL;
    return ctx;
}

void pl_primary_release(int d)
{
    FN(dev_get, fn_int_int_p, S_cuDeviceGet);
    FN(release, fn_dev, S_cuDevicePrimaryCtxRelease_v2);
    int dev = 0;
    if (dev_get && release && dev_get(&dev, d) == PL_SUCCESS)
        release(dev);
}

/* d's primary context pushed for the time of a sync: its result
 * (PL_SUCCESS when no sync could be made: an inactive primary context has
 * no work to wait for, and is not made for it). */
static pl_result sync_primary(int d, fn_void sync)
{
    FN(push, fn_ctx, S_cuCtxPushCurrent_v2);
    FN(pop, fn_ctx_p, S_cuCtxPopCurrent_v2);
    void *old = NULL, *ctx;
    pl_result rc = PL_SUCCESS;
    if (!push || !pop || !(ctx = pl_primary_retain(d)))
        return rc;
    if (push(ctx) == PL_SUCCESS) {
        rc = sync();
        pop(&old);
    }
    pl_primary_release(d);
    return rc;
}

/* Wait for the work queued on device d, as cudaFree and cuMemFree do
 * before memory can be used again: in ctx when given (pushed for the
 * call), else in the thread's current context when it is d's, else in d's
 * primary context. */
pl_result pl_sync_ctx(int d, void *ctx)
{
    FN(sync, fn_void, S_cuCtxSynchronize);
    FN(push, fn_ctx, S_cuCtxPushCurrent_v2);
    FN(pop, fn_ctx_p, S_cuCtxPopCurrent_v2);
    void *old = NULL;
    pl_result rc;
    if (!sync)
        return PL_SUCCESS;
    atomic_fetch_add(&g_syncs[d], 1);
    if (ctx && push && pop && push(ctx) == PL_SUCCESS) {
        rc = sync();
        pop(&old);
    } else if (pl_current_device() == d) {
        rc = sync();
    } else {
        rc = sync_primary(d, sync);
    }
    return rc;
}

pl_result pl_sync_device(int d)
{
    return pl_sync_ctx(d, NULL);
}

void pl_capture_relaxed(void)
{
    FN(exchange, fn_int_p, S_cuThreadExchangeStreamCaptureMode);
    int mode = 2; /* CU_STREAM_CAPTURE_MODE_RELAXED */
    if (exchange)
        exchange(&mode);
}

/* Free a live block of xseg: stream-ordered (async), quarantined, or
 * after a device sync (FREE_SYNC), or at once (FREE_STREAM). */
static int free_block(int d, xseg_t *xs, void *ptr, size_t rounded, int async, pl_stream s)
{
    /* With one pool, a block freed on the legacy stream would be the pool's
     * again in legacy order only, and a non-blocking stream could get it
     * early: it is freed as cudaFree frees (the quarantine's device sync,
     * with no wait here; a sync with FREE_SYNC). */
    if (async && g_async_pool && !s)
        async = 0;
    if (async)
        (void)xseg_record_stream(xs, ptr, s); /* a bad pointer: the free says why */
    else if (g_free_mode == FREE_QUARANTINE)
        return pl_q_free(d, xs, ptr, rounded, atomic_load(&g_live_peak[d]));
    else if (g_free_mode == FREE_SYNC && PL_CAPTURE_ERROR(pl_sync_device(d)))
        return PL_FAILED; /* a capture forbids the wait: kernels may still use it */
    return xseg_free(xs, ptr) == XSEG_OK ? PL_SERVED : PL_FAILED;
}

int pl_free(void *ptr, int async, pl_stream stream)
{
    xseg_t *xs = NULL;
    int d = -1, old = pl_inside, r = PL_PASS;
    size_t rounded = 0, requested = 0;
    if (xseg_default_owner(ptr, &xs, &d) != XSEG_OK || atomic_load(&g_inherited[d]))
        return PL_PASS; /* not xseg's, or xseg's of the parent of a fork */
    pl_inside = 1;
    xseg_status st = xseg_block_size(xs, ptr, &rounded, &requested);
    if (st == XSEG_OK)
        r = free_block(d, xs, ptr, rounded, async, stream);
    else if (st != XSEG_ERR_FORKED)
        r = PL_FAILED;
    if (r == PL_SERVED)
        live_sub(d, requested);
    else if (r == PL_FAILED)
        pl_say("free of %p on device %d: %s", ptr, d,
            st == XSEG_OK ? "freed already (in quarantine)" : xseg_last_error());
    pl_inside = old;
    return r;
}

/* ---- pointer queries ---- */

/* ptr's process-wide allocator and device: 0 when it is not xseg's, or is
 * the parent's of a fork. */
static int owner(const void *ptr, xseg_t **xs, int *d)
{
    return ptr && xseg_default_owner(ptr, xs, d) == XSEG_OK && !atomic_load(&g_inherited[*d]);
}

int pl_owned(const void *ptr, int *device)
{
    xseg_t *xs = NULL;
    return owner(ptr, &xs, device);
}

int pl_block(const void *ptr, void **base, size_t *size, int *device)
{
    xseg_t *xs = NULL;
    int d = -1, old = pl_inside, r = PL_FAILED;
    if (!owner(ptr, &xs, &d))
        return PL_PASS;
    pl_inside = 1;
    xseg_status st = xseg_block_range(xs, ptr, base, size, NULL);
    if (st == XSEG_ERR_FORKED)
        r = PL_PASS;
    else if (st == XSEG_OK && !pl_q_holds(d, *base)) /* quarantined: the program freed it */
        r = PL_SERVED;
    *device = d;
    pl_inside = old;
    return r;
}

/* ---- memory info ---- */

void pl_meminfo(int device, size_t *free_bytes, size_t *total_bytes)
{
    int old = pl_inside;
    pl_inside = 1;
    xseg_t *xs = device_xs(device); /* NULL for a fork parent's device */
    xseg_stats st = {.size = sizeof st};
    if (xs && xseg_get_stats(xs, &st) == XSEG_OK && st.mapped_cap) {
        size_t held = pl_q_held(device); /* quarantined: xseg's again after a sync */
        size_t cap = st.mapped_cap, live = st.allocated_bytes.current;
        live = live > held ? live - held : 0;
        size_t cached = st.mapped_bytes.current > live ? st.mapped_bytes.current - live : 0;
        size_t room = cap > live ? cap - live : 0;  /* what the cap still allows */
        size_t phys = *free_bytes + cached;         /* what the device can still give */
        if (phys < *free_bytes)
            phys = SIZE_MAX;
        *free_bytes = room < phys ? room : phys;
        if (cap < *total_bytes)
            *total_bytes = cap;
    }
    pl_inside = old;
}

/* ---- stats at exit ---- */

static void write_one(FILE *f, int d, xseg_t *xs)
{
    static char buf[1 << 16];
    char q[1024], calls[2048];
    size_t len = 0;
    if (xseg_stats_json(xs, buf, sizeof buf, &len) != XSEG_OK)
        return;
    pl_q_json(d, q, sizeof q);
    pl_calls_json(calls, sizeof calls);
    fprintf(f, "{\"pid\":%d,\"device\":%d,\"stats\":%s,\"preload\":{\"free_mode\":\"%s\","
               "\"async\":\"%s\",\"live_bytes\":%zu,\"live_peak_bytes\":%zu,\"syncs\":%lu,%s,"
               "\"calls\":%s}}\n",
            (int)getpid(), d, buf, g_mode_names[g_free_mode], g_async_pool ? "pool" : "stream",
            atomic_load(&g_live[d]),
            atomic_load(&g_live_peak[d]), atomic_load(&g_syncs[d]), q, calls);
}

FILE *pl_open_at_exit(const char *var, const char *spec)
{
    char path[4096];
    const char *pid = strstr(spec, "%p");
    if (pid)
        snprintf(path, sizeof path, "%.*s%d%s", (int)(pid - spec), spec, (int)getpid(), pid + 2);
    else
        snprintf(path, sizeof path, "%s", spec);
    FILE *f = fopen(path, "a");
    if (!f)
        fprintf(stderr, "xseg-preload: %s: cannot open %s\n", var, path);
    return f;
}

static void write_stats(void)
{
    FILE *f = pl_open_at_exit("XSEG_PRELOAD_STATS", g_stats_path);
    if (!f)
        return;
    pl_inside = 1;
    xseg_t *own[PL_MAX_DEVICES];
    for (int d = 0; d < PL_MAX_DEVICES; d++) {
        own[d] = atomic_load(&g_xs[d]);
        own[d] = atomic_load(&g_inherited[d]) ? NULL : own[d];
    }
    pl_q_drain_at_exit(own); /* exact figures: nothing left in quarantine */
    for (int d = 0; d < PL_MAX_DEVICES; d++)
        if (own[d])
            write_one(f, d, own[d]);
    fclose(f);
}
