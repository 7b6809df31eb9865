/* lifecycle.c: an allocator's construction and teardown: the driver picked
 * and opened, the caps, the tables, the arena and its first free block,
 * monitoring, the sharing state (share.c); and everything freed again (with
 * or without driver calls: a forked child must not touch the parent's
 * memory).  The entry points
 * xseg_create / xseg_destroy (api.c) check their arguments, the fork state
 * and the default allocators (process.c) and call down here. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver_host.h"
#include "internal.h"

#define XSEG_DEFAULT_MAX_HANDLE ((size_t)1 << 30)

static atomic_ullong g_next_id;

static xseg_status pick_driver(xseg_t *xs, const xseg_driver *forced)
{
    xseg_backend_kind k = xs->conf.backend;
    if (forced) {
        xs->drv = forced;
        return XSEG_OK;
    }
    if (k == XSEG_BACKEND_AUTO)
        k = (xseg_driver_cuda_ptr && xseg_cuda_available()) ? XSEG_BACKEND_CUDA : XSEG_BACKEND_HOST;
    if (k == XSEG_BACKEND_HOST) {
        xs->drv = &xseg_driver_host;
        return XSEG_OK;
    }
    if (!xseg_driver_cuda_ptr)
        return xseg_fail(xs, XSEG_ERR_NO_BACKEND,
                         "xseg: backend:cuda requested but this build has no CUDA backend "
                         "(no cuda.h at build time); use backend:host or auto");
    if (!xseg_cuda_available())
        return xseg_fail(xs, XSEG_ERR_NO_BACKEND,
                         "xseg: backend:cuda requested but libcuda.so.1 did not load or "
                         "reports no device; use backend:host or auto");
    xs->drv = xseg_driver_cuda_ptr;
    return XSEG_OK;
}

static xseg_status open_driver(xseg_t *xs, int device)
{
    char err[256] = "";
    int rc = xdrv_init(xs, device, xs->conf.host_capacity, err, sizeof err);
    if (rc != XDRV_SUCCESS) {
        xs->dctx = NULL;
        int nodev = rc == XDRV_INVALID_DEVICE || rc == XDRV_NO_DEVICE;
        return xseg_fail(xs, nodev ? XSEG_ERR_NO_DEVICE : XSEG_ERR_DRIVER,
                         "xseg: opening device %d on the %s backend failed (%s): %s", device,
                         xdrv_name(xs), xdrv_error_name(xs, rc), err);
    }
    if (xs->conf.host_event_lag && xdrv_has(xs, XDRV_CAP_EVENT_LAG))
        xseg_host_set_event_lag(xs->dctx, xs->conf.host_event_lag);
    if (xs->conf.host_driver_latency == XSEG_LATENCY_H200 && xdrv_has(xs, XDRV_CAP_LATENCY_MODEL))
        xseg_host_set_latency(xs->dctx, &xseg_host_latency_h200);
    size_t fr = 0, total = 0;
    rc = xdrv_mem_info(xs, &fr, &total);
    if (rc != XDRV_SUCCESS || total == 0)
        return xseg_fail(xs, XSEG_ERR_DRIVER, "xseg: reading device %d memory size failed (%s)",
                         device, xdrv_error_name(xs, rc));
    xs->dev_total = total;
    return XSEG_OK;
}

static xseg_status set_caps(xseg_t *xs)
{
    char err[512] = "";
    xs->max_handle = xs->conf.handle_size ? xs->conf.handle_size : XSEG_DEFAULT_MAX_HANDLE;
    if (xseg_conf_cap(&xs->conf, xs->dev_total, &xs->cap, err, sizeof err) != XSEG_OK)
        return xseg_fail(xs, XSEG_ERR_CONFIG, "%s", err); /* a cap of 0 would read as none */
    atomic_store(&xs->fam_cap, xs->cap); /* a tag's is unused: its parent's counts */
    return XSEG_OK;
}

static xseg_status init_arena(xseg_t *xs)
{
    size_t va = xs->conf.va_size ? xs->conf.va_size
                                 : (xs->dev_total > SIZE_MAX / 4 ? SIZE_MAX / 4 : xs->dev_total) * 4;
    xseg_status st = xarena_init(xs, va);
    if (st != XSEG_OK)
        return st;
    xblock *b = xblock_new(xs);
    if (!b)
        return xseg_fail(xs, XSEG_ERR_OOM, "xseg: no host memory");
    b->addr = xs->arena.base;
    b->size = xs->arena.size;
    b->flags = XB_FREE;
    xfi_insert(&xs->neutral, b);
    xs->first_block = b;
    return XSEG_OK;
}

