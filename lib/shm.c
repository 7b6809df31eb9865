/* shm.c: publication of live stats for xseg-top (conf key stats_shm), and
 * the set-up / tear-down of the monitoring state (history and stats_shm).
 *
 * The process's file $XSEG_SHM_DIR/xseg.<pid> (layout: shm_format.h) is made
 * when its first publishing allocator is created and removed when the last
 * one is destroyed (or at exit).  Each allocator claims one record, which
 * holds every number of the public xseg_stats; an update copies the 19
 * that move on alloc / free into it under a seqlock (all of them, through
 * xseg_fill_stats, when a driver call, trim, retry, cap change or peak reset
 * may have moved the others; the largest free block every 64th update): a
 * bounded number of relaxed stores, no system call, no lock beyond the
 * allocator's own (which the caller holds).
 *
 * Tag rows (shm_format.h): once the allocator has a tag in use, an update
 * also copies each tag's numbers into its row, when the tags may have moved
 * (the family's mapped bytes changed, the cold fields are copied) and on
 * every 16th update.  A tag's row is written under that tag allocator's
 * lock, taken with a try while the parent's is held (parent then tag, the
 * one order allowed): a tag busy in a long call (a sleep waiting for the
 * GPU) is skipped, never waited for, and copied at a later update. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"
#include "shm_format.h"

/* history.c */

/* The numbers of a tag's allocator that its row's copy depends on. */
#define ROW_SEEN 10

/* One allocator's publication. */
typedef struct xshm {
    xseg_shm_record *rec;
    pid_t pid;        /* the process that claimed it (fork check) */
    uint64_t updates;
    uint64_t cold_sig; /* cold_signature() at the last copy of the cold fields */
    size_t fam_seen;  /* the family's mapped bytes at the last copy of the tag rows */
    int rows_on;      /* the tag rows are published (a tag was in use) */
    uint64_t seen[XSEG_SHM_TAGS][ROW_SEEN]; /* each tag's numbers at its row's last copy */
} xshm;

/* Tag names for the rows, process-wide like the tags (xseg_shm_tag_name);
 * atomic words: named once, read by any allocator's update. */
static _Atomic uint64_t g_tag_names[XSEG_MAX_TAGS][XSEG_TAG_NAME_MAX / 8];

/* The process's file. */
static struct {
    pthread_mutex_t lock;
    pid_t pid;
    void *base;
    unsigned users;
    char path[PATH_MAX];
} g_file = {.lock = PTHREAD_MUTEX_INITIALIZER};

