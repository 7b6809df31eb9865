/* tags.c: tags (docs/sleep.md): the process-wide registry of tag names, each
 * thread's tag stack, the allocator that serves each tag of an allocator,
 * and the entry points that work per tag: xseg_alloc_tagged, xseg_tag_of,
 * xseg_sleep, xseg_wake, xseg_tag_stats_get.
 *
 * A tag's memory lives in an allocator of its own (lifecycle.c,
 * xlife_create_tag): its own virtual range, so no page ever holds two
 * tags' memory and a tag can give back every page it has; the parent's
 * conf and open driver context, so one device's memory is counted once.
 * The parent keeps them in xs->tags[tag], made on first use and destroyed
 * with it.  xseg_alloc (api.c) sends an allocation to the allocator of the
 * thread's tag; a free, record_stream or size query finds the allocator
 * whose range holds the pointer (xseg_range_owner, internal.h).
 * A wake that runs out of memory (the device's or the cap) trims the
 * family's cached memory and tries once more, as an allocation would.
 * Lock order: a parent's lock is never held while a tag's is taken, nor
 * the reverse; g_tag_lock (registry and creation) is taken before either. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"
#include "tag_fields.h"

static pthread_mutex_t g_tag_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t g_tag_once = PTHREAD_ONCE_INIT;
static char g_names[XSEG_MAX_TAGS][XSEG_TAG_NAME_MAX] = {"default"};
static atomic_int g_ntags = 1;

#define TAG_DEPTH 64
static _Thread_local int t_stack[TAG_DEPTH];
static _Thread_local int t_depth;
_Thread_local int xseg_tls_tag;

/* ---- the lock ---- */

/* A child of fork() gets the lock free even if another thread of the
 * parent held it (registering a name, or making a tag's allocator, which
 * in the child is abandoned with the parent's allocators): the registry
 * publishes a name only after writing it, so the child's copy is whole. */
static void tag_lock_child(void)
{
    pthread_mutex_init(&g_tag_lock, NULL);
}

static void tag_lock_fork_init(void)
{
    pthread_atfork(NULL, NULL, tag_lock_child);
}

static void tag_lock(void)
{
    pthread_once(&g_tag_once, tag_lock_fork_init);
    pthread_mutex_lock(&g_tag_lock);
}

/* ---- the registry ---- */

static int name_ok(const char *name)
{
    size_t n = strlen(name);
    if (n == 0 || n >= XSEG_TAG_NAME_MAX)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || c == ':' || c == '-'))
            return 0;
    }
    return 1;
}

static int registered(int tag)
{
    return tag >= 0 && tag < atomic_load_explicit(&g_ntags, memory_order_acquire);
}

xseg_status xseg_tag_id(const char *name, int *tag)
{
    if (!name || !tag)
        return xseg_fail(NULL, XSEG_ERR_INVALID_ARG, "xseg_tag_id: name or tag is NULL");
    if (!name_ok(name))
        return xseg_fail(NULL, XSEG_ERR_INVALID_ARG,
                         "xseg_tag_id: tag name \"%.64s\" is not 1 to %d characters of "
                         "[A-Za-z0-9_.:-]", name, XSEG_TAG_NAME_MAX - 1);
    tag_lock();
    int n = atomic_load(&g_ntags), found = -1;
    for (int t = 0; t < n && found < 0; t++)
        if (strcmp(g_names[t], name) == 0)
            found = t;
    if (found < 0 && n < XSEG_MAX_TAGS) {
        snprintf(g_names[n], XSEG_TAG_NAME_MAX, "%s", name);
        xseg_shm_tag_name(n, name); /* the name of its row in stats_shm */
        atomic_store_explicit(&g_ntags, n + 1, memory_order_release);
        found = n;
    }
    pthread_mutex_unlock(&g_tag_lock);
    if (found < 0)
        return xseg_fail(NULL, XSEG_ERR_INVALID_ARG,
                         "xseg_tag_id: no room for tag \"%s\": all %d tags are registered "
                         "(XSEG_MAX_TAGS)", name, XSEG_MAX_TAGS);
    *tag = found;
    return XSEG_OK;
}

const char *xseg_tag_name(int tag)
{
    return registered(tag) ? g_names[tag] : NULL;
}

/* ---- the thread's stack ---- */

xseg_status xseg_tag_push(int tag)
{
    if (!registered(tag))
        return xseg_fail(NULL, XSEG_ERR_INVALID_ARG,
                         "xseg_tag_push: tag %d is not registered (xseg_tag_id)", tag);
    if (t_depth == TAG_DEPTH)
        return xseg_fail(NULL, XSEG_ERR_STATE,
                         "xseg_tag_push: this thread's tag stack is full (%d deep)", TAG_DEPTH);
    t_stack[t_depth++] = tag;
    xseg_tls_tag = tag;
    return XSEG_OK;
}

