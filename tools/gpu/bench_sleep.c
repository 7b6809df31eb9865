/* bench_sleep.c: issue 14's figures for xseg_sleep / xseg_wake on one GPU.
 *
 *   bandwidth  the host-device link with pinned cudaMemcpyAsync: a 1 GiB
 *              cudaHostAlloc buffer and a 1 GiB cudaMalloc buffer, D2H and
 *              H2D of --bw-chunks chunks of 1 GiB, best of 3;
 *   discard    --discard-gib GiB live under a tag, as 1 GiB blocks and again
 *              as --small-mib MiB blocks: xseg_sleep(DISCARD) (target
 *              <= 30 ms at 40 GiB), then xseg_wake (map only, <= 10 ms);
 *              after each wake every block is written (usable again);
 *   backup     the tensors of a Llama-3-8B-shaped model in bf16 (291 blocks,
 *              16.06 GB with --layers 32) live under a tag: patterns written,
 *              xseg_sleep(BACKUP), the device memory given back is taken by
 *              cudaMalloc and overwritten, xseg_wake, the patterns read back
 *              and compared; GB/s against the measured link (target >= 80%).
 * Every test reads cudaMemGetInfo before the allocation, after it, after
 * each sleep and each wake, and repeats --reps times (>= 5 by default).
 * Output: JSON lines on stdout (one per repetition, one "..._summary" per
 * test with median and min..max, "done" last); progress on stderr.
 * Exit: 0 every test ran and every check passed; 1 a check or a call
 * failed; 2 usage or no GPU; 3 the --max-seconds budget cut tests short.
 *
 * Build: tools/gpu/build.sh --sleep XSEG_BUILD_DIR OUTPUT_BINARY, i.e.
 *   gcc -O2 -std=gnu11 -D_GNU_SOURCE -DXSEG_STATIC_DEFINE -Iinclude \
 *       -I$CUDA_HOME/include tools/gpu/bench_sleep.c BUILD/lib/libxseg.a \
 *       -L$CUDA_HOME/lib64 -Wl,-rpath,$CUDA_HOME/lib64 -lcudart -lpthread -ldl -lm
 * usage: bench_sleep [--tests bandwidth,discard,backup] [--reps 5]
 *        [--discard-gib 40] [--small-mib 64] [--layers 32] [--bw-chunks 4]
 *        [--max-seconds 240] [--conf XSEG_CONF] */
#include <cuda_runtime_api.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "xseg.h"

#define GIB ((size_t)1 << 30)
#define MIB ((size_t)1 << 20)
#define REGION ((size_t)4096) /* bytes of one checked region */
#define MAX_REPS 100

typedef struct opts {
    const char *tests;
    const char *conf;
    int reps;
    int discard_gib;
    int small_mib;
    int layers;
    int bw_chunks;
    double max_s;
} opts;

static xseg_t *g_xs;
static int g_failed;     /* a check or a call failed */
static int g_incomplete; /* the time budget cut something short */
static double g_start;
static double g_d2h_gbs, g_h2d_gbs; /* measured link, 0 when not measured */

/* ---- small helpers ---- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void progress(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void progress(const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "bench_sleep [%6.1fs] ", now_s() - g_start);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    fflush(stderr);
}

/* s as a JSON string body (quotes and control characters escaped). */
static const char *jstr(const char *s, char *buf, size_t len)
{
    size_t o = 0;
    for (; s && *s && o + 7 < len; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            buf[o++] = '\\';
            buf[o++] = (char)c;
        } else if (c < 0x20) {
            o += (size_t)snprintf(buf + o, len - o, "\\u%04x", c);
        } else {
            buf[o++] = (char)c;
        }
    }
    buf[o] = '\0';
    return buf;
}

