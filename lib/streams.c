/* streams.c: per-stream state and stream-ordered safety.  Each stream has
 * an epoch counter: a free on stream S is stamped with S's epoch, and one
 * reusable event per stream, recorded lazily, tells when an epoch is done.
 * Frees of blocks also used on other streams (record_stream) wait in a
 * pending list until events on those streams complete. */
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

/* Record the stream's event for its current epoch; the epoch advances. */
static int record(xseg_t *xs, xstream *s)
{
    int rc;
    if (!s->event) {
        rc = xseg_drv_count(xs, XSEG_OP_EVENT_CREATE, xs->drv->event_create(xs->dctx, &s->event));
        if (rc != XDRV_SUCCESS) {
            s->event = NULL;
            return rc;
        }
    }
    rc = xseg_drv_count(xs, XSEG_OP_EVENT_RECORD, xs->drv->event_record(xs->dctx, s->event, s->handle));
    if (rc == XDRV_SUCCESS)
        s->ev_epoch = s->epoch++;
    return rc;
}

/* Query (or, if `block`, wait for) the stream's outstanding event; returns
 * 1 once it has completed (s->done advances). */
static int poll_event(xseg_t *xs, xstream *s, int block)
{
    int rc = xseg_drv_count(xs, XSEG_OP_EVENT_QUERY, xs->drv->event_query(xs->dctx, s->event));
    if (rc == XDRV_NOT_READY && block) {
        xs->syncs++;
        rc = xseg_drv_count(xs, XSEG_OP_EVENT_SYNC, xs->drv->event_sync(xs->dctx, s->event));
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

void xstream_retire(xseg_t *xs, xstream *s)
{
    xstream_done(xs, s, s->epoch, 1);
    s->retired = 1;
    xseg_ptrmap_del(&xs->streams, (uintptr_t)s->handle, NULL);
    if (xs->last_stream == s)
        xs->last_stream = NULL;
    if (s->event)
        xseg_drv_count(xs, XSEG_OP_EVENT_DESTROY, xs->drv->event_destroy(xs->dctx, s->event));
    s->event = NULL;
    xblk_neutralize(xs, s);
}

void xstreams_fini(xseg_t *xs, int call_driver)
{
    xstream *s = xs->all_streams;
    while (s) {
        xstream *n = s->next_all;
        if (s->event && call_driver)
            xseg_drv_count(xs, XSEG_OP_EVENT_DESTROY, xs->drv->event_destroy(xs->dctx, s->event));
        free(s);
        s = n;
    }
    xs->all_streams = NULL;
    xs->last_stream = NULL;
    while (xs->pend_head) {
        xpending *p = xs->pend_head;
        xs->pend_head = p->next;
        free(p->uses);
        free(p);
    }
    xs->pend_tail = NULL;
    xs->pend_count = 0;
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
    xs->pend_count++;
    xs->deferred++;
    return XSEG_OK;
}

static int uses_done(xseg_t *xs, xuses *u, int block)
{
    for (uint32_t i = 0; i < u->n; i++) {
        xstream *s = u->u[i].s;
        uint64_t e = u->u[i].epoch ? u->u[i].epoch : s->epoch;
        if (!xstream_done(xs, s, e, block))
            return 0;
    }
    return 1;
}

void xpending_process(xseg_t *xs, int block)
{
    xpending **pp = &xs->pend_head, *last = NULL;
    while (*pp) {
        xpending *p = *pp;
        if (!uses_done(xs, p->uses, block)) {
            last = p;
            pp = &p->next;
            continue;
        }
        *pp = p->next;
        xs->pend_count--;
        uintptr_t addr = p->addr, tag = p->tag;
        free(p->uses);
        free(p);
        xseg_release_user(xs, addr, tag);
    }
    xs->pend_tail = last;
}