xseg_status xseg_tag_pop(void)
{
    if (t_depth == 0)
        return xseg_fail(NULL, XSEG_ERR_STATE,
                         "xseg_tag_pop: this thread's tag stack is empty (a pop without push)");
    t_depth--;
    xseg_tls_tag = t_depth ? t_stack[t_depth - 1] : 0;
    return XSEG_OK;
}

int xseg_tag_current(void) { return xseg_tls_tag; }

/* ---- each tag's allocator ---- */

/* The allocator serving `tag` of xs (xs itself for 0), made on first use
 * when `make`; *out is NULL when it does not exist (not an error). */
xseg_status xtag_get(xseg_t *xs, int tag, int make, xseg_t **out, const char *what)
{
    *out = NULL;
    if (xs->parent)
        xs = xs->parent;
    if (!registered(tag))
        return xseg_fail(NULL, XSEG_ERR_INVALID_ARG, "%s: tag %d is not registered (xseg_tag_id)",
                         what, tag);
    if (tag == 0) {
        *out = xs;
        return XSEG_OK;
    }
    xseg_t *c = atomic_load_explicit(&xs->tags[tag], memory_order_acquire);
    if (c || !make) {
        *out = c;
        return XSEG_OK;
    }
    xseg_status st = XSEG_OK;
    tag_lock();
    c = atomic_load(&xs->tags[tag]);
    if (!c) {
        st = xlife_create_tag(xs, tag, &c);
        if (st == XSEG_OK) {
            atomic_store_explicit(&xs->tags[tag], c, memory_order_release);
            atomic_fetch_add(&xs->ntags, 1);
        }
    }
    pthread_mutex_unlock(&g_tag_lock);
    *out = c;
    return st;
}

xseg_status xseg_alloc_tagged(xseg_t *xs, size_t size, void *stream, int tag, void **out)
{
    if (!xs)
        return xseg_fail(NULL, XSEG_ERR_INVALID_ARG, "xseg_alloc_tagged: allocator is NULL");
    if (xseg_forked(xs))
        return xseg_check_fork(xs, "xseg_alloc_tagged");
    if (out)
        *out = NULL;
    xseg_t *c = NULL;
    xseg_status st = xtag_get(xs, tag, 1, &c, "xseg_alloc_tagged");
    return st == XSEG_OK ? xapi_alloc(c, size, stream, out) : st;
}

xseg_status xseg_tag_of(xseg_t *xs, const void *ptr, int *tag)
{
    if (!xs || !tag)
        return xseg_fail(NULL, XSEG_ERR_INVALID_ARG, "xseg_tag_of: allocator or tag is NULL");
    if (xseg_forked(xs))
        return xseg_check_fork(xs, "xseg_tag_of");
    if (xs->parent)
        xs = xs->parent;
    xseg_t *o = xseg_range_owner(xs, (uintptr_t)ptr);
    size_t r;
    xseg_status st = xseg_block_size(o ? o : xs, ptr, &r, NULL);
    if (st == XSEG_OK)
        *tag = o->tag;
    return st;
}

/* Every tag's allocator adds its figures to a parent's stats. */
void xtag_stats_add(xseg_t *xs, xseg_stats *s)
{
    if (!atomic_load_explicit(&xs->ntags, memory_order_relaxed))
        return;
    for (int t = 1; t < XSEG_MAX_TAGS; t++) {
        xseg_t *c = atomic_load_explicit(&xs->tags[t], memory_order_acquire);
        if (!c)
            continue;
        xseg_stats cs;
        xlock_lock(&c->lock);
        cs.size = sizeof cs;
        xseg_fill_stats(c, &cs);
        xlock_unlock(&c->lock);
        xseg_stats_add(s, &cs);
    }
}

xseg_status xseg_tag_stats_get(xseg_t *xs, int tag, xseg_tag_stats *out)
{
    if (!xs || !out || out->size < 2 * sizeof(uint32_t))
        return xseg_fail(NULL, XSEG_ERR_INVALID_ARG,
                         "xseg_tag_stats_get: allocator or out is NULL, or out->size (%u) is "
                         "not set to sizeof(xseg_tag_stats) (%zu)", out ? out->size : 0,
                         sizeof(xseg_tag_stats));
    if (xseg_forked(xs))
        return xseg_check_fork(xs, "xseg_tag_stats_get");
    xseg_t *c = NULL;
    xseg_status st = xtag_get(xs, tag, 0, &c, "xseg_tag_stats_get");
    if (st != XSEG_OK)
        return st;
    xseg_tag_stats s;
    memset(&s, 0, sizeof s);
    s.size = sizeof s;
    s.tag = tag;
    snprintf(s.name, sizeof s.name, "%s", g_names[tag]);
    if (c)
        xsleep_fill(c, &s);
    size_t n = out->size < sizeof s ? out->size : sizeof s;
    memcpy(out, &s, n);
    out->size = (uint32_t)n;
    return XSEG_OK;
}