/* A failed check or call: one {"test":..,"error":..} line; returns -1. */
static int fail(const char *test, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(const char *test, const char *fmt, ...)
{
    char msg[1024], esc[2200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    g_failed = 1;
    progress("%s: FAILED: %s", test, msg);
    printf("{\"test\":\"%s\",\"error\":\"%s\"}\n", test, jstr(msg, esc, sizeof esc));
    fflush(stdout);
    return -1;
}

#define CUDA_OR_FAIL(test, call)                                                         \
    do {                                                                                 \
        cudaError_t e_ = (call);                                                         \
        if (e_ != cudaSuccess)                                                           \
            return fail(test, "%s failed: %s (%d)", #call, cudaGetErrorString(e_), (int)e_); \
    } while (0)

static size_t dev_free(void)
{
    size_t fr = 0, total = 0;
    if (cudaMemGetInfo(&fr, &total) != cudaSuccess)
        return 0;
    return fr;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median, min and max of v[0..n) (n >= 1; v is left unchanged). */
static void stat3(const double *v, int n, double *med, double *mn, double *mx)
{
    double s[MAX_REPS];
    if (n <= 0) {
        *med = *mn = *mx = 0;
        return;
    }
    memcpy(s, v, (size_t)n * sizeof *s);
    qsort(s, (size_t)n, sizeof *s, cmp_double);
    *med = n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
    *mn = s[0];
    *mx = s[n - 1];
}

/* "name":{"median":..,"min":..,"max":..,"all":[..]} */
static void print_stat(const char *name, const double *v, int n)
{
    double med, mn, mx;
    stat3(v, n, &med, &mn, &mx);
    printf("\"%s\":{\"median\":%.4f,\"min\":%.4f,\"max\":%.4f,\"n\":%d,\"all\":[", name, med, mn,
           mx, n);
    for (int i = 0; i < n; i++)
        printf("%s%.4f", i ? "," : "", v[i]);
    printf("]}");
}

static double median_of(const double *v, int n)
{
    double med, mn, mx;
    stat3(v, n, &med, &mn, &mx);
    return med;
}

static int over_budget(const opts *o, const char *what)
{
    if (o->max_s <= 0 || now_s() - g_start < o->max_s)
        return 0;
    g_incomplete = 1;
    progress("%s: skipped, past --max-seconds %.0f", what, o->max_s);
    printf("{\"test\":\"skipped\",\"what\":\"%s\",\"reason\":\"past --max-seconds %.0f\"}\n", what,
           o->max_s);
    fflush(stdout);
    return 1;
}

/* ---- xseg figures ---- */

static int drv_get(uint64_t c[XSEG_OP_COUNT], uint64_t *syncs)
{
    xseg_stats st;
    memset(&st, 0, sizeof st);
    st.size = sizeof st;
    if (xseg_get_stats(g_xs, &st) != XSEG_OK)
        return -1;
    memcpy(c, st.driver_calls, sizeof st.driver_calls);
    *syncs = st.syncs;
    return 0;
}

/* The driver calls between two readings, as a JSON object of the nonzero ones. */
static const char *drv_delta(const uint64_t *a, const uint64_t *b, uint64_t sa, uint64_t sb,
                             char *buf, size_t len)
{
    size_t o = (size_t)snprintf(buf, len, "{\"syncs\":%llu", (unsigned long long)(sb - sa));
    for (int op = 0; op < XSEG_OP_COUNT && o < len; op++)
        if (b[op] != a[op])
            o += (size_t)snprintf(buf + o, len - o, ",\"%s\":%llu", xseg_op_name((xseg_op)op),
                                  (unsigned long long)(b[op] - a[op]));
    if (o + 2 < len)
        snprintf(buf + o, len - o, "}");
    return buf;
}

static int tag_stats(const char *test, int tag, xseg_tag_stats *st)
{
    memset(st, 0, sizeof *st);
    st->size = sizeof *st;
    xseg_status s = xseg_tag_stats_get(g_xs, tag, st);
    if (s != XSEG_OK)
        return fail(test, "xseg_tag_stats_get(tag %d): %s: %s", tag, xseg_strerror(s),
                    xseg_last_error());
    return 0;
}

/* ---- blocks under a tag ---- */

typedef struct blocks {
    void **p;
    size_t *size;
    size_t n;
    size_t bytes;
} blocks;

static void blocks_free(blocks *b)
{
    for (size_t i = 0; i < b->n; i++)
        if (b->p[i] && xseg_free(g_xs, b->p[i]) != XSEG_OK)
            (void)fail("free", "xseg_free(%p): %s", b->p[i], xseg_last_error());
    free(b->p);
    free(b->size);
    memset(b, 0, sizeof *b);
}

/* Allocate sizes[0..n) under tag on the legacy default stream. */
static int blocks_alloc(const char *test, int tag, const size_t *sizes, size_t n, blocks *b)
{
    memset(b, 0, sizeof *b);
    b->p = calloc(n, sizeof *b->p);
    b->size = calloc(n, sizeof *b->size);
    if (!b->p || !b->size) {
        blocks_free(b);
        return fail(test, "no host memory for %zu block records", n);
    }
    for (size_t i = 0; i < n; i++) {
        xseg_status s = xseg_alloc_tagged(g_xs, sizes[i], NULL, tag, &b->p[i]);
        if (s != XSEG_OK) {
            char msg[700];
            snprintf(msg, sizeof msg, "%s", xseg_last_error());
            blocks_free(b);
            return fail(test, "xseg_alloc_tagged(%zu bytes, block %zu of %zu, %zu bytes so "
                        "far): %s: %s", sizes[i], i, n, b->bytes, xseg_strerror(s), msg);
        }
        b->size[i] = sizes[i];
        b->n = i + 1;
        b->bytes += sizes[i];
    }
    return 0;
}

/* Write byte value v(i) over every block: the memory is touched. */
static int blocks_fill(const char *test, const blocks *b, int salt)
{
    for (size_t i = 0; i < b->n; i++)
        CUDA_OR_FAIL(test, cudaMemsetAsync(b->p[i], (int)((i * 37 + (size_t)salt * 11 + 1) & 0xff),
                                           b->size[i], 0));
    CUDA_OR_FAIL(test, cudaDeviceSynchronize());
    return 0;
}

/* ---- bandwidth ---- */

static int copy_run(int to_host, void *dev, void *host, int chunks, cudaStream_t s, double *gbs)
{
    double t0 = now_s();
    for (int i = 0; i < chunks; i++) {
        cudaError_t e = to_host ? cudaMemcpyAsync(host, dev, GIB, cudaMemcpyDeviceToHost, s)
                                : cudaMemcpyAsync(dev, host, GIB, cudaMemcpyHostToDevice, s);
        if (e != cudaSuccess)
            return fail("bandwidth", "cudaMemcpyAsync %s of 1 GiB: %s",
                        to_host ? "D2H" : "H2D", cudaGetErrorString(e));
    }
    CUDA_OR_FAIL("bandwidth", cudaStreamSynchronize(s));
    double dt = now_s() - t0;
    *gbs = (double)GIB * chunks / dt / 1e9;
    return 0;
}

static int bw_measure(const opts *o, void *dev, void *host, cudaStream_t s)
{
    double d2h[3], h2d[3], warm;
    if (copy_run(1, dev, host, 1, s, &warm) || copy_run(0, dev, host, 1, s, &warm))
        return -1;
    for (int t = 0; t < 3; t++)
        if (copy_run(1, dev, host, o->bw_chunks, s, &d2h[t]) ||
            copy_run(0, dev, host, o->bw_chunks, s, &h2d[t]))
            return -1;
    g_d2h_gbs = g_h2d_gbs = 0;
    for (int t = 0; t < 3; t++) {
        g_d2h_gbs = d2h[t] > g_d2h_gbs ? d2h[t] : g_d2h_gbs;
        g_h2d_gbs = h2d[t] > g_h2d_gbs ? h2d[t] : g_h2d_gbs;
    }
    printf("{\"test\":\"bandwidth\",\"chunk_bytes\":%zu,\"chunks\":%d,\"d2h_gbs\":%.3f,"
           "\"h2d_gbs\":%.3f,\"d2h_all\":[%.3f,%.3f,%.3f],\"h2d_all\":[%.3f,%.3f,%.3f],"
           "\"unit\":\"GB/s (1e9 bytes)\",\"how\":\"pinned cudaHostAlloc buffer, cudaMalloc "
           "buffer, cudaMemcpyAsync on one stream, best of 3\"}\n",
           GIB, o->bw_chunks, g_d2h_gbs, g_h2d_gbs, d2h[0], d2h[1], d2h[2], h2d[0], h2d[1],
           h2d[2]);
    fflush(stdout);
    progress("bandwidth: D2H %.1f GB/s, H2D %.1f GB/s (best of 3)", g_d2h_gbs, g_h2d_gbs);
    return 0;
}

static int test_bandwidth(const opts *o)
{
    void *dev = NULL, *host = NULL;
    cudaStream_t s = NULL;
    int rc = -1;
    progress("bandwidth: pinned cudaMemcpyAsync, %d x 1 GiB each way, best of 3", o->bw_chunks);
    if (cudaMalloc(&dev, GIB) != cudaSuccess)
        return fail("bandwidth", "cudaMalloc(1 GiB): %s", cudaGetErrorString(cudaGetLastError()));
    if (cudaHostAlloc(&host, GIB, cudaHostAllocDefault) != cudaSuccess) {
        (void)cudaFree(dev);
        return fail("bandwidth", "cudaHostAlloc(1 GiB): %s",
                    cudaGetErrorString(cudaGetLastError()));
    }
    memset(host, 0x3c, GIB);
    if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess)
        (void)fail("bandwidth", "cudaStreamCreate: %s", cudaGetErrorString(cudaGetLastError()));
    else
        rc = bw_measure(o, dev, host, s);
    if (s)
        (void)cudaStreamDestroy(s);
    (void)cudaFreeHost(host);
    (void)cudaFree(dev);
    return rc;
}

/* ---- discard ---- */

typedef struct rep_mem {
    size_t before_alloc, after_alloc, after_sleep, after_wake;
} rep_mem;

static int timed_sleep(const char *test, int tag, xseg_sleep_mode mode, double *ms)
{
    CUDA_OR_FAIL(test, cudaDeviceSynchronize()); /* only sleep's own work is timed */
    double t0 = now_s();
    xseg_status s = xseg_sleep(g_xs, &tag, 1, mode);
    *ms = (now_s() - t0) * 1e3;
    if (s != XSEG_OK)
        return fail(test, "xseg_sleep(tag %d, %s): %s: %s", tag,
                    mode == XSEG_SLEEP_BACKUP ? "backup" : "discard", xseg_strerror(s),
                    xseg_last_error());
    return 0;
}

static int timed_wake(const char *test, int tag, double *ms)
{
    double t0 = now_s();
    xseg_status s = xseg_wake(g_xs, &tag, 1);
    cudaError_t e = s == XSEG_OK ? cudaDeviceSynchronize() : cudaSuccess;
    *ms = (now_s() - t0) * 1e3;
    if (s != XSEG_OK)
        return fail(test, "xseg_wake(tag %d): %s: %s", tag, xseg_strerror(s), xseg_last_error());
    if (e != cudaSuccess)
        return fail(test, "cudaDeviceSynchronize after xseg_wake: %s", cudaGetErrorString(e));
    return 0;
}

/* One sleep + wake of a discard test, printed as a line. */
static int discard_rep(const char *variant, int tag, const blocks *b, int rep, rep_mem *m,
                       double *sleep_ms, double *wake_ms)
{
    uint64_t c0[XSEG_OP_COUNT], c1[XSEG_OP_COUNT], c2[XSEG_OP_COUNT], s0, s1, s2;
    char d1[600], d2[600];
    xseg_tag_stats ts;
    if (drv_get(c0, &s0) || timed_sleep("discard", tag, XSEG_SLEEP_DISCARD, sleep_ms))
        return -1;
    m->after_sleep = dev_free();
    if (drv_get(c1, &s1) || tag_stats("discard", tag, &ts))
        return -1;
    uint64_t lib_sleep = ts.last_sleep_ns, sleeping = ts.sleeping_bytes;
    if (!ts.asleep)
        return fail("discard", "tag stats say awake right after xseg_sleep");
    if (timed_wake("discard", tag, wake_ms))
        return -1;
    m->after_wake = dev_free();
    if (drv_get(c2, &s2) || tag_stats("discard", tag, &ts))
        return -1;
    int usable = blocks_fill("discard", b, rep + 1) == 0; /* writable again */
    printf("{\"test\":\"discard\",\"variant\":\"%s\",\"rep\":%d,\"blocks\":%zu,\"bytes\":%zu,"
           "\"sleep_ms\":%.3f,\"wake_ms\":%.3f,\"lib_sleep_ms\":%.3f,\"lib_wake_ms\":%.3f,"
           "\"sleeping_bytes\":%llu,\"free_before_alloc\":%zu,\"free_after_alloc\":%zu,"
           "\"free_after_sleep\":%zu,\"free_after_wake\":%zu,"
           "\"held_after_sleep_vs_before_alloc\":%lld,\"usable_after_wake\":%s,"
           "\"drv_sleep\":%s,\"drv_wake\":%s}\n",
           variant, rep, b->n, b->bytes, *sleep_ms, *wake_ms, lib_sleep / 1e6,
           ts.last_wake_ns / 1e6, (unsigned long long)sleeping, m->before_alloc, m->after_alloc,
           m->after_sleep, m->after_wake,
           (long long)m->before_alloc - (long long)m->after_sleep, usable ? "true" : "false",
           drv_delta(c0, c1, s0, s1, d1, sizeof d1), drv_delta(c1, c2, s1, s2, d2, sizeof d2));
    fflush(stdout);
    return usable ? 0 : -1;
}

static void discard_summary(const opts *o, const char *variant, const blocks *b,
                            const double *sl, const double *wk, const long long *held, int n)
{
    double hv[MAX_REPS];
    for (int i = 0; i < n; i++)
        hv[i] = (double)held[i];
    int at40 = o->discard_gib == 40;
    double ms = median_of(sl, n), mw = median_of(wk, n);
    printf("{\"test\":\"discard_summary\",\"variant\":\"%s\",\"blocks\":%zu,\"bytes\":%zu,",
           variant, b->n, b->bytes);
    print_stat("sleep_ms", sl, n);
    printf(",");
    print_stat("wake_ms", wk, n);
    printf(",");
    print_stat("held_after_sleep_bytes", hv, n);
    printf(",\"target_sleep_ms\":30,\"target_wake_ms\":10,\"targets_apply\":%s,"
           "\"sleep_target_met\":%s,\"wake_target_met\":%s}\n", at40 ? "true" : "false",
           ms <= 30 ? "true" : "false", mw <= 10 ? "true" : "false");
    fflush(stdout);
    progress("discard %s: sleep median %.2f ms, wake median %.2f ms (targets 30 / 10 ms%s)",
             variant, ms, mw, at40 ? "" : ", stated for 40 GiB");
}

/* free, trim, and say what the device got back */
static void blocks_release(const char *test, const char *variant, blocks *b, size_t before)
{
    blocks_free(b);
    xseg_status s = xseg_trim(g_xs, 0, NULL);
    if (s != XSEG_OK)
        (void)fail(test, "xseg_trim after %s: %s: %s", variant, xseg_strerror(s),
                   xseg_last_error());
    size_t fr = dev_free();
    printf("{\"test\":\"%s_released\",\"variant\":\"%s\",\"free_before_alloc\":%zu,"
           "\"free_after_free_and_trim\":%zu,\"difference\":%lld}\n", test, variant, before, fr,
           (long long)before - (long long)fr);
    fflush(stdout);
}

static int discard_variant(const opts *o, const char *variant, size_t block, size_t n)
{
    int tag = 0;
    char name[32];
    snprintf(name, sizeof name, "discard_%s", variant);
    if (xseg_tag_id(name, &tag) != XSEG_OK)
        return fail("discard", "xseg_tag_id(%s): %s", name, xseg_last_error());
    size_t *sizes = malloc(n * sizeof *sizes);
    if (!sizes)
        return fail("discard", "no host memory");
    for (size_t i = 0; i < n; i++)
        sizes[i] = block;
    rep_mem m = {0};
    blocks b;
    CUDA_OR_FAIL("discard", cudaDeviceSynchronize());
    m.before_alloc = dev_free();
    progress("discard %s: allocating %zu x %zu MiB under tag %d", variant, n, block / MIB, tag);
    int rc = blocks_alloc("discard", tag, sizes, n, &b);
    free(sizes);
    if (rc || blocks_fill("discard", &b, 0)) {
        blocks_release("discard", variant, &b, m.before_alloc);
        return -1;
    }
    m.after_alloc = dev_free();
    double sl[MAX_REPS], wk[MAX_REPS];
    long long held[MAX_REPS];
    int done = 0;
    for (int r = 0; r < o->reps && rc == 0; r++) {
        if (over_budget(o, "discard repetition"))
            break;
        rc = discard_rep(variant, tag, &b, r, &m, &sl[r], &wk[r]);
        held[r] = (long long)m.before_alloc - (long long)m.after_sleep;
        done += rc == 0;
    }
    if (done)
        discard_summary(o, variant, &b, sl, wk, held, done);
    blocks_release("discard", variant, &b, m.before_alloc);
    return rc;
}

static int test_discard(const opts *o)
{
    size_t gib = (size_t)o->discard_gib, small = (size_t)o->small_mib * MIB;
    char variant[32];
    int rc = discard_variant(o, "1GiB", GIB, gib);
    if (over_budget(o, "discard small blocks"))
        return rc;
    snprintf(variant, sizeof variant, "%dMiB", o->small_mib);
    int rc2 = discard_variant(o, variant, small, gib * GIB / small);
    return rc ? rc : rc2;
}

/* ---- backup ---- */

/* The tensors of a Llama-3-8B-shaped decoder in bf16 with `layers` layers
 * (vocab 128256, hidden 4096, intermediate 14336, 8 KV heads of 128): 2 +
 * 9 per layer + 1 sizes into out (cap entries); returns how many. */
static size_t llama_sizes(int layers, size_t *out, size_t cap)
{
    const size_t v = 128256, h = 4096, f = 14336, kv = 1024, e = 2;
    const size_t per[9] = {h * h * e, kv * h * e, kv * h * e, h * h * e, f * h * e,
                           f * h * e, h * f * e, h * e, h * e};
    size_t n = 0;
    if (cap < 2 + 9 * (size_t)layers + 1)
        return 0;
    out[n++] = v * h * e; /* embed_tokens */
    for (int l = 0; l < layers; l++)
        for (int k = 0; k < 9; k++)
            out[n++] = per[k];
    out[n++] = h * e;     /* final norm */
    out[n++] = v * h * e; /* lm_head (not tied) */
    return n;
}

typedef struct region {
    size_t block, off, len;
    int kind; /* 0: pattern written, 1: memset byte expected */
} region;

static uint64_t mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static void pattern(uint8_t *buf, size_t len, size_t block, size_t off, int rep)
{
    for (size_t i = 0; i < len; i += 8) {
        uint64_t w = mix64(((uint64_t)block << 40) ^ ((off + i) << 2) ^ (uint64_t)rep);
        memcpy(buf + i, &w, len - i < 8 ? len - i : 8);
    }
}

/* Head, tail, a middle region at a pseudo-random place and one place that
 * must still hold the memset byte, per block (a block under 4 regions:
 * one region, the whole block). */
static size_t make_regions(const blocks *b, region *out, int rep)
{
    size_t n = 0;
    for (size_t i = 0; i < b->n; i++) {
        size_t sz = b->size[i];
        if (sz < 4 * REGION) {
            out[n++] = (region){i, 0, sz, 0};
            continue;
        }
        size_t span = sz / 2 - 2 * REGION + 1; /* middle starts in [REGION, sz/2 - REGION] */
        size_t mid = REGION + (size_t)(mix64(i * 131 + (size_t)rep) % span) / 256 * 256;
        out[n++] = (region){i, 0, REGION, 0};
        out[n++] = (region){i, mid, REGION, 0};
        out[n++] = (region){i, sz / 2, REGION, 1};
        out[n++] = (region){i, sz - REGION, REGION, 0};
    }
    return n;
}

static int write_patterns(const blocks *b, const region *rg, size_t n, int rep, uint8_t *buf)
{
    if (blocks_fill("backup", b, rep))
        return -1;
    for (size_t k = 0; k < n; k++) {
        if (rg[k].kind)
            continue;
        pattern(buf, rg[k].len, rg[k].block, rg[k].off, rep);
        CUDA_OR_FAIL("backup", cudaMemcpy((char *)b->p[rg[k].block] + rg[k].off, buf, rg[k].len,
                                          cudaMemcpyHostToDevice));
    }
    CUDA_OR_FAIL("backup", cudaDeviceSynchronize());
    return 0;
}

/* Regions whose contents differ from what was written; -1 on a call failure. */
static long check_patterns(const blocks *b, const region *rg, size_t n, int rep, uint8_t *want,
                           uint8_t *got, char *first, size_t flen)
{
    long bad = 0;
    first[0] = '\0';
    for (size_t k = 0; k < n; k++) {
        const region *r = &rg[k];
        cudaError_t e = cudaMemcpy(got, (char *)b->p[r->block] + r->off, r->len,
                                   cudaMemcpyDeviceToHost);
        if (e != cudaSuccess)
            return fail("backup", "cudaMemcpy D2H of a checked region: %s",
                        cudaGetErrorString(e));
        if (r->kind)
            memset(want, (int)((r->block * 37 + (size_t)rep * 11 + 1) & 0xff), r->len);
        else
            pattern(want, r->len, r->block, r->off, rep);
        if (memcmp(want, got, r->len) == 0)
            continue;
        if (!bad++)
            snprintf(first, flen, "block %zu (%zu bytes) offset %zu, %zu bytes (%s)", r->block,
                     b->size[r->block], r->off, r->len, r->kind ? "memset" : "pattern");
    }
    return bad;
}

/* Take the device memory that sleep gave back and overwrite it, so that a
 * restore cannot pass by finding the old pages. */
static size_t scribble(size_t want)
{
    size_t fr = dev_free(), n = want;
    if (fr > GIB && n > fr - GIB)
        n = fr - GIB;
    for (int tries = 0; tries < 6 && n >= 64 * MIB; tries++, n /= 2) {
        void *p = NULL;
        if (cudaMalloc(&p, n) != cudaSuccess) {
            (void)cudaGetLastError();
            continue;
        }
        cudaError_t e = cudaMemset(p, 0xa5, n);
        if (e == cudaSuccess)
            e = cudaDeviceSynchronize();
        (void)cudaFree(p);
        return e == cudaSuccess ? n : 0;
    }
    return 0;
}

typedef struct backup_ctx {
    int tag;
    blocks b;
    region *rg;
    size_t nrg;
    uint8_t *want, *got;
    rep_mem m;
    double sl[MAX_REPS], wk[MAX_REPS], slg[MAX_REPS], wkg[MAX_REPS];
} backup_ctx;

static int backup_rep(backup_ctx *c, int rep)
{
    uint64_t c0[XSEG_OP_COUNT], c1[XSEG_OP_COUNT], c2[XSEG_OP_COUNT], s0, s1, s2;
    char d1[600], d2[600], first[200];
    xseg_tag_stats ts;
    c->nrg = make_regions(&c->b, c->rg, rep);
    if (write_patterns(&c->b, c->rg, c->nrg, rep, c->want))
        return -1;
    if (drv_get(c0, &s0) || timed_sleep("backup", c->tag, XSEG_SLEEP_BACKUP, &c->sl[rep]))
        return -1;
    c->m.after_sleep = dev_free();
    if (drv_get(c1, &s1) || tag_stats("backup", c->tag, &ts))
        return -1;
    uint64_t lib_sleep = ts.last_sleep_ns, bk = ts.backup_bytes;
    size_t scribbled = scribble(c->b.bytes + GIB);
    if (timed_wake("backup", c->tag, &c->wk[rep]))
        return -1;
    c->m.after_wake = dev_free();
    if (drv_get(c2, &s2) || tag_stats("backup", c->tag, &ts))
        return -1;
    long bad = check_patterns(&c->b, c->rg, c->nrg, rep, c->want, c->got, first, sizeof first);
    if (bad < 0)
        return -1;
    double gb = (double)(bk ? bk : c->b.bytes) / 1e9;
    c->slg[rep] = gb / (c->sl[rep] / 1e3);
    c->wkg[rep] = gb / (c->wk[rep] / 1e3);
    printf("{\"test\":\"backup\",\"rep\":%d,\"blocks\":%zu,\"bytes\":%zu,\"backup_bytes\":%llu,"
           "\"sleep_ms\":%.3f,\"wake_ms\":%.3f,\"lib_sleep_ms\":%.3f,\"lib_wake_ms\":%.3f,"
           "\"sleep_gbs\":%.3f,\"wake_gbs\":%.3f,\"sleep_frac_of_d2h\":%.4f,"
           "\"wake_frac_of_h2d\":%.4f,\"free_before_alloc\":%zu,\"free_after_alloc\":%zu,"
           "\"free_after_sleep\":%zu,\"free_after_wake\":%zu,"
           "\"held_after_sleep_vs_before_alloc\":%lld,\"scribbled_bytes\":%zu,"
           "\"regions_checked\":%zu,\"regions_bad\":%ld,\"first_bad\":\"%s\",\"contents_ok\":%s,"
           "\"drv_sleep\":%s,\"drv_wake\":%s}\n",
           rep, c->b.n, c->b.bytes, (unsigned long long)bk, c->sl[rep], c->wk[rep],
           lib_sleep / 1e6, ts.last_wake_ns / 1e6, c->slg[rep], c->wkg[rep],
           g_d2h_gbs > 0 ? c->slg[rep] / g_d2h_gbs : 0, g_h2d_gbs > 0 ? c->wkg[rep] / g_h2d_gbs : 0,
           c->m.before_alloc, c->m.after_alloc, c->m.after_sleep, c->m.after_wake,
           (long long)c->m.before_alloc - (long long)c->m.after_sleep, scribbled, c->nrg, bad,
           first, bad ? "false" : "true", drv_delta(c0, c1, s0, s1, d1, sizeof d1),
           drv_delta(c1, c2, s1, s2, d2, sizeof d2));
    fflush(stdout);
    progress("backup rep %d: sleep %.1f ms (%.1f GB/s), wake %.1f ms (%.1f GB/s), %ld of %zu "
             "regions bad", rep, c->sl[rep], c->slg[rep], c->wk[rep], c->wkg[rep], bad, c->nrg);
    if (bad)
        return fail("backup", "rep %d: %ld of %zu checked regions differ after wake; first: %s",
                    rep, bad, c->nrg, first);
    if (scribbled == 0)
        progress("backup rep %d: note: could not take the freed memory to overwrite it", rep);
    return 0;
}

static void backup_summary(const backup_ctx *c, int n)
{
    /* rep 0 also allocates the pinned host buffer: the warm figures leave it out */
    int w0 = n > 1 ? 1 : 0, nw = n - w0;
    double sg = median_of(c->slg + w0, nw), wg = median_of(c->wkg + w0, nw);
    double fs = g_d2h_gbs > 0 ? sg / g_d2h_gbs : 0, fw = g_h2d_gbs > 0 ? wg / g_h2d_gbs : 0;
    printf("{\"test\":\"backup_summary\",\"blocks\":%zu,\"bytes\":%zu,\"reps\":%d,"
           "\"warm_from_rep\":%d,", c->b.n, c->b.bytes, n, w0);
    print_stat("sleep_ms_all", c->sl, n);
    printf(",");
    print_stat("wake_ms_all", c->wk, n);
    printf(",");
    print_stat("sleep_gbs_warm", c->slg + w0, nw);
    printf(",");
    print_stat("wake_gbs_warm", c->wkg + w0, nw);
    printf(",\"link_d2h_gbs\":%.3f,\"link_h2d_gbs\":%.3f,\"sleep_frac_of_link\":%.4f,"
           "\"wake_frac_of_link\":%.4f,\"target_frac\":0.8,\"sleep_target_met\":%s,"
           "\"wake_target_met\":%s}\n",
           g_d2h_gbs, g_h2d_gbs, fs, fw, fs >= 0.8 ? "true" : "false",
           fw >= 0.8 ? "true" : "false");
    fflush(stdout);
    progress("backup: warm median sleep %.1f GB/s (%.0f%% of D2H), wake %.1f GB/s (%.0f%% of "
             "H2D); target 80%%", sg, fs * 100, wg, fw * 100);
}

static int backup_setup(const opts *o, backup_ctx *c)
{
    size_t cap = 3 + 9 * (size_t)o->layers, *sizes = malloc(cap * sizeof *sizes);
    if (!sizes)
        return fail("backup", "no host memory");
    size_t n = llama_sizes(o->layers, sizes, cap);
    CUDA_OR_FAIL("backup", cudaDeviceSynchronize());
    c->m.before_alloc = dev_free();
    progress("backup: allocating %zu blocks (Llama-3-8B tensors, %d layers) under tag %d", n,
             o->layers, c->tag);
    int rc = blocks_alloc("backup", c->tag, sizes, n, &c->b);
    free(sizes);
    if (rc)
        return -1;
    c->rg = calloc(4 * n, sizeof *c->rg);
    c->want = malloc(REGION * 4);
    c->got = malloc(REGION * 4);
    if (!c->rg || !c->want || !c->got)
        return fail("backup", "no host memory for the checks");
    if (blocks_fill("backup", &c->b, 0))
        return -1;
    c->m.after_alloc = dev_free();
    progress("backup: %zu bytes live; device free %zu -> %zu", c->b.bytes, c->m.before_alloc,
             c->m.after_alloc);
    return 0;
}

static int test_backup(const opts *o)
{
    static backup_ctx c;
    memset(&c, 0, sizeof c);
    if (xseg_tag_id("backup", &c.tag) != XSEG_OK)
        return fail("backup", "xseg_tag_id(backup): %s", xseg_last_error());
    if (g_d2h_gbs <= 0)
        progress("backup: the link was not measured (no bandwidth test): fractions read 0");
    int rc = backup_setup(o, &c), done = 0;
    for (int r = 0; r < o->reps && rc == 0; r++) {
        if (over_budget(o, "backup repetition"))
            break;
        rc = backup_rep(&c, r);
        done += rc == 0;
    }
    if (done)
        backup_summary(&c, done);
    if (c.b.p)
        blocks_release("backup", "llama3-8b", &c.b, c.m.before_alloc);
    free(c.rg);
    free(c.want);
    free(c.got);
    return rc;
}

/* ---- main ---- */

static int usage(void)
{
    fprintf(stderr, "usage: bench_sleep [--tests bandwidth,discard,backup] [--reps N (5)] "
                    "[--discard-gib N (40)] [--small-mib N (64)] [--layers N (32)] "
                    "[--bw-chunks N (4)] [--max-seconds S (240)] [--conf XSEG_CONF]\n");
    return 2;
}

static int parse(int argc, char **argv, opts *o)
{
    for (int i = 1; i < argc; i++) {
        const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(k, "-h") == 0 || strcmp(k, "--help") == 0 || !v)
            return -1;
        i++;
        if (strcmp(k, "--tests") == 0)
            o->tests = v;
        else if (strcmp(k, "--conf") == 0)
            o->conf = v;
        else if (strcmp(k, "--reps") == 0)
            o->reps = atoi(v);
        else if (strcmp(k, "--discard-gib") == 0)
            o->discard_gib = atoi(v);
        else if (strcmp(k, "--small-mib") == 0)
            o->small_mib = atoi(v);
        else if (strcmp(k, "--layers") == 0)
            o->layers = atoi(v);
        else if (strcmp(k, "--bw-chunks") == 0)
            o->bw_chunks = atoi(v);
        else if (strcmp(k, "--max-seconds") == 0)
            o->max_s = atof(v);
        else
            return -1;
    }
    if (o->reps < 1 || o->reps > MAX_REPS || o->discard_gib < 1 || o->small_mib < 2 ||
        o->small_mib > 1024 || o->layers < 0 || o->layers > 256 || o->bw_chunks < 1) {
        fprintf(stderr, "bench_sleep: out of range: reps 1..%d, discard-gib >= 1, small-mib "
                        "2..1024, layers 0..256, bw-chunks >= 1\n", MAX_REPS);
        return -1;
    }
    return 0;
}

static int wants(const opts *o, const char *t)
{
    size_t n = strlen(t);
    for (const char *p = o->tests; (p = strstr(p, t)) != NULL; p += n)
        if ((p == o->tests || p[-1] == ',') && (p[n] == '\0' || p[n] == ','))
            return 1;
    return 0;
}

static void env_line(const opts *o, const char *conf)
{
    struct cudaDeviceProp p;
    int drv = 0, rt = 0;
    size_t fr = 0, total = 0;
    char esc[600];
    memset(&p, 0, sizeof p);
    (void)cudaGetDeviceProperties(&p, 0);
    (void)cudaDriverGetVersion(&drv);
    (void)cudaRuntimeGetVersion(&rt);
    (void)cudaMemGetInfo(&fr, &total);
    printf("{\"test\":\"env\",\"gpu\":\"%s\",\"cc\":\"%d.%d\",\"driver_api\":%d,\"runtime\":%d,"
           "\"total_bytes\":%zu,\"free_bytes\":%zu,\"xseg_version\":\"%s\",\"conf\":\"%s\","
           "\"tests\":\"%s\",\"reps\":%d,\"discard_gib\":%d,\"small_mib\":%d,\"layers\":%d}\n",
           p.name, p.major, p.minor, drv, rt, total, fr, xseg_version(),
           jstr(conf, esc, sizeof esc), o->tests, o->reps, o->discard_gib, o->small_mib,
           o->layers);
    fflush(stdout);
}

static void run_tests(const opts *o)
{
    if (wants(o, "bandwidth") && !over_budget(o, "bandwidth"))
        (void)test_bandwidth(o);
    if (wants(o, "discard") && !over_budget(o, "discard"))
        (void)test_discard(o);
    if (wants(o, "backup") && !over_budget(o, "backup"))
        (void)test_backup(o);
}

int main(int argc, char **argv)
{
    opts o = {"bandwidth,discard,backup", NULL, 5, 40, 64, 32, 4, 240};
    g_start = now_s();
    if (parse(argc, argv, &o) != 0)
        return usage();
    const char *conf = o.conf ? o.conf : getenv("XSEG_BENCH_CONF");
    if (!conf || !*conf)
        conf = "backend:cuda";
    if (cudaSetDevice(0) != cudaSuccess || cudaFree(0) != cudaSuccess) {
        fprintf(stderr, "bench_sleep: no CUDA device: %s\n",
                cudaGetErrorString(cudaGetLastError()));
        printf("{\"test\":\"done\",\"ok\":false,\"error\":\"no CUDA device\"}\n");
        return 2;
    }
    env_line(&o, conf);
    xseg_status s = xseg_create(&g_xs, 0, conf);
    if (s != XSEG_OK) {
        (void)fail("create", "xseg_create(0, \"%s\"): %s: %s", conf, xseg_strerror(s),
                   xseg_last_error());
        printf("{\"test\":\"done\",\"ok\":false,\"complete\":false}\n");
        return 1;
    }
    run_tests(&o);
    s = xseg_destroy(g_xs);
    if (s != XSEG_OK)
        (void)fail("destroy", "xseg_destroy: %s: %s", xseg_strerror(s), xseg_last_error());
    printf("{\"test\":\"done\",\"ok\":%s,\"complete\":%s,\"seconds\":%.1f}\n",
           g_failed ? "false" : "true", g_incomplete ? "false" : "true", now_s() - g_start);
    progress("done: %s%s", g_failed ? "FAILED" : "ok", g_incomplete ? " (incomplete)" : "");
    return g_failed ? 1 : g_incomplete ? 3 : 0;
}
