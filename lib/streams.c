/* streams.c: per-stream state and stream-ordered safety.  Each stream has
 * an epoch counter: a free on stream S is stamped with S's epoch, and one
 * reusable event per stream, recorded lazily, tells when an epoch is done.
 * Frees of blocks also used on other streams (record_stream) wait in a
 * pending list until events on those streams complete.
 *
 * Retired streams (xseg_stream_retire) are "gone": their handle is never
 * named to the driver again.  Retire waits for the stream's work; from then
 * on its uses are complete, its cached blocks and empty slabs are free space
 * of every stream, and its state moves to xs->gone_streams until nothing
 * refers to it (live blocks and slabs allocated on it, record_stream uses),
 * when xstreams_sweep frees it.  If that wait fails, the event recorded at
 * retire is kept and waited on (it names no stream) before any of that.
 * The order of those steps, which also touches blocks and slabs, is free.c's
 * (xseg_retire_stream, xseg_collect_streams); this file does the stream
 * side of each. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static xstream *stream_new(xseg_t *xs, void *handle)
{
    xstream *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->handle = handle;
    s->epoch = 1;
    xfi_init(&s->idx);
    if (xseg_ptrmap_put(&xs->streams, (uintptr_t)handle, (uintptr_t)s) != 0) {
        free(s);
        return NULL;
    }
    s->next_all = xs->all_streams;
    xs->all_streams = s;
    return s;
}

xstream *xstream_get(xseg_t *xs, void *handle)
{
    xstream *s = xs->last_stream;
    if (s && s->handle == handle)
        return s;
    uintptr_t v;
    if (xseg_ptrmap_get(&xs->streams, (uintptr_t)handle, &v))
        s = (xstream *)v;
    else if (!(s = stream_new(xs, handle)))
        return NULL;
    xs->last_stream = s;
    return s;
}

/* Record the stream's event for its current epoch; the epoch advances.
 * Never on a retired stream: the application may have destroyed it. */
static int record(xseg_t *xs, xstream *s)
{
    int rc;
    if (s->gone)
        return XDRV_NOT_PERMITTED;
    if (!s->event) {
        rc = xdrv_event_create(xs, &s->event);
        if (rc != XDRV_SUCCESS) {
            s->event = NULL;
            return rc;
        }
    }
    rc = xdrv_event_record(xs, s->event, s->handle);
    if (rc == XDRV_SUCCESS)
        s->ev_epoch = s->epoch++;
    return rc;
}

/* Query (or, if `block`, wait for) the stream's outstanding event; returns
 * 1 once it has completed (s->done advances). */
static int poll_event(xseg_t *xs, xstream *s, int block)
{
    int rc = xdrv_event_query(xs, s->event);
    if (rc == XDRV_NOT_READY && block) {
        xs->syncs++;
        rc = xdrv_event_sync(xs, s->event);
    }
    if (rc == XDRV_SUCCESS && s->ev_epoch > s->done)
        s->done = s->ev_epoch;
    return rc == XDRV_SUCCESS;
}

/* Events form a chain: a new one is recorded only once the previous one
 * has completed, so that while the GPU runs behind the CPU the frees older
 * than the outstanding event still become reusable when it completes
 * (re-recording a pending event would push that point back forever). */
int xstream_done(xseg_t *xs, xstream *s, uint64_t epoch, int block)
{
    if (s->done >= epoch || s->retired)
        return 1;
    if (s->gone) /* only the retire-time event is left; it covers every epoch */
        return s->ev_epoch <= s->done || poll_event(xs, s, block);
    if (s->ev_epoch > s->done) { /* an event is outstanding */
        int complete = poll_event(xs, s, block && s->ev_epoch >= epoch);
        if (s->done >= epoch)
            return 1;
        if (!complete && !block)
            return 0;
    }
    if (record(xs, s) != XDRV_SUCCESS)
        return 0;
    poll_event(xs, s, block);
    return s->done >= epoch;
}

/* Wait for everything queued on s so far: its event, or failing that a
 * stream sync (the stream still exists while retire runs). */