static xseg_status init_maps(xseg_t *xs)
{
    if (xseg_ptrmap_init(&xs->live, 1024) || xseg_ptrmap_init(&xs->streams, 16) ||
        xseg_ptrmap_init(&xs->uses, 16) || xsmall_init(xs))
        return xseg_fail(xs, XSEG_ERR_OOM, "xseg: no host memory for the allocator's tables");
    return XSEG_OK;
}

static void free_uses(uintptr_t k, uintptr_t v, void *arg)
{
    (void)k;
    (void)arg;
    free((void *)v);
}

/* Frees everything; returns how many driver calls failed on the way. */
static uint64_t teardown(xseg_t *xs, int call_driver, const char **last)
{
    uint64_t tag_failed = 0;
    for (int t = 1; t < XSEG_MAX_TAGS; t++) { /* they use this one's driver: first */
        xseg_t *c = atomic_exchange(&xs->tags[t], NULL);
        if (c)
            tag_failed += teardown(c, call_driver, NULL);
    }
    xworker_stop(xs, call_driver && xs->dctx); /* its jobs settled first */
    uint64_t errors0 = xs->drv_errors - tag_failed;
    xshare_fini(xs, call_driver && xs->dctx); /* dedicated and imported blocks (share.c) */
    xseg_monitor_fini(xs);
    xstreams_fini(xs, call_driver && xs->dctx);
    if (xs->class_of)
        xsmall_fini(xs);
    xblk_moved_fini(xs, call_driver && xs->dctx);
    for (xblock *b = xs->first_block; b;) {
        xblock *n = b->anext;
        free(b);
        b = n;
    }
    for (xblock *b = xs->spare_blocks; b;) {
        xblock *n = b->fnext;
        free(b);
        b = n;
    }
    xsleep_fini(xs, call_driver && xs->dctx);
    if (xs->dctx)
        xarena_fini(xs, call_driver);
    if (xs->uses.keys)
        xseg_ptrmap_each(&xs->uses, free_uses, NULL);
    xseg_ptrmap_fini(&xs->uses);
    xseg_ptrmap_fini(&xs->live);
    xseg_ptrmap_fini(&xs->streams);
    uint64_t failed = xs->drv_errors - errors0;
    if (last)
        *last = failed ? xdrv_error_name(xs, xs->last_drv_rc) : "";
    if (xs->dctx && (call_driver || xs->drv_shared))
        xdrv_fini(xs);
    free(xs->qsnap); /* query.c's snapshot: one object */
    free(xs->conf_text);
    free(xs);
    return failed;
}

/* reclaim:worker, or auto on a backend whose driver calls cost real time
 * (cuda; the host backend's cost little, and its tests and replay figures
 * stay deterministic). */
static int wants_worker(const xseg_t *xs)
{
    if (xs->conf.reclaim == XSEG_RECLAIM_WORKER)
        return 1;
    return xs->conf.reclaim == XSEG_RECLAIM_AUTO && strcmp(xdrv_name(xs), "cuda") == 0;
}

/* The steps after the conf is parsed, each only if all before succeeded. */
static xseg_status build(xseg_t *xs, int device, const xseg_driver *drv)
{
    xseg_status st = XSEG_OK;
    if (device < 0)
        st = xseg_fail(xs, XSEG_ERR_NO_DEVICE, "xseg_create: device %d is negative", device);
    if (st == XSEG_OK)
        st = pick_driver(xs, drv);
    if (st == XSEG_OK)
        st = open_driver(xs, device);
    if (st == XSEG_OK)
        st = set_caps(xs);
    if (st == XSEG_OK)
        st = init_maps(xs);
    if (st == XSEG_OK)
        st = init_arena(xs);
    if (st == XSEG_OK)
        st = xseg_monitor_init(xs);
    if (st == XSEG_OK && wants_worker(xs))
        st = xworker_start(xs);
    return st;
}

