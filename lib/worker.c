/* worker.c: the reclaim worker: one thread per allocator (named
 * xseg-reclaim, the only thread xseg starts) that makes the driver calls
 * nobody has to wait for.  alloc.c takes the whole handles of cached
 * memory the GPU is done with out of the arena's tables (a release job,
 * its range an XB_RELEASING block out of every index) and queues the job
 * here; the worker unmaps and releases the handles without xs->lock, then
 * takes the lock and lets the job settle (job->done: counters, the range
 * back to free space; an unmap that failed is tried again, then the handle
 * goes back into the tables; a release that failed leaves an orphan that
 * reclaim releases later).  Nothing is lost: a job is settled by the worker,
 * or by xworker_stop on the destroying thread.
 * Lock order: xs->lock, then the worker's own mutex; the worker never holds
 * its mutex while it takes xs->lock. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"

#define XWK_TRIES 3 /* unmaps of one handle before it goes back to the tables */

struct xworker {
    xseg_t *xs;
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;      /* work queued, or stop */
    pthread_cond_t idle_cv; /* queue empty and nothing running */
    xrelease *head, *tail;
    int stop, busy;
};

static void queue_push(struct xworker *w, xrelease *job)
{
    job->next = NULL;
    if (w->tail)
        w->tail->next = job;
    else
        w->head = job;
    w->tail = job;
}

static xrelease *queue_pop(struct xworker *w)
{
    xrelease *j = w->head;
    if (j && !(w->head = j->next))
        w->tail = NULL;
    return j;
}

/* The driver calls of a job, no lock held: each handle still to do is
 * unmapped, then released. */
static void job_run(xseg_t *xs, xrelease *job)
{
    for (uint32_t i = 0; i < job->n; i++) {
        xrel_handle *h = &job->h[i];
        if (h->state != XREL_TODO)
            continue;
        int rc = xdrv_unmap(xs, h->va, h->bytes);
        if (rc != XDRV_SUCCESS) {
            h->state = XREL_UNMAP_FAILED;
            h->rc = rc;
            continue;
        }
        if (job->unmap_only) {
            h->state = XREL_RELEASED;
            continue;
        }
        rc = xdrv_release(xs, h->drv);
        h->state = rc == XDRV_SUCCESS ? XREL_RELEASED : XREL_RELEASE_FAILED;
        h->rc = rc;
    }
}

static void job_free(xrelease *job)
{
    free(job->h);
    free(job);
}

/* Run a job and settle it under xs->lock; returns 1 when finished. */
static int job_do(xseg_t *xs, xrelease *job)
{
    job_run(xs, job);
    xlock_lock(&xs->lock);
    xdrv_fold_worker(xs);
    int finished = job->done(xs, job);
    xlock_unlock(&xs->lock);
    if (finished)
        job_free(job);
    return finished;
}

static void *worker_main(void *arg)
{
    struct xworker *w = arg;
    xseg_t *xs = w->xs;
    xdrv_side_set(XDRV_SIDE_WORKER);
    pthread_mutex_lock(&w->mu);
    for (;;) {
        xrelease *job = queue_pop(w);
        if (!job) {
            pthread_cond_broadcast(&w->idle_cv);
            if (w->stop)
                break;
            pthread_cond_wait(&w->cv, &w->mu);
            continue;
        }
        w->busy = 1;
        pthread_mutex_unlock(&w->mu);
        int finished = job_do(xs, job);
        if (!finished) { /* an unmap failed: again a little later */
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
        }
        pthread_mutex_lock(&w->mu);
        if (!finished)
            queue_push(w, job);
        w->busy = 0;
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

xseg_status xworker_start(xseg_t *xs)
{
    struct xworker *w = calloc(1, sizeof *w);
    if (!w)
        return xseg_fail(xs, XSEG_ERR_OOM, "xseg: no host memory for the reclaim worker");
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    pthread_cond_init(&w->idle_cv, NULL);
    w->xs = xs;
    xs->wk = w;
    int rc = pthread_create(&w->th, NULL, worker_main, w);
    if (rc != 0) {
        xs->wk = NULL;
        pthread_cond_destroy(&w->idle_cv);
        pthread_cond_destroy(&w->cv);
        pthread_mutex_destroy(&w->mu);
        free(w);
        return xseg_fail(xs, XSEG_ERR_DRIVER,
                         "xseg: starting the reclaim worker thread failed (%s); "
                         "set reclaim:sync to run without it", strerror(rc));
    }
#ifdef __linux__
    pthread_setname_np(w->th, "xseg-reclaim");
#endif
    return XSEG_OK;
}

void xworker_stop(xseg_t *xs, int call_driver)
{
    struct xworker *w = xs->wk;
    xrelease *job;
    if (!w)
        return;
    xs->wk = NULL;
    if (!call_driver) { /* a forked child: no thread, no driver, no locks */
        while ((job = queue_pop(w)) != NULL)
            job_free(job);
        free(w);
        return;
    }
    pthread_mutex_lock(&w->mu);
    w->stop = 1;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->th, NULL);
    /* Jobs still queued (their unmap kept failing) are run once more here
     * and settled for good: a handle still mapped goes back into the
     * tables, where destroy releases it. */
    while ((job = queue_pop(w)) != NULL) {
        xdrv_side prev = xdrv_side_set(XDRV_SIDE_CALLER);
        job_run(xs, job);
        xdrv_side_set(prev);
        job->tries = UINT32_MAX;
        xlock_lock(&xs->lock);
        job->done(xs, job);
        xlock_unlock(&xs->lock);
        job_free(job);
    }
    pthread_cond_destroy(&w->idle_cv);
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    free(w);
}

int xworker_takes(const xseg_t *xs)
{
    if (!xs->wk)
        return 0; /* (a forked child's entry points refuse before this) */
    size_t bound = xs->conf.reclaim_inflight;
    if (bound == XSEG_SIZE_AUTO) {
        bound = xs->peak_alloc_ever / 128;
        if (bound < ((size_t)64 << 20))
            bound = (size_t)64 << 20;
    }
    return xs->releasing_bytes < bound;
}

void xworker_push(xseg_t *xs, xrelease *job)
{
    struct xworker *w = xs->wk;
    xs->wk_pending++;
    pthread_mutex_lock(&w->mu);
    queue_push(w, job);
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

void xworker_drain_locked(xseg_t *xs)
{
    struct xworker *w = xs->wk;
    if (!w || !xs->wk_pending)
        return;
    xlock_unlock(&xs->lock);
    pthread_mutex_lock(&w->mu);
    while (w->head || w->busy)
        pthread_cond_wait(&w->idle_cv, &w->mu);
    pthread_mutex_unlock(&w->mu);
    xlock_lock(&xs->lock);
}