static int retire_wait(xseg_t *xs, xstream *s)
{
    if (xstream_done(xs, s, s->epoch, 1))
        return 1;
    xs->syncs++;
    return xdrv_stream_sync(xs, s->handle) == XDRV_SUCCESS;
}

static void destroy_event(xseg_t *xs, xstream *s)
{
    if (s->event)
        xdrv_event_destroy(xs, s->event);
    s->event = NULL;
}

/* Remove the uses on s (complete) from a use list; returns entries left. */
static uint32_t uses_drop(xuses *u, const xstream *s)
{
    uint32_t k = 0;
    for (uint32_t i = 0; i < u->n; i++)
        if (u->u[i].s != s)
            u->u[k++] = u->u[i];
    u->n = k;
    return k;
}

typedef struct drop_walk {
    const xstream *s;
    uintptr_t *empty; /* addresses whose use list became empty */
    size_t n, cap;
    int no_memory;    /* empty lists stay in the map: one deferred free each */
} drop_walk;

static void drop_live_uses(uintptr_t addr, uintptr_t v, void *arg)
{
    drop_walk *w = arg;
    if (uses_drop((xuses *)v, w->s) || w->no_memory)
        return;
    if (w->n == w->cap) {
        size_t cap = w->cap ? w->cap * 2 : 16;
        uintptr_t *e = realloc(w->empty, cap * sizeof *e);
        if (!e) {
            w->no_memory = 1;
            return;
        }
        w->empty = e;
        w->cap = cap;
    }
    w->empty[w->n++] = addr;
}

/* Every use on s is complete: forget them, so that nothing names s. */
static void forget_uses(xseg_t *xs, xstream *s)
{
    drop_walk w = {s, NULL, 0, 0, 0};
    if (xs->uses.count)
        xseg_ptrmap_each(&xs->uses, drop_live_uses, &w);
    for (size_t i = 0; i < w.n; i++) {
        uintptr_t v;
        if (xseg_ptrmap_del(&xs->uses, w.empty[i], &v))
            free((void *)v);
    }
    free(w.empty);
    atomic_store_explicit(&xs->nuses, (int)xs->uses.count, memory_order_relaxed);
    for (xpending *p = xs->pend_head; p; p = p->next)
        uses_drop(p->uses, s); /* an empty one completes at the next pass */
}

/* A gone stream's work is complete (free.c's settle, in two halves around
 * its blocks and slabs): its event goes; then its uses are forgotten and
 * moved blocks stop naming it. */
void xstream_settle_begin(xseg_t *xs, xstream *s)
{
    s->retired = 1;
    s->done = s->epoch;
    destroy_event(xs, s);
}

void xstream_settle_end(xseg_t *xs, xstream *s)
{
    forget_uses(xs, s);
    for (xlist_node *n = xlist_first(&xs->moved); n; n = xlist_next(n))
        if (xblk_of_lru(n)->owner == s)
            xblk_of_lru(n)->owner = NULL;
}

static void unlink_live(xseg_t *xs, xstream *s)
{
    for (xstream **pp = &xs->all_streams; *pp; pp = &(*pp)->next_all)
        if (*pp == s) {
            *pp = s->next_all;
            break;
        }
    s->next_all = xs->gone_streams;
    xs->gone_streams = s;
    xs->ngone++;
}

int xstream_retire_begin(xseg_t *xs, xstream *s)
{
    int done = retire_wait(xs, s);
    /* Not done, but the event recorded at retire covers all its work. */
    int waiting = !done && s->event && s->ev_epoch > s->done && s->ev_epoch + 1 == s->epoch;
    s->gone = 1;
    xseg_ptrmap_del(&xs->streams, (uintptr_t)s->handle, NULL);
    if (xs->last_stream == s)
        xs->last_stream = NULL;
    unlink_live(xs, s);
    if (waiting)
        s->epoch = s->ev_epoch; /* later frees on s wait for that event */
    return !waiting; /* done, or nothing left to wait on: settle now */
}

static void mark_uses(xuses *u)
{
    for (uint32_t i = 0; i < u->n; i++)
        if (u->u[i].s->gone)
            u->u[i].s->mark = 1;
}

static void mark_live_uses(uintptr_t addr, uintptr_t v, void *arg)
{
    (void)addr;
    (void)arg;
    mark_uses((xuses *)v);
}

