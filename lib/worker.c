/* worker.c: the reclaim worker: one thread per allocator (named
 * xseg-reclaim, the only thread xseg starts) that makes the driver calls
 * nobody has to wait for.  alloc.c takes the whole handles of cached
 * memory the GPU is done with out of the arena's tables (a release job,
 * its range an XB_RELEASING block out of every index), or hands it the old
 * mapping of moved handles (an unmap job), and queues the job here.  The
 * worker only makes the driver calls, without any allocator lock, and puts
 * the job on its done list; whoever holds xs->lock next settles a release
 * job (xworker_settle_locked: job->done, the counters, the range back to
 * free space; a release that failed leaves an orphan that reclaim releases
 * later) and holds an unmap job until a caller finishes the unmaps
 * (xworker_finish_unmaps_locked), which settles them in the order queued,
 * so that placement never follows the worker's timing (an unmap that
 * failed is queued again, then the handle goes back into the tables).
 * The worker never takes xs->lock, so a caller never hands the lock to it
 * nor waits for it to settle.  Nothing is lost: a job
 * is settled by a caller, or by xworker_stop on the destroying thread.
 * Lock order: xs->lock, then the worker's own mutex. */
#include <pthread.h>
#include <stdatomic.h>
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
    xrelease *head, *tail;   /* queued */
    xrelease *dhead, *dtail; /* run, not yet settled */
    xrelease *running;       /* the job whose calls run now, or NULL */
    xrelease *hhead, *htail; /* unmap jobs run, held until a finish, by seq (xs->lock) */
    uint64_t seq;            /* jobs queued so far */
    atomic_int ndone;        /* the done list is not empty */
    atomic_int stall;        /* tests: woken, wait before taking the queue */
    int drains;              /* drains waiting for the queue to empty */
    int stop;
};

static void list_push(xrelease **head, xrelease **tail, xrelease *job)
{
    job->next = NULL;
    if (*tail)
        (*tail)->next = job;
    else
        *head = job;
    *tail = job;
}

/* Put an unmap job that has run on the held list, in the order queued
 * (the worker runs them in that order; a job tried again comes later). */
static void hold(struct xworker *w, xrelease *job)
{
    if (!w->htail || w->htail->seq < job->seq) {
        list_push(&w->hhead, &w->htail, job);
        return;
    }
    xrelease **at = &w->hhead;
    while ((*at)->seq < job->seq)
        at = &(*at)->next;
    job->next = *at;
    *at = job;
}

static void queue_push(struct xworker *w, xrelease *job)
{
    list_push(&w->head, &w->tail, job);
}

static xrelease *queue_pop(struct xworker *w)
{
    xrelease *j = w->head;
    if (j && !(w->head = j->next))
        w->tail = NULL;
    return j;
}

/* The end of the run of handles to do from i that lie next to each other
 * (a job lists them in address order). */
static uint32_t run_end(const xrelease *job, uint32_t i)
{
    uint32_t j = i + 1;
    while (j < job->n && job->h[j].state == XREL_TODO &&
           job->h[j].va == job->h[j - 1].va + job->h[j - 1].bytes)
        j++;
    return j;
}

/* Unmap handles [i, j) of a job in one call (the driver takes a range of
 * several mappings: tools/gpu/vmm_probe.c); 1 if it did. */
static int unmap_run(xseg_t *xs, xrelease *job, uint32_t i, uint32_t j)
{
    uintptr_t end = job->h[j - 1].va + job->h[j - 1].bytes;
    return j - i > 1 && xdrv_unmap(xs, job->h[i].va, end - job->h[i].va) == XDRV_SUCCESS;
}

/* The driver calls of a job, no lock held: each handle still to do is
 * unmapped (a run of adjacent ones in one call; one by one if that call
 * fails), then released. */