/* A fresh allocator with its conf parsed (kept as text for its tags). */
static xseg_status start(xseg_t **out, int device, unsigned fork_gen, const char *text,
                         const char *from)
{
    xseg_t *xs = calloc(1, sizeof *xs);
    if (!xs)
        return xseg_fail(NULL, XSEG_ERR_OOM, "xseg_create: no host memory");
    *out = xs;
    xs->device = device;
    xs->fork_gen = fork_gen;
    xlock_init(&xs->lock);
    xseg_conf_defaults(&xs->conf);
    xs->conf_text = strdup(text ? text : "");
    if (!xs->conf_text)
        return xseg_fail(NULL, XSEG_ERR_OOM, "xseg_create: no host memory");
    char err[512] = "";
    xseg_status st = xseg_conf_parse(&xs->conf, text, err, sizeof err);
    if (st != XSEG_OK)
        xseg_fail(NULL, st, "%s%s", err, from);
    return st;
}

/* What every allocator gets once built: its id, thread caches, shrinker. */
static void finish(xseg_t *xs)
{
    xs->id = atomic_fetch_add(&g_next_id, 1) + 1;
    /* Thread caches bypass history and live publication: off with those. */
    xs->tc_on = xs->conf.thread_cache && xs->conf.caching && !xs->conf.history &&
                !xs->conf.stats_shm && xs->conf.release_threshold != XSEG_RELEASE_NOW;
    xs->shrinker.held = xtc_held_for;   /* growth first flushes held caches */
    xs->shrinker.flush = xtc_flush_for;
    xs->shrinker.over_threshold = xseg_over_threshold; /* deferred frees, kept slabs */
}

xseg_status xlife_create(xseg_t **out, int device, const char *conf, const xseg_driver *drv,
                         unsigned fork_gen)
{
    xseg_t *xs = NULL;
    const char *text = conf ? conf : getenv("XSEG_CONF");
    xseg_status st = start(&xs, device, fork_gen, text,
                           conf ? "" : " (from the XSEG_CONF environment variable)");
    if (!xs)
        return st;
    if (st == XSEG_OK)
        st = build(xs, device, drv);
    if (st == XSEG_OK) /* the family's sharing state: peer_access applies from the start */
        st = xshare_setup(xs);
    finish(xs);
    if (st != XSEG_OK) {
        char keep[768];
        snprintf(keep, sizeof keep, "%s", xseg_last_error());
        teardown(xs, 1, NULL);
        xseg_fail(NULL, st, "%s", keep);
        return st;
    }
    xseg_clear_error();
    *out = xs;
    return XSEG_OK;
}

/* A tag's allocator: the parent's conf without monitoring or worker of its
 * own (the parent's stats, JSON and Prometheus include it, tags.c), and no
 * sharing state of its own: the family's is the parent's (one driver
 * context, so one set of peers; one token file; its dedicated blocks are
 * the parent's, share.c), which applies peer_access to its mappings too. */
static xseg_status build_tag(xseg_t *xs, const xseg_t *parent)
{
    xdrv_share(xs, parent);
    xs->dev_total = parent->dev_total;
    xseg_status st = set_caps(xs);
    if (st == XSEG_OK)
        st = init_maps(xs);
    if (st == XSEG_OK)
        st = init_arena(xs);
    return st;
}

xseg_status xlife_create_tag(xseg_t *parent, int tag, xseg_t **out)
{
    static const char extra[] = ",stats_shm:off,history:0,reclaim:sync";
    size_t len = strlen(parent->conf_text) + sizeof extra;
    char *text = malloc(len);
    if (!text)
        return xseg_fail(NULL, XSEG_ERR_OOM, "xseg: no host memory for tag %d", tag);
    snprintf(text, len, "%s%s", parent->conf_text, extra);
    xseg_t *xs = NULL;
    xseg_status st = start(&xs, parent->device, parent->fork_gen, text, "");
    free(text);
    if (!xs)
        return st;
    xs->tag = tag;
    xs->parent = parent;
    if (st == XSEG_OK)
        st = build_tag(xs, parent);
    finish(xs);
    if (st != XSEG_OK) {
        char keep[768];
        snprintf(keep, sizeof keep, "%s", xseg_last_error());
        teardown(xs, 1, NULL);
        return xseg_fail(NULL, st, "xseg: making the allocator of tag %d failed: %s", tag, keep);
    }
    *out = xs;
    return XSEG_OK;
}

xseg_status xlife_destroy(xseg_t *xs, int call_driver)
{
    int device = xs->device;
    const char *last = "";

    uint64_t failed = teardown(xs, call_driver, &last);
    if (failed)
        return xseg_fail(NULL, XSEG_ERR_DRIVER,
                         "xseg_destroy: %llu driver calls failed (last: %s) while giving "
                         "device %d's memory back; the backend's own shutdown released what "
                         "was left", (unsigned long long)failed, last, device);
    return XSEG_OK;
}
