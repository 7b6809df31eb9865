/* process.c: process-wide state, in one place: the default allocators (one
 * per device, created on first use, never destroyed), the conf they are
 * created with, the one device registry (the PyTorch entry points,
 * plugin.c, look allocators up here), the graph-pool lock, the table of
 * out-of-memory handlers (xseg_set_oom_handler), and fork():
 * the fork generation and the one handler that holds every process-wide
 * lock of the library across fork(), in a fixed order. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "driver_host.h"
#include "internal.h"

atomic_uint xseg_fork_gen_now;
static pthread_once_t g_fork_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t g_default_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t g_pool_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t g_oom_lock = PTHREAD_MUTEX_INITIALIZER;
static xproc_oom g_oom[XPROC_OOM_HANDLERS];

/* ---- fork(): every process-wide lock is held across it ----
 * A child inherits each lock in the state the parent's threads left it, but
 * not those threads: a lock held at the fork would stay held forever in the
 * child.  So the library's process-wide locks are taken before fork() and
 * given back after it, in the parent and in the child, outermost first (the
 * order in which the library nests them, so that taking them cannot
 * deadlock against a thread that holds an outer one and waits for an inner
 * one):
 *   1. g_default_lock (here): xseg_default / xseg_set_default_conf; held
 *      across the creation of a default allocator, so around 3;
 *   2. g_pool_lock (here, xproc_pool_lock): the PyTorch graph pools
 *      (plugin.c); held across a pool's create, alloc and free, so around
 *      3, 4 and 5;
 *   3. the stats_shm file lock (shm.c, xshm_fork_lock): taken by create and
 *      destroy;
 *   4. g_tc_lock (tcache.c, xtc_fork_lock): taken around an allocator lock;
 *   5. g_oom_lock (here): the out-of-memory handlers' table; a leaf, taken
 *      by xseg_set_oom_handler, by xseg_destroy and on the out-of-memory
 *      path (until 2026-12-07 it was not held across fork(), and a child's
 *      xseg_destroy could wait on it forever);
 *   6. the host backend's counter lock (driver_host.c): a leaf.  The backend
 *      may serve without an allocator, so it keeps its own pthread_atfork
 *      handler; fork_register registers it before this one, and
 *      pthread_atfork runs prepare handlers in the reverse order of
 *      registration (parent and child handlers in order), so it is taken
 *      last and given back first.
 * Allocator locks (xs->lock) are not taken: an allocator created in the
 * parent fails with XSEG_ERR_FORKED in the child, and its destroy there does
 * not wait for its lock. */
static void fork_prepare(void)
{
    pthread_mutex_lock(&g_default_lock);
    pthread_mutex_lock(&g_pool_lock);
    xshm_fork_lock(1);
    xtc_fork_lock(1);
    pthread_mutex_lock(&g_oom_lock);
}

static void fork_parent(void)
{
    pthread_mutex_unlock(&g_oom_lock);
    xtc_fork_lock(0);
    xshm_fork_lock(0);
    pthread_mutex_unlock(&g_pool_lock);
    pthread_mutex_unlock(&g_default_lock);
}

static void fork_child(void)
{
    atomic_fetch_add(&xseg_fork_gen_now, 1);
    fork_parent();
}

static void fork_register(void)
{
    xhost_fork_init();
    pthread_atfork(fork_prepare, fork_parent, fork_child);
}

void xseg_fork_init(void)
{
    pthread_once(&g_fork_once, fork_register);
}

xseg_status xseg_check_fork(xseg_t *xs, const char *what)
{
    if (!xseg_forked(xs))
        return XSEG_OK;
    return xseg_fail(xs, XSEG_ERR_FORKED,
                     "%s: allocator of device %d used in a child after fork(); "
                     "create a new one in the child", what, xs->device);
}

/* ---- the graph-pool lock (plugin.c) ---- */

void xproc_pool_lock(void)
{
    xseg_fork_init(); /* the fork handler exists before the lock is first taken */
    pthread_mutex_lock(&g_pool_lock);
}

void xproc_pool_unlock(void)
{
    pthread_mutex_unlock(&g_pool_lock);
}

/* ---- the out-of-memory handlers' table ----
 * A small table, not a field of struct xseg: it is read only on the
 * out-of-memory path. */

int xproc_oom_set(xseg_t *xs, xseg_oom_handler fn, void *user)
{
    xproc_oom *slot = NULL;
    pthread_mutex_lock(&g_oom_lock);
    for (int i = 0; i < XPROC_OOM_HANDLERS && !slot; i++)
        if (g_oom[i].xs == xs)
            slot = &g_oom[i];
    for (int i = 0; i < XPROC_OOM_HANDLERS && !slot && fn; i++)
        if (!g_oom[i].xs)
            slot = &g_oom[i];
    if (slot)
        *slot = fn ? (xproc_oom){xs, fn, user} : (xproc_oom){NULL, NULL, NULL};
    pthread_mutex_unlock(&g_oom_lock);
    return slot != NULL || !fn;
}