static void job_run(xseg_t *xs, xrelease *job)
{
    uint32_t run_to = 0; /* the run being done ends here */
    int run_unmapped = 0; /* and one call unmapped it */
    for (uint32_t i = 0; i < job->n; i++) {
        xrel_handle *h = &job->h[i];
        if (h->state != XREL_TODO)
            continue;
        if (i >= run_to) {
            run_to = run_end(job, i);
            run_unmapped = unmap_run(xs, job, i, run_to);
        }
        int rc = run_unmapped ? XDRV_SUCCESS : xdrv_unmap(xs, h->va, h->bytes);
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

/* The worker: runs each job's calls, then puts it on the done list. */
static void *worker_main(void *arg)
{
    struct xworker *w = arg;
    xseg_t *xs = w->xs;
    xdrv_side_set(XDRV_SIDE_WORKER);
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (atomic_load_explicit(&w->stall, memory_order_acquire) && !w->stop) {
            pthread_mutex_unlock(&w->mu);
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
            pthread_mutex_lock(&w->mu);
        }
        xrelease *job = queue_pop(w);
        if (!job) {
            if (w->stop)
                break;
            pthread_cond_wait(&w->cv, &w->mu);
            continue;
        }
        w->running = job;
        pthread_mutex_unlock(&w->mu);
        if (job->tries) { /* an unmap failed: again a little later */
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
        }
        job_run(xs, job);
        pthread_mutex_lock(&w->mu);
        list_push(&w->dhead, &w->dtail, job);
        atomic_store_explicit(&w->ndone, 1, memory_order_release);
        w->running = NULL;
        pthread_cond_broadcast(&w->idle_cv);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

/* Settle job (xs->lock held): freed when finished, else queued again. */
static void settle_one(xseg_t *xs, struct xworker *w, xrelease *job)
{
    if (job->done(xs, job)) {
        job_free(job);
        return;
    }
    pthread_mutex_lock(&w->mu);
    queue_push(w, job);
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

/* The worker's driver counters join the allocator's when it is idle (no
 * job running or queued: none can start while xs->lock is held, since
 * only holders of it queue jobs). */
static void fold_if_idle(xseg_t *xs, struct xworker *w)
{
    pthread_mutex_lock(&w->mu);
    int idle = !w->running && !w->head;
    pthread_mutex_unlock(&w->mu);
    if (idle)
        xdrv_fold_worker(xs);
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
        while ((job = w->dhead) != NULL) {
            w->dhead = job->next;
            job_free(job);
        }
        while ((job = w->hhead) != NULL) {
            w->hhead = job->next;
            job_free(job);
        }
        free(w);
        return;
    }
    pthread_mutex_lock(&w->mu);
    w->stop = 1;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->th, NULL);
    /* Jobs run and not settled are settled (one whose unmap failed and may
     * be tried again is queued again, for the loop below). */
    if (w->htail) { /* the held unmap jobs first, in the order they ran */
        w->htail->next = w->dhead;
        w->dhead = w->hhead;
    }
    xrelease *d = w->dhead;
    w->dhead = w->dtail = w->hhead = w->htail = NULL;
    xlock_lock(&xs->lock);
    xdrv_fold_worker(xs);
    for (xrelease *next; d; d = next) {
        next = d->next;
        if (d->done(xs, d))
            job_free(d);
        else
            queue_push(w, d);
    }
    xlock_unlock(&xs->lock);
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
        bound = xseg_budget(xs) / 128;
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
    job->seq = ++w->seq;
    queue_push(w, job);
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

/* Settle what the worker has run.  A release job settles at once (its
 * bytes leave mapped_bytes).  An unmap job's range is only held: it goes
 * back to free space when a caller finishes the unmaps
 * (xworker_finish_unmaps_locked), whoever ran them, so where later blocks
 * land never depends on how far the worker has got. */
void xworker_settle_locked(xseg_t *xs)
{
    struct xworker *w = xs->wk;
    if (!w || !atomic_load_explicit(&w->ndone, memory_order_acquire))
        return;
    pthread_mutex_lock(&w->mu);
    xrelease *d = w->dhead;
    w->dhead = w->dtail = NULL;
    atomic_store_explicit(&w->ndone, 0, memory_order_relaxed);
    pthread_mutex_unlock(&w->mu);
    fold_if_idle(xs, w);
    for (xrelease *next; d; d = next) {
        next = d->next;
        if (d->unmap_only)
            hold(w, d);
        else
            settle_one(xs, w, d);
    }
}

/* Settle everything run, held unmap jobs included, in the order they were
 * queued whoever ran them (xs->lock held). */
static void settle_all_locked(xseg_t *xs, struct xworker *w)
{
    xworker_settle_locked(xs);
    xrelease *d = w->hhead;
    w->hhead = w->htail = NULL;
    for (xrelease *next; d; d = next) {
        next = d->next;
        settle_one(xs, w, d);
    }
}

/* Take the queued unmap jobs off the queue (release jobs stay).  A queue
 * left empty while no job runs is the state a drain waits for: it is told
 * (a drain that had seen such a job queued, after the worker found the
 * queue empty and went to sleep, waited for good: test_worker's hammer
 * under load, once in CI). */
static xrelease *steal_unmaps(struct xworker *w)
{
    xrelease *mine = NULL, *mtail = NULL, *keep = NULL, *ktail = NULL, *j;
    while ((j = queue_pop(w)) != NULL) {
        if (j->unmap_only)
            list_push(&mine, &mtail, j);
        else
            list_push(&keep, &ktail, j);
    }
    w->head = keep;
    w->tail = ktail;
    if (!keep && !w->running)
        pthread_cond_broadcast(&w->idle_cv);
    return mine;
}

void xworker_finish_unmaps_locked(xseg_t *xs)
{
    struct xworker *w = xs->wk;
    if (!w)
        return;
    settle_all_locked(xs, w);
    while (xs->wk_unmapping) {
        pthread_mutex_lock(&w->mu);
        xrelease *mine = steal_unmaps(w);
        pthread_mutex_unlock(&w->mu);
        for (xrelease *j = mine, *next; j; j = next) { /* on this thread, as reclaim:sync */
            next = j->next;
            job_run(xs, j);
            hold(w, j); /* one whose unmap failed is queued again, and taken again */
        }
        pthread_mutex_lock(&w->mu);
        while (w->running && w->running->unmap_only) /* its calls only: no lock to hand over */
            pthread_cond_wait(&w->idle_cv, &w->mu);
        pthread_mutex_unlock(&w->mu);
        settle_all_locked(xs, w);
    }
}

void xworker_drain_locked(xseg_t *xs)
{
    struct xworker *w = xs->wk;
    if (!w)
        return;
    settle_all_locked(xs, w);
    /* Bounded: a failed unmap is queued again (3 tries), and other threads
     * may queue new jobs meanwhile. */
    for (int round = 0; xs->wk_pending && round < 16; round++) {
        xlock_unlock(&xs->lock); /* other threads go on meanwhile */
        pthread_mutex_lock(&w->mu);
        w->drains++;
        while (w->head || w->running)
            pthread_cond_wait(&w->idle_cv, &w->mu);
        w->drains--;
        pthread_mutex_unlock(&w->mu);
        xlock_lock(&xs->lock);
        settle_all_locked(xs, w);
    }
    fold_if_idle(xs, w);
}

void xworker_test_stall(xseg_t *xs, int on)
{
    if (!xs->wk)
        return;
    atomic_store_explicit(&xs->wk->stall, on, memory_order_release);
}

int xworker_test_drains(xseg_t *xs)
{
    if (!xs->wk)
        return 0;
    pthread_mutex_lock(&xs->wk->mu);
    int n = xs->wk->drains;
    pthread_mutex_unlock(&xs->wk->mu);
    return n;
}