static uint64_t now_ns(clockid_t clk)
{
    struct timespec ts;
    clock_gettime(clk, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void put(xseg_shm_record *r, unsigned f, uint64_t v)
{
    atomic_store_explicit(&r->v[f], v, memory_order_relaxed);
}

/* ---- tag names and rows ---- */

void xseg_shm_tag_name(int tag, const char *name)
{
    uint64_t w[XSEG_TAG_NAME_MAX / 8] = {0};
    if (tag < 0 || tag >= XSEG_MAX_TAGS || !name)
        return;
    memcpy(w, name, strnlen(name, XSEG_TAG_NAME_MAX - 1));
    for (unsigned i = 0; i < XSEG_TAG_NAME_MAX / 8; i++)
        atomic_store_explicit(&g_tag_names[tag][i], w[i], memory_order_relaxed);
}

static void tag_name_of(int tag, char *out)
{
    uint64_t w[XSEG_TAG_NAME_MAX / 8];
    for (unsigned i = 0; i < XSEG_TAG_NAME_MAX / 8; i++)
        w[i] = atomic_load_explicit(&g_tag_names[tag][i], memory_order_relaxed);
    memcpy(out, w, XSEG_TAG_NAME_MAX);
    out[XSEG_TAG_NAME_MAX - 1] = '\0';
    if (tag == 0 && !out[0])
        snprintf(out, XSEG_TAG_NAME_MAX, "default");
}

/* Bytes of blocks holding live memory (allocated, or slabs): what a tag
 * asleep has given back (as sleep.c counts it). */
static uint64_t in_use_bytes(const xseg_t *xs)
{
    uint64_t n = 0;
    for (const xblock *b = xs->first_block; b; b = b->anext)
        if (!(b->flags & (XB_FREE | XB_MOVED | XB_RELEASING)))
            n += b->size;
    return n;
}

/* Tag `tag`'s numbers from its allocator c, whose lock the caller holds:
 * what xseg_tag_stats_get gives (sleep.c's xsleep_fill), read here since
 * shm.c lies below tags.c and sleep.c. */
static void tag_fill(xseg_t *c, int tag, xseg_tag_stats *s)
{
    memset(s, 0, sizeof *s);
    s->size = sizeof *s;
    s->tag = tag;
    tag_name_of(tag, s->name);
    s->asleep = atomic_load(&c->asleep);
    s->mode = c->sleep_mode;
    s->live_bytes = (xseg_counter){c->allocated.cur, c->allocated.peak, c->allocated.total};
    s->mapped_bytes = (xseg_counter){c->mapped.cur, c->mapped.peak, c->mapped.total};
    s->sleeping_bytes = s->asleep ? in_use_bytes(c) : 0;
    s->backup_bytes = s->asleep && c->sleep_mode == XSEG_SLEEP_BACKUP ? c->bk_bytes : 0;
    s->sleeps = c->sleeps;
    s->wakes = c->wakes;
    s->last_sleep_ns = c->last_sleep_ns;
    s->last_wake_ns = c->last_wake_ns;
}

/* 1 when tag allocator c (its lock held) moved since `seen` was taken,
 * which then takes its numbers again: a row is copied only then. */
static int tag_moved(const xseg_t *c, uint64_t seen[ROW_SEEN])
{
    uint64_t now[ROW_SEEN] = {c->allocated.cur, c->allocated.peak, c->allocated.total,
                              c->mapped.cur,    c->mapped.peak,    c->mapped.total,
                              c->sleeps,        c->wakes,          (uint64_t)atomic_load(&c->asleep),
                              (uint64_t)c->sleep_mode};
    if (memcmp(now, seen, sizeof now) == 0)
        return 0;
    memcpy(seen, now, sizeof now);
    return 1;
}

/* Row `t` of r, under its own seqlock (its tag allocator's lock held). */
static void put_row(xseg_shm_record *r, unsigned t, const xseg_tag_stats *s)
{
    xseg_shm_tag_row *row = &r->tags[t];
    uint64_t v[XST_COUNT] = {0};
    xseg_shm_tag_copy(v, (xseg_tag_stats *)s, 0);
    v[XST_USED] = 1;
    uint64_t q = atomic_load_explicit(&row->seq, memory_order_relaxed);
    atomic_store_explicit(&row->seq, q + 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    for (unsigned i = 0; i < XST_COUNT; i++)
        atomic_store_explicit(&row->v[i], v[i], memory_order_relaxed);
    atomic_store_explicit(&row->seq, q + 2, memory_order_release);
}

/* Tag 0's live and mapped bytes (xs itself): the row's fields that move on
 * its alloc / free, as put_hot stores the record's. */
static void put_row0_hot(xseg_t *xs, xseg_shm_record *r)
{
    xseg_shm_tag_row *row = &r->tags[0];
    uint64_t q = atomic_load_explicit(&row->seq, memory_order_relaxed);
    atomic_store_explicit(&row->seq, q + 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    atomic_store_explicit(&row->v[XST_LIVE], xs->allocated.cur, memory_order_relaxed);
    atomic_store_explicit(&row->v[XST_LIVE + 1], xs->allocated.peak, memory_order_relaxed);
    atomic_store_explicit(&row->v[XST_LIVE + 2], xs->allocated.total, memory_order_relaxed);
    atomic_store_explicit(&row->v[XST_MAPPED], xs->mapped.cur, memory_order_relaxed);
    atomic_store_explicit(&row->v[XST_MAPPED + 1], xs->mapped.peak, memory_order_relaxed);
    atomic_store_explicit(&row->seq, q + 2, memory_order_release);
}

/* The rows of xs's tags in use and of tag 0 (xs itself, whose lock the
 * caller holds), when they may have moved: `cold` (the cold fields are
 * copied), the family's mapped bytes changed, or every 16th update; at the
 * other updates, tag 0's live and mapped bytes. */
static void put_tags(xseg_t *xs, xshm *m, int cold)
{
    if (!atomic_load_explicit(&xs->ntags, memory_order_relaxed))
        return;
    size_t fam = atomic_load_explicit(&xs->fam_mapped, memory_order_relaxed);
    if (!cold && fam == m->fam_seen && (m->updates & 15u) != 0) {
        if (m->rows_on)
            put_row0_hot(xs, m->rec);
        return;
    }
    m->fam_seen = fam;
    xseg_tag_stats s;
    for (unsigned t = 1; t < XSEG_SHM_TAGS; t++) {
        xseg_t *c = atomic_load_explicit(&xs->tags[t], memory_order_acquire);
        if (!c || !xlock_try(&c->lock))
            continue; /* none, or busy: a later update copies it */
        int moved = tag_moved(c, m->seen[t]);
        if (moved)
            tag_fill(c, (int)t, &s);
        xlock_unlock(&c->lock);
        if (moved && xseg_tag_in_use(&s)) {
            put_row(m->rec, t, &s);
            m->rows_on = 1;
        }
    }
    if (m->rows_on) {
        tag_fill(xs, 0, &s);
        put_row(m->rec, 0, &s);
    }
}

/* ---- the hot-path update ---- */

/* Fields that change on (nearly) every alloc / free, from the allocator's
 * counters as xseg_fill_stats reads them (thread caches are off with
 * stats_shm, so no per-thread corrections apply). */
static void put_hot(xseg_t *xs, xseg_shm_record *r, uint64_t updates)
{
    uint64_t cached = xs->mapped.cur > xs->allocated.cur ? xs->mapped.cur - xs->allocated.cur : 0;
    if (cached > xs->cached_peak)
        xs->cached_peak = cached;
    put(r, XSF_UPDATES, updates);
    put(r, XSF_ALLOCATED, xs->allocated.cur);
    put(r, XSF_ALLOCATED_PEAK, xs->allocated.peak);
    put(r, XSF_ALLOCATED_TOTAL, xs->allocated.total);
    put(r, XSF_REQUESTED, xs->requested.cur);
    put(r, XSF_REQUESTED_PEAK, xs->requested.peak);
    put(r, XSF_REQUESTED_TOTAL, xs->requested.total);
    put(r, XSF_ACTIVE, xs->active.cur);
    put(r, XSF_ACTIVE_PEAK, xs->active.peak);
    put(r, XSF_ACTIVE_TOTAL, xs->active.total);
    put(r, XSF_MAPPED, xs->mapped.cur);
    put(r, XSF_MAPPED_PEAK, xs->mapped.peak);
    put(r, XSF_CACHED, cached);
    put(r, XSF_CACHED_PEAK, xs->cached_peak);
    put(r, XSF_CACHED_TOTAL, xs->released + cached);
    put(r, XSF_ALLOC_CALLS, xs->alloc_calls);
    put(r, XSF_FREE_CALLS, xs->free_calls);
    put(r, XSF_OOMS, xs->ooms);
    put(r, XSF_DEFERRED, xs->deferred);
}

/* Every number of the public stats, filled by xseg_fill_stats itself (the
 * source of xseg_get_stats): after a driver call, trim, retry, GC run, cap
 * change or peak reset. */
static void put_all(xseg_t *xs, xseg_shm_record *r, uint64_t updates)
{
    xseg_stats st = {.size = sizeof st};
    uint64_t v[XSF_COUNT] = {0};
    xseg_fill_stats(xs, &st);
    xseg_shm_stats_copy(v, &st, 0);
    for (unsigned f = XSF_CAP; f < XSF_COUNT; f++)
        put(r, f, v[f]);
    put(r, XSF_UPDATES, updates);
}

/* Changes whenever a field that put_hot does not store may have changed (a
 * sum of loads: cheaper than the stores it saves on the common path without
 * driver calls).  Peaks are in it for xseg_reset_peak, the release budget
 * for a new peak of live bytes served from the cache. */
static uint64_t cold_signature(const xseg_t *xs)
{
    uint64_t sig = xs->trims + xs->retries + xs->gc_runs + xs->cap + xs->handles.peak +
                   xs->segments.peak + xs->va.peak + xseg_budget(xs);
    for (unsigned i = 0; i < XSEG_OP_COUNT; i++)
        sig += xs->drv_calls[i];
    return sig;
}

void xseg_shm_update(xseg_t *xs)
{
    xshm *m = xs->shm;
    xseg_shm_record *r = m->rec;
    uint64_t sig = cold_signature(xs);
    uint64_t s = atomic_load_explicit(&r->seq, memory_order_relaxed);
    atomic_store_explicit(&r->seq, s + 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    uint64_t n = ++m->updates;
    int cold = sig != m->cold_sig;
    if (cold) {
        put_all(xs, r, n);
        m->cold_sig = sig;
    } else {
        put_hot(xs, r, n);
        if ((n & 63u) == 0)
            put(r, XSF_LARGEST_FREE, xseg_largest_free(xs)); /* every 64th update */
    }
    atomic_store_explicit(&r->seq, s + 2, memory_order_release);
    put_tags(xs, m, cold);
}

/* ---- the process's file ---- */

static const char *shm_dir(void)
{
    const char *d = getenv(XSEG_SHM_DIR_ENV);
    return d && *d ? d : XSEG_SHM_DEFAULT_DIR;
}

static void init_header(xseg_shm_header *h)
{
    memset(h, 0, sizeof *h);
    h->version = XSEG_SHM_VERSION;
    h->header_size = sizeof *h;
    h->record_size = sizeof(xseg_shm_record);
    h->nslots = XSEG_SHM_SLOTS;
    h->nfields = XSF_COUNT;
    h->tag_rows = XSEG_SHM_TAGS;
    h->tag_fields = XST_COUNT;
    h->pid = (int32_t)getpid();
    h->start_ticks = xseg_shm_start_ticks(getpid(), NULL);
    h->created_ns = now_ns(CLOCK_REALTIME);
    snprintf(h->comm, sizeof h->comm, "%s", program_invocation_short_name);
    h->magic = XSEG_SHM_MAGIC;
}

/* Make the file under a temporary name, fill its header, rename it into
 * place: a reader sees a complete file or none. */
static xseg_status file_create(xseg_t *xs)
{
    char tmp[PATH_MAX + 8];
    const char *dir = shm_dir();
    snprintf(g_file.path, sizeof g_file.path, "%s/" XSEG_SHM_PREFIX "%d", dir, (int)getpid());
    snprintf(tmp, sizeof tmp, "%s.tmp", g_file.path);
    int fd = open(tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
    void *base = MAP_FAILED;
    int err = 0;
    if (fd < 0 || ftruncate(fd, (off_t)XSEG_SHM_FILE_SIZE) != 0)
        err = errno;
    else if ((base = mmap(NULL, XSEG_SHM_FILE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) ==
             MAP_FAILED)
        err = errno;
    if (fd >= 0)
        close(fd);
    if (!err) {
        init_header(base);
        if (rename(tmp, g_file.path) != 0)
            err = errno;
    }
    if (err) {
        if (base != MAP_FAILED)
            munmap(base, XSEG_SHM_FILE_SIZE);
        unlink(tmp);
        return xseg_fail(xs, XSEG_ERR_CONFIG,
                         "xseg: stats_shm: cannot create %s (%s); set " XSEG_SHM_DIR_ENV
                         " to a writable directory or turn stats_shm off",
                         g_file.path, strerror(err));
    }
    g_file.base = base;
    g_file.pid = getpid();
    return XSEG_OK;
}

static void file_remove(void)
{
    unlink(g_file.path);
    munmap(g_file.base, XSEG_SHM_FILE_SIZE);
    g_file.base = NULL;
    g_file.users = 0;
}

/* Remove the file at exit (or dlclose) even if allocators were not
 * destroyed; a crashed process's file is cleaned up by xseg-top. */
__attribute__((destructor)) static void file_at_exit(void)
{
    if (g_file.base && g_file.pid == getpid())
        unlink(g_file.path);
}

/* The file lock is held across fork() (process.c's fork module says the order),
 * so a child never inherits it taken by a thread that is not there. */
void xshm_fork_lock(int take)
{
    if (take)
        pthread_mutex_lock(&g_file.lock);
    else
        pthread_mutex_unlock(&g_file.lock);
}

/* A child after fork() inherits the parent's mapping: forget it (the
 * parent's allocators are unusable in the child and never touch it). */
static void forget_parent_file(void)
{
    if (g_file.base && g_file.pid != getpid()) {
        munmap(g_file.base, XSEG_SHM_FILE_SIZE);
        g_file.base = NULL;
        g_file.users = 0;
    }
}

static xseg_shm_record *claim_slot(void)
{
    xseg_shm_header *h = g_file.base;
    for (uint32_t i = 0; i < h->nslots; i++) {
        xseg_shm_record *r = xseg_shm_slot(g_file.base, h, i);
        if (atomic_load_explicit(&r->state, memory_order_relaxed) == XSEG_SHM_FREE)
            return r;
    }
    atomic_fetch_add(&h->dropped, 1);
    return NULL;
}

/* Fixed fields and a first update, then the slot is shown (state USED). */
static void publish_first(xseg_t *xs, xshm *m)
{
    xseg_shm_record *r = m->rec;
    uint64_t backend = 0, version[2] = {0, 0};
    memcpy(&backend, xdrv_name(xs), strnlen(xdrv_name(xs), sizeof backend));
    memcpy(version, xseg_version(), strnlen(xseg_version(), sizeof version));
    uint64_t s = atomic_load_explicit(&r->seq, memory_order_relaxed);
    atomic_store_explicit(&r->seq, s + 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    put(r, XSF_DEVICE, (uint64_t)(int64_t)xs->device);
    put(r, XSF_GENERATION, atomic_load_explicit(&r->v[XSF_GENERATION], memory_order_relaxed) + 1);
    put(r, XSF_BACKEND, backend);
    put(r, XSF_CREATED_NS, now_ns(CLOCK_REALTIME));
    put(r, XSF_DEVICE_TOTAL, xs->dev_total);
    put(r, XSF_PAGE_SIZE, xs->arena.page);
    put(r, XSF_LIB_VERSION, version[0]);
    put(r, XSF_LIB_VERSION + 1, version[1]);
    put_all(xs, r, ++m->updates);
    m->cold_sig = cold_signature(xs);
    for (unsigned t = 0; t < XSEG_SHM_TAGS; t++) { /* a reused slot's rows: unused */
        xseg_shm_tag_row *row = &r->tags[t];
        uint64_t q = atomic_load_explicit(&row->seq, memory_order_relaxed);
        atomic_store_explicit(&row->seq, q + 1, memory_order_relaxed);
        atomic_thread_fence(memory_order_release);
        atomic_store_explicit(&row->v[XST_USED], 0, memory_order_relaxed);
        atomic_store_explicit(&row->seq, q + 2, memory_order_release);
    }
    atomic_store_explicit(&r->seq, s + 2, memory_order_release);
    atomic_store_explicit(&r->state, XSEG_SHM_USED, memory_order_release);
}

/* Claim a record in the process's file (made on first use).  With every
 * slot taken the allocator still works, unpublished; the header counts it. */
static xseg_status shm_init(xseg_t *xs)
{
    xshm *m = calloc(1, sizeof *m);
    if (!m)
        return xseg_fail(xs, XSEG_ERR_OOM, "xseg: no host memory for stats_shm");
    pthread_mutex_lock(&g_file.lock);
    forget_parent_file();
    xseg_status st = g_file.base ? XSEG_OK : file_create(xs);
    if (st == XSEG_OK && (m->rec = claim_slot()) != NULL) {
        m->pid = getpid();
        g_file.users++;
        publish_first(xs, m);
        xs->shm = m;
    }
    if (st == XSEG_OK && !g_file.users)
        file_remove();
    pthread_mutex_unlock(&g_file.lock);
    if (!xs->shm)
        free(m);
    return st;
}

static void shm_fini(xseg_t *xs)
{
    xshm *m = xs->shm;
    xs->shm = NULL;
    pthread_mutex_lock(&g_file.lock);
    if (m->pid == getpid() && g_file.base && g_file.pid == m->pid) {
        atomic_store_explicit(&m->rec->state, XSEG_SHM_FREE, memory_order_release);
        if (--g_file.users == 0)
            file_remove();
    }
    pthread_mutex_unlock(&g_file.lock);
    free(m);
}

/* ---- monitoring state of one allocator ---- */

xseg_status xseg_monitor_init(xseg_t *xs)
{
    xseg_status st = XSEG_OK;
    if (xs->conf.history)
        st = xseg_hist_init(xs);
    if (st == XSEG_OK && xs->conf.stats_shm)
        st = shm_init(xs);
    return st;
}

void xseg_monitor_fini(xseg_t *xs)
{
    if (xs->shm)
        shm_fini(xs);
    if (xs->hist)
        xseg_hist_fini(xs);
}