/* Mark the gone states something still refers to. */
static void mark_gone(xseg_t *xs)
{
    for (xstream *g = xs->gone_streams; g; g = g->next_all)
        g->mark = 0;
    for (xblock *b = xs->first_block; b; b = b->anext) {
        if (b->owner && b->owner->gone)
            b->owner->mark = 1;
        if ((b->flags & XB_SLAB) && b->slab->owner->gone)
            b->slab->owner->mark = 1;
    }
    if (xs->uses.count)
        xseg_ptrmap_each(&xs->uses, mark_live_uses, NULL);
    for (xpending *p = xs->pend_head; p; p = p->next)
        mark_uses(p->uses);
}

void xstreams_sweep(xseg_t *xs)
{
    mark_gone(xs);
    for (xstream **pp = &xs->gone_streams; *pp;) {
        xstream *g = *pp;
        if (g->mark) {
            pp = &g->next_all;
            continue;
        }
        *pp = g->next_all;
        destroy_event(xs, g);
        free(g);
        xs->ngone--;
    }
    xs->gone_floor = xs->ngone;
}

size_t xstreams_count(const xseg_t *xs)
{
    size_t n = xs->ngone;
    for (const xstream *s = xs->all_streams; s; s = s->next_all)
        n++;
    return n;
}

static void free_list(xseg_t *xs, xstream *s, int call_driver)
{
    while (s) {
        xstream *n = s->next_all;
        if (s->event && call_driver)
            xdrv_event_destroy(xs, s->event);
        free(s);
        s = n;
    }
}

void xstreams_fini(xseg_t *xs, int call_driver)
{
    free_list(xs, xs->all_streams, call_driver);
    free_list(xs, xs->gone_streams, call_driver);
    xs->all_streams = xs->gone_streams = NULL;
    xs->ngone = xs->gone_floor = 0;
    xs->last_stream = NULL;
    while (xs->pend_head) {
        xpending *p = xs->pend_head;
        xs->pend_head = p->next;
        free(p->uses);
        free(p);
    }
    xs->pend_tail = NULL;
}

xseg_status xuses_add(xseg_t *xs, uintptr_t addr, xstream *s)
{
    uintptr_t v = 0;
    xuses *u = xseg_ptrmap_get(&xs->uses, addr, &v) ? (xuses *)v : NULL;
    for (uint32_t i = 0; u && i < u->n; i++)
        if (u->u[i].s == s)
            return XSEG_OK;
    if (!u || u->n == u->cap) {
        uint32_t cap = u ? u->cap * 2 : 2;
        xuses *n = realloc(u, sizeof *n + cap * sizeof(xuse));
        if (!n)
            return xseg_fail(xs, XSEG_ERR_OOM, "xseg: no host memory to record a stream use");
        if (!u)
            n->n = 0;
        n->cap = cap;
        u = n;
        if (xseg_ptrmap_put(&xs->uses, addr, (uintptr_t)u) != 0) {
            if (!v)
                free(u);
            return xseg_fail(xs, XSEG_ERR_OOM, "xseg: no host memory to record a stream use");
        }
    }
    u->u[u->n++] = (xuse){s, 0};
    return XSEG_OK;
}

xseg_status xpending_add(xseg_t *xs, uintptr_t addr, uintptr_t tag, xuses *u)
{
    xpending *p = malloc(sizeof *p);
    if (!p)
        return xseg_fail(xs, XSEG_ERR_OOM, "xseg: no host memory for a deferred free");
    for (uint32_t i = 0; i < u->n; i++) {
        xstream *s = u->u[i].s;
        u->u[i].epoch = s->epoch;
        if (s->gone) /* its retire-time wait or event covers the use */
            continue;
        if (record(xs, s) != XDRV_SUCCESS)
            u->u[i].epoch = 0; /* cannot track: wait for a full sync */
    }
    p->next = NULL;
    p->addr = addr;
    p->tag = tag;
    p->uses = u;
    if (xs->pend_tail)
        xs->pend_tail->next = p;
    else
        xs->pend_head = p;
    xs->pend_tail = p;
    xs->deferred++;
    return XSEG_OK;
}