int xproc_oom_find(xseg_t *xs, xproc_oom *out)
{
    xseg_t *want[2] = {xs, xs->parent};
    int found = 0;
    pthread_mutex_lock(&g_oom_lock);
    for (int w = 0; w < 2 && !found; w++)
        for (int i = 0; i < XPROC_OOM_HANDLERS && !found && want[w]; i++)
            if (g_oom[i].xs == want[w]) {
                *out = g_oom[i];
                found = 1;
            }
    pthread_mutex_unlock(&g_oom_lock);
    return found;
}

/* ---- process-wide default allocators: the device registry ----
 * Created on first use and never destroyed: they live until the process
 * ends, and the system takes their memory back then.  An exit handler or a
 * C++ static destructor runs at exit in an order xseg does not control
 * (before or after any handler of xseg's), and may still allocate or free
 * through xseg_default, the PyTorch entry points or an allocator pointer it
 * kept: each finds a valid allocator.  Nothing else may destroy one either
 * (xseg_destroy refuses), so no lookup here ever returns a destroyed
 * allocator.  The stats_shm file is unlinked at exit by shm.c. */

static _Atomic(xseg_t *) g_defaults[XSEG_MAX_DEVICES];
static char *g_default_conf;

int xproc_default_device(const xseg_t *xs)
{
    for (int d = 0; d < XSEG_MAX_DEVICES; d++)
        if (atomic_load_explicit(&g_defaults[d], memory_order_acquire) == xs)
            return d;
    return -1;
}

xseg_t *xproc_default_peek(int device)
{
    if (device < 0 || device >= XSEG_MAX_DEVICES)
        return NULL;
    return atomic_load_explicit(&g_defaults[device], memory_order_acquire);
}

/* ptr is in xs's arena (its tags' too) or starts one of its dedicated
 * blocks (share.c: registrable_min, outside the arena; not asked of a
 * parent's allocator in a forked child, whose lock a parent's thread may
 * hold forever). */
static int owns(const xseg_t *xs, const void *ptr)
{
    uintptr_t a = (uintptr_t)ptr;
    return xs && (xseg_range_owner((xseg_t *)xs, a) != NULL ||
                  (!xseg_forked(xs) && xshare_holds((xseg_t *)xs, ptr)));
}

xseg_t *xproc_default_owning(int device, const void *ptr)
{
    xseg_t *xs = xproc_default_peek(device);
    if (owns(xs, ptr))
        return xs;
    for (int d = 0; d < XSEG_MAX_DEVICES; d++) {
        xs = atomic_load_explicit(&g_defaults[d], memory_order_acquire);
        if (owns(xs, ptr))
            return xs;
    }
    return NULL;
}

xseg_status xseg_default(int device, xseg_t **out)
{
    if (!out)
        return xseg_fail(NULL, XSEG_ERR_INVALID_ARG, "xseg_default: out is NULL");
    if (device < 0 || device >= XSEG_MAX_DEVICES)
        return xseg_fail(NULL, XSEG_ERR_NO_DEVICE, "xseg_default: device %d out of range 0..%d",
                         device, XSEG_MAX_DEVICES - 1);
    xseg_t *xs = atomic_load_explicit(&g_defaults[device], memory_order_acquire);
    xseg_status st = XSEG_OK;
    if (!xs) {
        xseg_fork_init(); /* before the first g_default_lock */
        pthread_mutex_lock(&g_default_lock);
        xs = atomic_load(&g_defaults[device]);
        if (!xs && (st = xlife_create(&xs, device, g_default_conf, NULL,
                                      atomic_load(&xseg_fork_gen_now))) == XSEG_OK)
            atomic_store_explicit(&g_defaults[device], xs, memory_order_release);
        pthread_mutex_unlock(&g_default_lock);
    }
    *out = xs;
    return st;
}

static xseg_status keep_default_conf(const char *conf)
{
    xseg_conf probe;
    char err[512] = "";
    xseg_conf_defaults(&probe);
    xseg_status st = conf ? xseg_conf_parse(&probe, conf, err, sizeof err) : XSEG_OK;
    if (st != XSEG_OK)
        return xseg_fail(NULL, st, "%s", err);
    char *copy = conf ? strdup(conf) : NULL;
    if (conf && !copy)
        return xseg_fail(NULL, XSEG_ERR_OOM, "xseg_set_default_conf: no host memory");
    free(g_default_conf);
    g_default_conf = copy;
    return XSEG_OK;
}

xseg_status xseg_set_default_conf(const char *conf)
{
    xseg_fork_init();
    pthread_mutex_lock(&g_default_lock);
    for (int d = 0; d < XSEG_MAX_DEVICES; d++)
        if (atomic_load(&g_defaults[d])) {
            pthread_mutex_unlock(&g_default_lock);
            return xseg_fail(NULL, XSEG_ERR_INVALID_ARG,
                             "xseg_set_default_conf: the default allocator of device %d already "
                             "exists; set the conf before the first allocation", d);
        }
    xseg_status st = keep_default_conf(conf);
    pthread_mutex_unlock(&g_default_lock);
    return st;
}
