/* alloc_xseg.c: the benchmark's xseg contender: one allocator of device 0
 * with the default configuration (backend forced to cuda so that a missing
 * GPU fails loudly instead of falling back to the host backend;
 * XSEG_BENCH_CONF replaces that string, e.g. to try other settings), and
 * xseg-keep, the same with release_threshold:unlimited, for comparison. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "xseg.h"

static xseg_t *g_xs;

static int init_with(const char *conf, char *err, size_t len)
{
    xseg_status st = xseg_create(&g_xs, 0, conf);

    if (st != XSEG_OK) {
        snprintf(err, len, "xseg_create(\"%s\"): %s", conf, xseg_last_error());
        return -1;
    }
    return 0;
}

static int x_init(char *err, size_t len)
{
    const char *conf = getenv("XSEG_BENCH_CONF");

    return init_with(conf != NULL ? conf : "backend:cuda", err, len);
}

/* A variant for comparison: nothing goes back to the device until trim. */
static int x_init_keep(char *err, size_t len)
{
    return init_with("backend:cuda,release_threshold:unlimited", err, len);
}

static void *x_alloc(size_t n, bench_stream s)
{
    void *p = NULL;

    return xseg_alloc(g_xs, n, s, &p) == XSEG_OK ? p : NULL;
}

static void x_free(void *p, size_t n, bench_stream s)
{
    (void)n;
    (void)s;
    (void)xseg_free(g_xs, p);
}

static int x_release(void)
{
    return xseg_trim(g_xs, 0, NULL) == XSEG_OK ? 0 : -1;
}

static const char *x_error(void)
{
    return xseg_last_error();
}

static uint64_t x_peak(void)
{
    xseg_stats st;

    memset(&st, 0, sizeof st);
    st.size = sizeof st;
    if (xseg_get_stats(g_xs, &st) != XSEG_OK)
        return 0;
    return st.mapped_bytes.peak;
}

static size_t x_drv(uint64_t *count, const char **name, size_t n)
{
    xseg_stats st;
    size_t k = 0;

    memset(&st, 0, sizeof st);
    st.size = sizeof st;
    if (xseg_get_stats(g_xs, &st) != XSEG_OK)
        return 0;
    for (int op = 0; op < XSEG_OP_COUNT && k < n; op++, k++) {
        count[k] = st.driver_calls[op];
        name[k] = xseg_op_name((xseg_op)op);
    }
    if (k < n) {
        count[k] = st.syncs;
        name[k++] = "syncs_waited";
    }
    return k;
}

static void x_retire(bench_stream s)
{
    (void)xseg_stream_retire(g_xs, s);
}

const bench_alloc bench_xseg = {
    .name = "xseg",
    .desc = "xseg (default config)",
    .init = x_init,
    .alloc = x_alloc,
    .free = x_free,
    .release = x_release,
    .last_error = x_error,
    .own_peak = x_peak,
    .drv_calls = x_drv,
    .stream_retire = x_retire,
};

const bench_alloc bench_xseg_keep = {
    .name = "xseg-keep",
    .desc = "xseg (release_threshold:unlimited)",
    .init = x_init_keep,
    .alloc = x_alloc,
    .free = x_free,
    .release = x_release,
    .last_error = x_error,
    .own_peak = x_peak,
    .drv_calls = x_drv,
    .stream_retire = x_retire,
};