/* ---- sleep and wake of a set of tags ---- */

/* The tags' allocators, made if missing (a tag never used sleeps too: its
 * allocations then fail until it wakes); a tag named twice is an error. */
static xseg_status tag_set(xseg_t *xs, const int *tags, size_t n, xseg_t **set, const char *what)
{
    if (!tags || n == 0 || n > XSEG_MAX_TAGS)
        return xseg_fail(NULL, XSEG_ERR_INVALID_ARG, "%s: %zu tags given (1 to %d, not NULL)",
                         what, tags ? n : 0, XSEG_MAX_TAGS);
    for (size_t i = 0; i < n; i++) {
        for (size_t j = 0; j < i; j++)
            if (tags[j] == tags[i])
                return xseg_fail(NULL, XSEG_ERR_INVALID_ARG, "%s: tag %d is named twice", what,
                                 tags[i]);
        xseg_status st = xtag_get(xs, tags[i], 1, &set[i], what);
        if (st != XSEG_OK)
            return st;
    }
    return XSEG_OK;
}

static xseg_status check_states(xseg_t *const *set, const int *tags, size_t n, int want_asleep,
                                const char *what)
{
    for (size_t i = 0; i < n; i++)
        if (atomic_load(&set[i]->asleep) != want_asleep)
            return xseg_fail(NULL, XSEG_ERR_STATE, "%s: tag %d (\"%s\") is %s", what, tags[i],
                             g_names[tags[i]], want_asleep ? "awake" : "asleep already");
    return XSEG_OK;
}

xseg_status xseg_sleep(xseg_t *xs, const int *tags, size_t ntags, xseg_sleep_mode mode)
{
    if (!xs)
        return xseg_fail(NULL, XSEG_ERR_INVALID_ARG, "xseg_sleep: allocator is NULL");
    if (xseg_forked(xs))
        return xseg_check_fork(xs, "xseg_sleep");
    if (mode != XSEG_SLEEP_DISCARD && mode != XSEG_SLEEP_BACKUP)
        return xseg_fail(NULL, XSEG_ERR_INVALID_ARG,
                         "xseg_sleep: mode %d is neither XSEG_SLEEP_DISCARD (0) nor "
                         "XSEG_SLEEP_BACKUP (1)", (int)mode);
    xseg_t *set[XSEG_MAX_TAGS];
    xseg_status st = tag_set(xs, tags, ntags, set, "xseg_sleep");
    if (st == XSEG_OK)
        st = check_states(set, tags, ntags, 0, "xseg_sleep");
    for (size_t i = 0; st == XSEG_OK && i < ntags; i++) {
        st = xsleep_sleep(set[i], mode);
        if (st == XSEG_OK)
            continue;
        char keep[768];
        snprintf(keep, sizeof keep, "%s", xseg_last_error());
        size_t bad = i;
        while (i-- > 0) /* all or nothing: the ones asleep wake again */
            (void)xsleep_wake(set[i]);
        return xseg_fail(NULL, st, "%s (tag %d, \"%s\"; the tags before it were woken again)",
                         keep, tags[bad], g_names[tags[bad]]);
    }
    return st;
}

xseg_status xseg_wake(xseg_t *xs, const int *tags, size_t ntags)
{
    if (!xs)
        return xseg_fail(NULL, XSEG_ERR_INVALID_ARG, "xseg_wake: allocator is NULL");
    if (xseg_forked(xs))
        return xseg_check_fork(xs, "xseg_wake");
    xseg_t *set[XSEG_MAX_TAGS];
    xseg_status st = tag_set(xs, tags, ntags, set, "xseg_wake");
    if (st == XSEG_OK)
        st = check_states(set, tags, ntags, 1, "xseg_wake");
    for (size_t i = 0; st == XSEG_OK && i < ntags; i++) {
        st = xsleep_wake(set[i]);
        if (st == XSEG_ERR_OOM) { /* as an allocation would: the family's cache goes first */
            (void)xseg_trim(xs->parent ? xs->parent : xs, 0, NULL);
            st = xsleep_wake(set[i]);
        }
        if (st == XSEG_OK)
            continue;
        char keep[768];
        snprintf(keep, sizeof keep, "%s", xseg_last_error());
        size_t bad = i;
        while (i-- > 0) /* all or nothing: the ones awake sleep again */
            (void)xsleep_sleep(set[i], (xseg_sleep_mode)set[i]->sleep_mode);
        return xseg_fail(NULL, st, "%s (tag %d, \"%s\"; every tag named stays asleep)", keep,
                         tags[bad], g_names[tags[bad]]);
    }
    return st;
}
