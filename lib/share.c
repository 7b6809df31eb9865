/* share.c: memory that leaves the allocator (docs/sharing.md):
 *  - dedicated blocks: a virtual range and ONE physical handle of their own,
 *    whole registration granules, never cached (xseg_alloc_registrable, or
 *    xseg_alloc at or above `registrable_min`): NCCL and dmabuf register
 *    them, and with a shareable handle type (`shareable`) they export;
 *  - export: a self-contained description (xseg.h) with the handle as a
 *    descriptor and a token slot: the exporter's token file holds a random
 *    nonce per exported block while it lives, and its free clears it, so an
 *    importer refuses a freed block (or a forged nonce) by reading one word;
 *  - import / unimport: a virtual range of its own, the handles imported,
 *    mapped and given access;
 *  - peers: `peer_access` and xseg_enable_peer: the driver gives every later
 *    set_access to the peers too, and the existing mappings get it again.
 * The safety rule: a dedicated block's pages are never reused.  Its free
 * waits for the streams that used it, then unmaps it and releases the
 * exporter's handle: the memory lives on, untouched, in every importer
 * until it unmaps (the driver counts the references), and the next
 * allocation gets new memory.  Ordinary allocations are never exported.
 * Everything here runs under the family parent's lock. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "bitmap.h"
#include "internal.h"

#define XSHARE_STREAMS 8          /* streams a dedicated block remembers */
#define TOKEN_GROW 512            /* token slots added at a time (4 KiB) */

typedef struct xded {             /* a dedicated block */
    uintptr_t va;
    size_t size, requested;
    uint64_t drv;                 /* its one handle */
    unsigned types;               /* XDRV_HT_* it was created with */
    uint32_t nstreams;
    void *streams[XSHARE_STREAMS];/* streams that used it: waited for at free */
    uint32_t slot;                /* token slot once exported */
    uint64_t nonce;               /* 0: never exported */
} xded;

typedef struct ximp {             /* an imported block */
    uintptr_t va;
    size_t size;
    uint64_t nonce;
    uint32_t n;
    uint64_t drv[XSEG_EXPORT_MAX_PIECES];
} ximp;

struct xshare {
    xseg_ptrmap ded, imp;         /* address -> xded* / ximp* */
    xseg_ptrmap by_nonce;         /* nonce -> ximp* (import twice) */
    unsigned types;               /* handle types of new dedicated blocks */
    char why[160];
    size_t gran;                  /* registration granularity */
    uint64_t peers;               /* bit d: device d has access */
    int token_fd;
    uint32_t token_slots;         /* slots the file holds */
    uint32_t *token_free;         /* free slots (a stack) */
    uint32_t ntoken_free;
    uint64_t *orphans;            /* handles whose release failed: retried */
    uint32_t norphans, orphan_cap;
    struct { uintptr_t va; size_t size; } *vorphans; /* ranges whose address_free failed */
    uint32_t nvorphans, vorphan_cap;
    xcnt ded_blocks, ded_bytes, imp_blocks, imp_bytes;
    uint64_t exports, exported_live, refused;
};

/* ---- small helpers ---- */

static xseg_status drv_fail(xseg_t *xs, int rc, const char *fmt, const char *what, size_t size)
{
    char b[32];
    return xseg_fail(xs, rc == XDRV_OUT_OF_MEMORY ? XSEG_ERR_OOM : XSEG_ERR_DRIVER,
                     "%s: %s failed (%s, code %d) for %s", fmt, what, xdrv_error_name(xs, rc), rc,
                     xseg_fmt_size(size, b, sizeof b));
}

static uint64_t fnv(const void *p, size_t n, uint64_t h)
{
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ c[i]) * 0x100000001b3ull;
    return h;
}

/* The description's checksum: every field but the descriptors' numbers. */
static uint64_t desc_check(const xseg_export_desc *d)
{
    xseg_export_desc c = *d;
    c.check = 0;
    c.token_fd = 0;
    for (int i = 0; i < XSEG_EXPORT_MAX_PIECES; i++)
        c.pieces[i].fd = 0;
    return fnv(&c, sizeof c, 0xcbf29ce484222325ull);
}

static uint64_t new_nonce(void)
{
    uint64_t n = 0;
    if (getrandom(&n, sizeof n, GRND_NONBLOCK) != (ssize_t)sizeof n) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        n = fnv(&ts, sizeof ts, (uint64_t)getpid() * 0x9E3779B97F4A7C15ull);
    }
    return n ? n : 1;
}

/* A handle whose release failed is kept and released again later. */
static void release_or_keep(xseg_t *xs, struct xshare *sh, uint64_t h)
{
    if (xdrv_release(xs, h) == XDRV_SUCCESS)
        return;
    if (sh->norphans == sh->orphan_cap) {
        uint32_t cap = sh->orphan_cap ? sh->orphan_cap * 2 : 8;
        uint64_t *o = realloc(sh->orphans, cap * sizeof *o);
        if (!o)
            return;
        sh->orphans = o;
        sh->orphan_cap = cap;
    }
    sh->orphans[sh->norphans++] = h;
}

/* The same for a virtual range whose address_free failed. */
static void free_range_or_keep(xseg_t *xs, struct xshare *sh, uintptr_t va, size_t size)
{
    if (xdrv_address_free(xs, va, size) == XDRV_SUCCESS)
        return;
    if (sh->nvorphans == sh->vorphan_cap) {
        uint32_t cap = sh->vorphan_cap ? sh->vorphan_cap * 2 : 8;
        void *o = realloc(sh->vorphans, cap * sizeof *sh->vorphans);
        if (!o)
            return;
        sh->vorphans = o;
        sh->vorphan_cap = cap;
    }
    sh->vorphans[sh->nvorphans].va = va;
    sh->vorphans[sh->nvorphans++].size = size;
}

static void release_orphans(xseg_t *xs, struct xshare *sh)
{
    uint32_t kept = 0;
    for (uint32_t i = 0; i < sh->norphans; i++)
        if (xdrv_release(xs, sh->orphans[i]) != XDRV_SUCCESS)
            sh->orphans[kept++] = sh->orphans[i];
    sh->norphans = kept;
    kept = 0;
    for (uint32_t i = 0; i < sh->nvorphans; i++)
        if (xdrv_address_free(xs, sh->vorphans[i].va, sh->vorphans[i].size) != XDRV_SUCCESS)
            sh->vorphans[kept++] = sh->vorphans[i];
    sh->nvorphans = kept;
}

/* ---- peers ---- */

/* Ask the driver to give `mask`'s devices access from now on (all or
 * nothing); the devices it refused come back in *bad (first one). */
static int set_peers_mask(xseg_t *xs, uint64_t mask, int *bad)
{
    int devs[XDRV_MAX_PEERS], n = 0;
    for (int d = 0; d < 63; d++)
        if ((mask >> d) & 1)
            devs[n++] = d;
    *bad = n ? devs[0] : -1;
    return xdrv_set_peers(xs, devs, n);
}

/* peer_access:all: each device the driver takes, tried one at a time. */
static uint64_t all_peers(xseg_t *xs)
{
    uint64_t mask = 0;
    int bad;
    for (int d = 0; d < 63; d++) {
        if (d == xs->device)
            continue;
        if (set_peers_mask(xs, mask | (uint64_t)1 << d, &bad) == XDRV_SUCCESS)
            mask |= (uint64_t)1 << d;
    }
    return mask;
}

/* set_access again over every mapped run of one allocator's arena. */
static int reapply_arena(xseg_t *xs)
{
    xarena *ar = &xs->arena;
    size_t p = xbm_next(ar->mapped_bits, 0, ar->npages, 1);
    while (p < ar->npages) {
        size_t q = xbm_next(ar->mapped_bits, p, ar->npages, 0);
        int rc = xdrv_set_access(xs, ar->base + (p << ar->shift), (q - p) << ar->shift);
        if (rc != XDRV_SUCCESS)
            return rc;
        p = xbm_next(ar->mapped_bits, q, ar->npages, 1);
    }
    return XDRV_SUCCESS;
}

typedef struct reapply_arg {
    xseg_t *xs;
    int rc;
    int imported;
} reapply_arg;

static void reapply_one(uintptr_t key, uintptr_t val, void *arg)
{
    reapply_arg *a = arg;
    (void)key;
    size_t size = a->imported ? ((ximp *)val)->size : ((xded *)val)->size;
    uintptr_t va = a->imported ? ((ximp *)val)->va : ((xded *)val)->va;
    int rc = xdrv_set_access(a->xs, va, size);
    if (a->rc == XDRV_SUCCESS)
        a->rc = rc;
}

/* set_access again over the parent's arena, dedicated and imported blocks
 * (its lock held); the tags' arenas are the caller's. */
static int reapply_parent(xseg_t *xs, struct xshare *sh)
{
    reapply_arg a = {xs, reapply_arena(xs), 0};
    xseg_ptrmap_each(&sh->ded, reapply_one, &a);
    a.imported = 1;
    xseg_ptrmap_each(&sh->imp, reapply_one, &a);
    return a.rc;
}

/* ---- setup ---- */

static const char *const k_share_names[] = {"off", "fd", "fabric", "auto"};

/* The handle types `shareable` gives on this device, and why. */
static unsigned resolve_types(xseg_t *xs, struct xshare *sh)
{
    unsigned have = xdrv_share_types(xs), want = (unsigned)xs->conf.shareable;
    const char *name = k_share_names[want & 3];
    if (want == XSEG_SHARE_OFF) {
        snprintf(sh->why, sizeof sh->why, "shareable:off: dedicated blocks are not exportable");
        return 0;
    }
    if (want == XSEG_SHARE_FABRIC && (have & XDRV_HT_FABRIC)) {
        snprintf(sh->why, sizeof sh->why, "shareable:fabric: fabric%s handles",
                 (have & XDRV_HT_FD) ? " and fd" : "");
        return have & (XDRV_HT_FABRIC | XDRV_HT_FD);
    }
    if (have & XDRV_HT_FD) {
        snprintf(sh->why, sizeof sh->why, "shareable:%s: fd handles%s", name,
                 want == XSEG_SHARE_FABRIC ? " (the device takes no fabric handles: fell back to fd)"
                                           : "");
        return XDRV_HT_FD;
    }
    snprintf(sh->why, sizeof sh->why,
             "shareable:%.8s, but device %d (%.8s) takes no fd handles "
             "(HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED = 0): not exportable", name,
             xs->device, xdrv_name(xs));
    return 0;
}

static void share_free(struct xshare *sh)
{
    xseg_ptrmap_fini(&sh->ded);
    xseg_ptrmap_fini(&sh->imp);
    xseg_ptrmap_fini(&sh->by_nonce);
    if (sh->token_fd >= 0)
        close(sh->token_fd);
    free(sh->token_free);
    free(sh->orphans);
    free(sh->vorphans);
    free(sh);
}

/* The family parent's share state (its lock held): made at create
 * (xshare_setup from lifecycle.c), or here on first use. */
static xseg_status share_get(xseg_t *xs, struct xshare **out)
{
    if (xs->share) {
        *out = xs->share;
        return XSEG_OK;
    }
    struct xshare *sh = calloc(1, sizeof *sh);
    if (!sh)
        return xseg_fail(xs, XSEG_ERR_OOM, "xseg: no host memory for the sharing state");
    sh->token_fd = -1;
    if (xseg_ptrmap_init(&sh->ded, 8) || xseg_ptrmap_init(&sh->imp, 8) ||
        xseg_ptrmap_init_ints(&sh->by_nonce, 8)) {
        share_free(sh);
        return xseg_fail(xs, XSEG_ERR_OOM, "xseg: no host memory for the sharing state");
    }
    sh->types = resolve_types(xs, sh);
    size_t g = 0;
    if (xdrv_reg_granularity(xs, &g) != XDRV_SUCCESS || !g || g % xs->arena.page)
        g = xs->arena.page; /* the arena's page is a multiple of the driver's granularity */
    sh->gran = g;
    uint64_t mask = xs->conf.peer_access == XSEG_PEERS_ALL ? all_peers(xs) : xs->conf.peer_access;
    int bad = -1, rc = mask ? set_peers_mask(xs, mask, &bad) : XDRV_SUCCESS;
    if (rc == XDRV_SUCCESS && mask)
        rc = reapply_parent(xs, sh);
    if (rc != XDRV_SUCCESS) {
        (void)set_peers_mask(xs, 0, &bad);
        share_free(sh);
        return xseg_fail(xs, XSEG_ERR_CONFIG,
                         "peer_access: device %d cannot be given access to device %d's memory "
                         "(%s, code %d)", bad, xs->device, xdrv_error_name(xs, rc), rc);
    }
    sh->peers = mask;
    xs->share = sh;
    *out = sh;
    return XSEG_OK;
}

/* The parent of xs's family, locked, with its share state. */
static xseg_status enter(xseg_t *xs, xseg_t **fam, struct xshare **sh)
{
    *fam = xfam(xs);
    xlock_lock(&(*fam)->lock);
    xseg_status st = share_get(*fam, sh);
    if (st != XSEG_OK)
        xlock_unlock(&(*fam)->lock);
    return st;
}

xseg_status xshare_setup(xseg_t *xs)
{
    xseg_t *fam;
    struct xshare *sh;
    xseg_status st = enter(xs, &fam, &sh);
    if (st == XSEG_OK)
        xlock_unlock(&fam->lock);
    return st;
}

/* ---- tokens: one 8-byte slot per exported block ---- */

static int token_write(struct xshare *sh, uint32_t slot, uint64_t v)
{
    return pwrite(sh->token_fd, &v, sizeof v, (off_t)slot * 8) == (ssize_t)sizeof v ? 0 : -1;
}

static xseg_status token_take(xseg_t *xs, struct xshare *sh, uint32_t *slot)
{
    if (sh->token_fd < 0) {
        sh->token_fd = memfd_create("xseg-export-tokens", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        if (sh->token_fd < 0)
            return xseg_fail(xs, XSEG_ERR_OOM, "xseg_export: memfd_create of the token file: %s",
                             strerror(errno));
    }
    if (!sh->ntoken_free) {
        uint32_t n = sh->token_slots + TOKEN_GROW;
        uint32_t *f = realloc(sh->token_free, n * sizeof *f);
        if (!f || ftruncate(sh->token_fd, (off_t)n * 8)) {
            if (f)
                sh->token_free = f;
            return xseg_fail(xs, XSEG_ERR_OOM, "xseg_export: no room for %u token slots", n);
        }
        sh->token_free = f;
        for (uint32_t i = n; i > sh->token_slots; i--)
            sh->token_free[sh->ntoken_free++] = i - 1;
        sh->token_slots = n;
    }
    *slot = sh->token_free[--sh->ntoken_free];
    return XSEG_OK;
}

static void token_put(struct xshare *sh, uint32_t slot)
{
    (void)token_write(sh, slot, 0);
    sh->token_free[sh->ntoken_free++] = slot;
}

/* ---- dedicated blocks ---- */

static size_t round_to(size_t v, size_t g)
{
    return v > SIZE_MAX - (g - 1) ? 0 : (v + g - 1) / g * g;
}

/* Reserve, create (the family's types; a refused fabric falls back), map
 * and give access; undone on failure. */
static xseg_status ded_map(xseg_t *xs, struct xshare *sh, xded *d)
{
    static const char *what = "xseg_alloc_registrable";
    int rc = xdrv_reserve(xs, d->size, &d->va);
    if (rc != XDRV_SUCCESS)
        return drv_fail(xs, rc, what, "reserve", d->size);
    d->types = sh->types;
    rc = xdrv_create_as(xs, d->size, d->types, &d->drv);
    if ((rc == XDRV_NOT_SUPPORTED || rc == XDRV_NOT_PERMITTED) && (d->types & XDRV_HT_FABRIC)) {
        sh->types &= ~(unsigned)XDRV_HT_FABRIC; /* no IMEX channel, say: fd from now on */
        snprintf(sh->why, sizeof sh->why, "shareable:fabric refused by the driver (%s): fd handles",
                 xdrv_error_name(xs, rc));
        d->types = sh->types;
        rc = xdrv_create_as(xs, d->size, d->types, &d->drv);
    }
    if (rc == XDRV_OUT_OF_MEMORY) { /* the arena's cache goes first */
        xseg_reclaim(xs, d->size, 1);
        rc = xdrv_create_as(xs, d->size, d->types, &d->drv);
    }
    const char *op = "create";
    if (rc == XDRV_SUCCESS) {
        op = "map";
        rc = xdrv_map(xs, d->va, d->size, d->drv);
        if (rc == XDRV_SUCCESS) {
            op = "set_access";
            rc = xdrv_set_access(xs, d->va, d->size);
            if (rc != XDRV_SUCCESS)
                (void)xdrv_unmap(xs, d->va, d->size);
        }
        if (rc != XDRV_SUCCESS)
            release_or_keep(xs, sh, d->drv);
    }
    if (rc == XDRV_SUCCESS)
        return XSEG_OK;
    free_range_or_keep(xs, sh, d->va, d->size);
    return drv_fail(xs, rc, what, op, d->size);
}

xseg_status xshare_alloc(xseg_t *xs, size_t size, void *stream, void **out)
{
    xseg_t *fam;
    struct xshare *sh;
    if (!out)
        return xseg_fail(xs, XSEG_ERR_INVALID_ARG, "xseg_alloc_registrable: out is NULL");
    *out = NULL;
    if (!size)
        return xseg_fail(xs, XSEG_ERR_INVALID_ARG, "xseg_alloc_registrable: size is 0");
    xseg_status st = enter(xs, &fam, &sh);
    if (st != XSEG_OK)
        return st;
    size_t rounded = round_to(size, sh->gran);
    xded *d = rounded ? calloc(1, sizeof *d) : NULL;
    char b1[32], b2[32];
    if (!rounded)
        st = xseg_fail(fam, XSEG_ERR_SIZE, "xseg_alloc_registrable: %zu bytes do not round to "
                       "granules of %zu", size, sh->gran);
    else if (xfam_over_cap(fam, rounded))
        st = xseg_fail(fam, XSEG_ERR_OOM, "xseg_alloc_registrable: %s more would take the "
                       "allocator over its cap of %s (max_mapped / memory_fraction)",
                       xseg_fmt_size(rounded, b1, sizeof b1),
                       xseg_fmt_size(xfam_cap(fam), b2, sizeof b2));
    else if (!d || xseg_ptrmap_reserve(&sh->ded, 1))
        st = xseg_fail(fam, XSEG_ERR_OOM, "xseg_alloc_registrable: no host memory for a record");
    if (st == XSEG_OK) {
        *d = (xded){.size = rounded, .requested = size, .nstreams = 1, .streams = {stream}};
        st = ded_map(fam, sh, d);
    }
    if (st == XSEG_OK) {
        (void)xseg_ptrmap_put(&sh->ded, d->va, (uintptr_t)d);
        atomic_fetch_add_explicit(&fam->fam_mapped, rounded, memory_order_relaxed);
        xcnt_add(&sh->ded_blocks, 1);
        xcnt_add(&sh->ded_bytes, rounded);
        *out = (void *)d->va;
        d = NULL;
    }
    xlock_unlock(&fam->lock);
    free(d);
    return st;
}

/* The dedicated block at ptr (lock held), or NULL. */
static xded *ded_at(struct xshare *sh, const void *ptr)
{
    uintptr_t v;
    return sh && xseg_ptrmap_get(&sh->ded, (uintptr_t)ptr, &v) ? (xded *)v : NULL;
}

/* Wait for the streams that used it, then unmap, release, give the range
 * back.  A failed unmap keeps the block (nothing lost: free again). */
static xseg_status ded_unmap(xseg_t *xs, struct xshare *sh, xded *d)
{
    for (uint32_t i = 0; i < d->nstreams; i++) {
        int rc = xdrv_stream_sync(xs, d->streams[i]);
        if (rc != XDRV_SUCCESS)
            return drv_fail(xs, rc, "xseg_free of a dedicated block", "stream_sync", d->size);
    }
    int rc = xdrv_unmap(xs, d->va, d->size);
    if (rc != XDRV_SUCCESS)
        return drv_fail(xs, rc, "xseg_free of a dedicated block", "unmap", d->size);
    release_or_keep(xs, sh, d->drv);
    free_range_or_keep(xs, sh, d->va, d->size);
    return XSEG_OK;
}

int xshare_holds(xseg_t *xs, const void *ptr)
{
    xseg_t *fam = xfam(xs);
    if (!fam->share)
        return 0;
    xlock_lock(&fam->lock);
    int held = ded_at(fam->share, ptr) != NULL;
    xlock_unlock(&fam->lock);
    return held;
}

int xshare_free(xseg_t *xs, void *ptr, xseg_status *st)
{
    xseg_t *fam = xfam(xs);
    xlock_lock(&fam->lock);
    struct xshare *sh = fam->share;
    xded *d = ded_at(sh, ptr);
    if (!d) {
        xlock_unlock(&fam->lock);
        return 0;
    }
    *st = ded_unmap(fam, sh, d);
    if (*st == XSEG_OK) {
        xseg_ptrmap_del(&sh->ded, d->va, NULL);
        if (d->nonce) { /* importers now refuse it: its token is cleared */
            token_put(sh, d->slot);
            sh->exported_live--;
        }
        atomic_fetch_sub_explicit(&fam->fam_mapped, d->size, memory_order_relaxed);
        xcnt_sub(&sh->ded_blocks, 1);
        xcnt_sub(&sh->ded_bytes, d->size);
        release_orphans(fam, sh);
        free(d);
    }
    xlock_unlock(&fam->lock);
    return 1;
}

int xshare_record_stream(xseg_t *xs, void *ptr, void *stream, xseg_status *st)
{
    xseg_t *fam = xfam(xs);
    xlock_lock(&fam->lock);
    xded *d = ded_at(fam->share, ptr);
    if (d) {
        uint32_t i = 0;
        while (i < d->nstreams && d->streams[i] != stream)
            i++;
        *st = XSEG_OK;
        if (i == d->nstreams && i == XSHARE_STREAMS)
            *st = xseg_fail(fam, XSEG_ERR_INVALID_ARG, "xseg_record_stream: the dedicated block "
                            "%p already records %d streams, the most it can", ptr, XSHARE_STREAMS);
        else if (i == d->nstreams)
            d->streams[d->nstreams++] = stream;
    }
    xlock_unlock(&fam->lock);
    return d != NULL;
}

int xshare_block_size(xseg_t *xs, const void *ptr, size_t *rounded, size_t *requested,
                      xseg_status *st)
{
    xseg_t *fam = xfam(xs);
    xlock_lock(&fam->lock);
    xded *d = ded_at(fam->share, ptr);
    if (d) {
        if (rounded)
            *rounded = d->size;
        if (requested)
            *requested = d->requested;
        *st = XSEG_OK;
    }
    xlock_unlock(&fam->lock);
    return d != NULL;
}

/* The dedicated block holding an interior pointer: a walk of the few
 * dedicated blocks (each is at least a granule, and a program makes few). */
typedef struct ded_find {
    uintptr_t p;
    const xded *d;
} ded_find;

static void ded_holds(uintptr_t key, uintptr_t val, void *arg)
{
    ded_find *f = arg;
    const xded *d = (const xded *)val;
    if (f->p - key < d->size)
        f->d = d;
}

int xshare_block_range(xseg_t *xs, const void *ptr, uintptr_t *base, size_t *rounded,
                       size_t *requested)
{
    xseg_t *fam = xfam(xs);
    xlock_lock(&fam->lock);
    struct xshare *sh = fam->share;
    ded_find f = {(uintptr_t)ptr, sh ? ded_at(sh, ptr) : NULL};
    if (sh && !f.d)
        xseg_ptrmap_each(&sh->ded, ded_holds, &f);
    if (f.d) {
        if (base)
            *base = f.d->va;
        if (rounded)
            *rounded = f.d->size;
        if (requested)
            *requested = f.d->requested;
    }
    xlock_unlock(&fam->lock);
    return f.d != NULL;
}

/* ---- export ---- */

/* Why ptr cannot be exported (it is no dedicated block of xs). */
static xseg_status not_exportable(xseg_t *fam, struct xshare *sh, const void *ptr)
{
    uintptr_t p = (uintptr_t)ptr, v;
    if (xseg_ptrmap_get(&sh->imp, p, &v))
        return xseg_fail(fam, XSEG_ERR_INVALID_ARG, "xseg_export: %p is a block imported from "
                         "another process; export it from its owner", ptr);
    if (xseg_range_owner(fam, p))
        return xseg_fail(fam, XSEG_ERR_INVALID_ARG,
                         "xseg_export: %p is an ordinary allocation: its pages are shared with "
                         "other blocks and reused after its free, so it cannot leave the "
                         "process; allocate it with xseg_alloc_registrable (or set "
                         "registrable_min)", ptr);
    return xseg_fail(fam, XSEG_ERR_INVALID_POINTER,
                     "xseg_export: %p is not the start of a dedicated block of device %d", ptr,
                     fam->device);
}

static xseg_status export_fill(xseg_t *fam, struct xshare *sh, xded *d, xseg_export_desc *desc)
{
    if (!d->nonce) {
        uint32_t slot = 0;
        xseg_status st = token_take(fam, sh, &slot);
        if (st != XSEG_OK)
            return st;
        uint64_t nonce = new_nonce();
        if (token_write(sh, slot, nonce)) {
            sh->token_free[sh->ntoken_free++] = slot;
            return xseg_fail(fam, XSEG_ERR_OOM, "xseg_export: writing token slot %u: %s", slot,
                             strerror(errno));
        }
        d->slot = slot;
        d->nonce = nonce;
        sh->exported_live++;
    }
    int fd = -1, rc = xdrv_export_fd(fam, d->drv, &fd);
    if (rc != XDRV_SUCCESS)
        return drv_fail(fam, rc, "xseg_export", "export", d->size);
    int tfd = fcntl(sh->token_fd, F_DUPFD_CLOEXEC, 0);
    if (tfd < 0) {
        close(fd);
        return xseg_fail(fam, XSEG_ERR_OOM, "xseg_export: duplicating the token descriptor: %s",
                         strerror(errno));
    }
    memset(desc, 0, sizeof *desc);
    desc->magic = XSEG_EXPORT_MAGIC;
    desc->version = XSEG_EXPORT_VERSION;
    desc->device = fam->device;
    desc->pid = (int32_t)getpid();
    (void)xdrv_device_uuid(fam, desc->uuid);
    desc->size = d->size;
    desc->requested = d->requested;
    desc->nonce = d->nonce;
    desc->handle_type = 1;
    desc->npieces = 1;
    desc->token_fd = tfd;
    desc->token_slot = d->slot;
    desc->pieces[0] = (xseg_export_piece){fd, 0, 0, d->size};
    for (int i = 1; i < XSEG_EXPORT_MAX_PIECES; i++)
        desc->pieces[i].fd = -1;
    desc->check = desc_check(desc);
    sh->exports++;
    return XSEG_OK;
}

xseg_status xshare_export(xseg_t *xs, const void *ptr, xseg_export_desc *desc)
{
    xseg_t *fam;
    struct xshare *sh;
    if (!ptr || !desc)
        return xseg_fail(xs, XSEG_ERR_INVALID_ARG, "xseg_export: %s is NULL",
                         ptr ? "desc" : "ptr");
    xseg_status st = enter(xs, &fam, &sh);
    if (st != XSEG_OK)
        return st;
    xded *d = ded_at(sh, ptr);
    if (!d)
        st = not_exportable(fam, sh, ptr);
    else if (!(d->types & XDRV_HT_FD))
        st = xseg_fail(fam, XSEG_ERR_STATE, "xseg_export: the dedicated block %p has no "
                       "shareable handle: %s", ptr, sh->why);
    else
        st = export_fill(fam, sh, d, desc);
    xlock_unlock(&fam->lock);
    return st;
}

void xseg_export_close(xseg_export_desc *desc)
{
    if (!desc)
        return;
    uint32_t n = desc->npieces <= XSEG_EXPORT_MAX_PIECES ? desc->npieces : XSEG_EXPORT_MAX_PIECES;
    for (uint32_t i = 0; i < n; i++)
        if (desc->pieces[i].fd >= 0) {
            close(desc->pieces[i].fd);
            desc->pieces[i].fd = -1;
        }
    if (desc->token_fd >= 0)
        close(desc->token_fd);
    desc->token_fd = -1;
}

/* ---- sending over a Unix socket ---- */

xseg_status xseg_send_export(int sock, const xseg_export_desc *desc)
{
    int fds[XSEG_EXPORT_MAX_PIECES + 1];
    if (!desc || desc->magic != XSEG_EXPORT_MAGIC || !desc->npieces ||
        desc->npieces > XSEG_EXPORT_MAX_PIECES)
        return xseg_fail(NULL, XSEG_ERR_INVALID_ARG,
                         "xseg_send_export: desc is NULL or not made by xseg_export");
    uint32_t n = desc->npieces;
    for (uint32_t i = 0; i < n; i++)
        fds[i] = desc->pieces[i].fd;
    fds[n] = desc->token_fd;
    union {
        char buf[CMSG_SPACE(sizeof fds)];
        struct cmsghdr align;
    } u;
    memset(&u, 0, sizeof u);
    struct iovec iov = {(void *)desc, sizeof *desc};
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
                       .msg_controllen = CMSG_SPACE((n + 1) * sizeof(int))};
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN((n + 1) * sizeof(int));
    memcpy(CMSG_DATA(c), fds, (n + 1) * sizeof(int));
    ssize_t r;
    do
        r = sendmsg(sock, &m, MSG_NOSIGNAL);
    while (r < 0 && errno == EINTR);
    if (r != (ssize_t)sizeof *desc)
        return xseg_fail(NULL, XSEG_ERR_INVALID_ARG, "xseg_send_export: sendmsg on socket %d "
                         "sent %zd of %zu bytes: %s", sock, r, sizeof *desc,
                         r < 0 ? strerror(errno) : "short write");
    return XSEG_OK;
}

static void close_all(const int *fds, size_t n)
{
    for (size_t i = 0; i < n; i++)
        close(fds[i]);
}

xseg_status xseg_recv_export(int sock, xseg_export_desc *desc)
{
    int fds[XSEG_EXPORT_MAX_PIECES + 1];
    xseg_export_desc d;
    if (!desc)
        return xseg_fail(NULL, XSEG_ERR_INVALID_ARG, "xseg_recv_export: desc is NULL");
    union {
        char buf[CMSG_SPACE(sizeof fds)];
        struct cmsghdr align;
    } u;
    struct iovec iov = {&d, sizeof d};
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
                       .msg_controllen = sizeof u.buf};
    ssize_t r;
    do
        r = recvmsg(sock, &m, MSG_CMSG_CLOEXEC | MSG_WAITALL);
    while (r < 0 && errno == EINTR);
    size_t nfd = 0;
    for (struct cmsghdr *c = r >= 0 ? CMSG_FIRSTHDR(&m) : NULL; c; c = CMSG_NXTHDR(&m, c))
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
            size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            if (nfd + k > XSEG_EXPORT_MAX_PIECES + 1)
                k = XSEG_EXPORT_MAX_PIECES + 1 - nfd;
            memcpy(fds + nfd, CMSG_DATA(c), k * sizeof(int));
            nfd += k;
        }
    if (r != (ssize_t)sizeof d || (m.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) || d.npieces == 0 ||
        d.npieces > XSEG_EXPORT_MAX_PIECES || nfd != d.npieces + 1) {
        close_all(fds, nfd);
        return xseg_fail(NULL, XSEG_ERR_INVALID_ARG,
                         "xseg_recv_export: socket %d gave %zd of %zu bytes and %zu descriptors "
                         "(%s): not one description", sock, r, sizeof d, nfd,
                         r < 0 ? strerror(errno) : r == 0 ? "closed" : "bad message");
    }
    for (uint32_t i = 0; i < d.npieces; i++)
        d.pieces[i].fd = fds[i];
    d.token_fd = fds[d.npieces];
    *desc = d;
    return XSEG_OK;
}

/* ---- import ---- */

/* The description's own consistency (nothing asked of the system yet). */
static xseg_status desc_valid(xseg_t *fam, struct xshare *sh, const xseg_export_desc *d)
{
    static const char *w = "xseg_import";
    if (d->magic != XSEG_EXPORT_MAGIC || d->version != XSEG_EXPORT_VERSION)
        return xseg_fail(fam, XSEG_ERR_INVALID_ARG, "%s: not an xseg export description (magic "
                         "0x%08x version %u; expected 0x%08x version %u)", w, d->magic,
                         d->version, XSEG_EXPORT_MAGIC, XSEG_EXPORT_VERSION);
    if (d->check != desc_check(d))
        return xseg_fail(fam, XSEG_ERR_INVALID_ARG, "%s: the description's checksum does not "
                         "match its fields (damaged or forged)", w);
    if (d->handle_type != 1 || !d->npieces || d->npieces > XSEG_EXPORT_MAX_PIECES || !d->size ||
        d->requested > d->size || d->token_fd < 0)
        return xseg_fail(fam, XSEG_ERR_INVALID_ARG, "%s: handle type %u, %u pieces (1 to %d), "
                         "size %llu, requested %llu, token descriptor %d: not a valid description",
                         w, d->handle_type, d->npieces, XSEG_EXPORT_MAX_PIECES,
                         (unsigned long long)d->size, (unsigned long long)d->requested,
                         d->token_fd);
    uint64_t at = 0;
    for (uint32_t i = 0; i < d->npieces; i++) {
        const xseg_export_piece *p = &d->pieces[i];
        if (p->fd < 0 || p->offset != at || !p->size || p->size % sh->gran ||
            p->size > d->size - at)
            return xseg_fail(fam, XSEG_ERR_INVALID_ARG, "%s: piece %u (descriptor %d, offset %llu, "
                             "size %llu) does not continue the block at %llu in granules of "
                             "%zu within its %llu bytes", w, i, p->fd,
                             (unsigned long long)p->offset, (unsigned long long)p->size,
                             (unsigned long long)at, sh->gran, (unsigned long long)d->size);
        at += p->size;
    }
    if (at != d->size)
        return xseg_fail(fam, XSEG_ERR_INVALID_ARG, "%s: the pieces cover %llu of the block's "
                         "%llu bytes", w, (unsigned long long)at, (unsigned long long)d->size);
    return XSEG_OK;
}

/* Same device, block still alive at its exporter, not yet imported here. */
static xseg_status desc_current(xseg_t *fam, struct xshare *sh, const xseg_export_desc *d)
{
    static const char *w = "xseg_import";
    unsigned char uuid[16];
    uintptr_t v;
    if (xdrv_device_uuid(fam, uuid) != XDRV_SUCCESS || memcmp(uuid, d->uuid, 16))
        return xseg_fail(fam, XSEG_ERR_NO_DEVICE, "%s: the block lives on device %d of process "
                         "%d, which is not this allocator's device %d (device identities differ)",
                         w, d->device, d->pid, fam->device);
    uint64_t now = 0;
    if (fcntl(d->token_fd, F_GET_SEALS) < 0 ||
        pread(d->token_fd, &now, sizeof now, (off_t)d->token_slot * 8) != (ssize_t)sizeof now)
        return xseg_fail(fam, XSEG_ERR_INVALID_ARG, "%s: token descriptor %d slot %u cannot be "
                         "read as an xseg token file (forged description?)", w, d->token_fd,
                         d->token_slot);
    if (now != d->nonce)
        return xseg_fail(fam, XSEG_ERR_STATE, "%s: the block of %llu bytes exported by process "
                         "%d was freed by its exporter (token slot %u no longer holds the "
                         "description's nonce): stale or forged description", w,
                         (unsigned long long)d->size, d->pid, d->token_slot);
    if (xseg_ptrmap_get(&sh->by_nonce, d->nonce, &v))
        return xseg_fail(fam, XSEG_ERR_STATE, "%s: this block of process %d is already imported "
                         "at %p; xseg_unimport it first", w, d->pid, (void *)((ximp *)v)->va);
    return XSEG_OK;
}

/* Unmap what import mapped so far, release its handles, give the range
 * back. */
static void imp_undo(xseg_t *xs, struct xshare *sh, ximp *m, size_t mapped, uint32_t nh)
{
    if (mapped)
        (void)xdrv_unmap(xs, m->va, mapped);
    for (uint32_t i = 0; i < nh; i++)
        release_or_keep(xs, sh, m->drv[i]);
    free_range_or_keep(xs, sh, m->va, m->size);
}

static xseg_status imp_map(xseg_t *xs, struct xshare *sh, const xseg_export_desc *d, ximp *m)
{
    static const char *w = "xseg_import";
    m->size = d->size;
    int rc = xdrv_reserve(xs, m->size, &m->va);
    if (rc != XDRV_SUCCESS)
        return drv_fail(xs, rc, w, "reserve", m->size);
    size_t mapped = 0;
    const char *op = "import";
    for (m->n = 0; m->n < d->npieces && rc == XDRV_SUCCESS; m->n++) {
        const xseg_export_piece *p = &d->pieces[m->n];
        op = "import";
        rc = xdrv_import_fd(xs, p->fd, p->size, &m->drv[m->n]);
        if (rc != XDRV_SUCCESS)
            break;
        op = "map";
        rc = xdrv_map(xs, m->va + p->offset, p->size, m->drv[m->n]);
        if (rc != XDRV_SUCCESS) {
            m->n++; /* its handle is released by the undo */
            break;
        }
        mapped += p->size;
    }
    if (rc == XDRV_SUCCESS) {
        op = "set_access";
        rc = xdrv_set_access(xs, m->va, m->size);
    }
    if (rc == XDRV_SUCCESS)
        return XSEG_OK;
    imp_undo(xs, sh, m, mapped, m->n);
    return drv_fail(xs, rc, w, op, m->size);
}

xseg_status xshare_import(xseg_t *xs, const xseg_export_desc *desc, void **out)
{
    xseg_t *fam;
    struct xshare *sh;
    if (!desc || !out)
        return xseg_fail(xs, XSEG_ERR_INVALID_ARG, "xseg_import: %s is NULL",
                         desc ? "out" : "desc");
    *out = NULL;
    xseg_status st = enter(xs, &fam, &sh);
    if (st != XSEG_OK)
        return st;
    ximp *m = NULL;
    st = desc_valid(fam, sh, desc);
    if (st == XSEG_OK)
        st = desc_current(fam, sh, desc);
    if (st == XSEG_OK && (!(m = calloc(1, sizeof *m)) || xseg_ptrmap_reserve(&sh->imp, 1) ||
                          xseg_ptrmap_reserve(&sh->by_nonce, 1)))
        st = xseg_fail(fam, XSEG_ERR_OOM, "xseg_import: no host memory for a record");
    if (st == XSEG_OK)
        st = imp_map(fam, sh, desc, m);
    if (st == XSEG_OK) {
        m->nonce = desc->nonce;
        (void)xseg_ptrmap_put(&sh->imp, m->va, (uintptr_t)m);
        (void)xseg_ptrmap_put(&sh->by_nonce, m->nonce, (uintptr_t)m);
        xcnt_add(&sh->imp_blocks, 1);
        xcnt_add(&sh->imp_bytes, m->size);
        *out = (void *)m->va;
        m = NULL;
    } else {
        sh->refused++;
    }
    xlock_unlock(&fam->lock);
    free(m);
    return st;
}

xseg_status xshare_unimport(xseg_t *xs, void *ptr)
{
    xseg_t *fam;
    struct xshare *sh;
    uintptr_t v;
    xseg_status st = enter(xs, &fam, &sh);
    if (st != XSEG_OK)
        return st;
    if (!ptr || !xseg_ptrmap_get(&sh->imp, (uintptr_t)ptr, &v)) {
        st = xseg_fail(fam, XSEG_ERR_INVALID_POINTER, "xseg_unimport: %p is not the start of a "
                       "block imported by this allocator", ptr);
        xlock_unlock(&fam->lock);
        return st;
    }
    ximp *m = (ximp *)v;
    int rc = xdrv_unmap(fam, m->va, m->size);
    if (rc != XDRV_SUCCESS) {
        st = drv_fail(fam, rc, "xseg_unimport", "unmap", m->size);
        xlock_unlock(&fam->lock);
        return st; /* still imported: try again */
    }
    for (uint32_t i = 0; i < m->n; i++)
        release_or_keep(fam, sh, m->drv[i]);
    free_range_or_keep(fam, sh, m->va, m->size);
    xseg_ptrmap_del(&sh->imp, m->va, NULL);
    xseg_ptrmap_del(&sh->by_nonce, m->nonce, NULL);
    xcnt_sub(&sh->imp_blocks, 1);
    xcnt_sub(&sh->imp_bytes, m->size);
    release_orphans(fam, sh);
    xlock_unlock(&fam->lock);
    free(m);
    return XSEG_OK;
}

/* ---- peers ---- */

xseg_status xshare_enable_peer(xseg_t *xs, int device)
{
    xseg_t *fam;
    struct xshare *sh;
    if (device < 0 || device > 62 || device == xfam(xs)->device)
        return xseg_fail(xs, XSEG_ERR_NO_DEVICE, "xseg_enable_peer: device %d is not a peer of "
                         "device %d (0 to 62, not its own)", device, xfam(xs)->device);
    xseg_status st = enter(xs, &fam, &sh);
    if (st != XSEG_OK)
        return st;
    uint64_t mask = sh->peers | (uint64_t)1 << device;
    int bad, rc = mask == sh->peers ? XDRV_SUCCESS : set_peers_mask(fam, mask, &bad);
    if (rc != XDRV_SUCCESS) {
        st = xseg_fail(fam, rc == XDRV_NOT_SUPPORTED || rc == XDRV_INVALID_DEVICE
                                ? XSEG_ERR_NO_DEVICE : XSEG_ERR_DRIVER,
                       "xseg_enable_peer: device %d cannot be given access to device %d's "
                       "memory (%s, code %d)", device, fam->device, xdrv_error_name(fam, rc), rc);
        xlock_unlock(&fam->lock);
        return st;
    }
    sh->peers = mask;
    rc = reapply_parent(fam, sh);
    xlock_unlock(&fam->lock);
    for (int t = 1; rc == XDRV_SUCCESS && t < XSEG_MAX_TAGS; t++) {
        xseg_t *c = atomic_load(&fam->tags[t]);
        if (!c)
            continue;
        xlock_lock(&c->lock);
        rc = reapply_arena(c);
        xlock_unlock(&c->lock);
    }
    if (rc != XDRV_SUCCESS) /* new mappings have it; some old ones may not */
        return xseg_fail(fam, XSEG_ERR_DRIVER, "xseg_enable_peer: set_access failed (%s, code "
                         "%d) giving device %d access to existing mappings; new mappings have it; "
                         "call again", xdrv_error_name(fam, rc), rc, device);
    return XSEG_OK;
}

/* ---- stats and teardown ---- */

static xseg_counter pub(xcnt c)
{
    return (xseg_counter){c.cur, c.peak, c.total};
}

xseg_status xshare_stats(xseg_t *xs, xseg_share_stats *out)
{
    xseg_t *fam;
    struct xshare *sh;
    if (!out || out->size < sizeof(uint32_t))
        return xseg_fail(xs, XSEG_ERR_INVALID_ARG, "xseg_share_stats_get: out is NULL or its size "
                         "is not set to sizeof(xseg_share_stats) (%zu)", sizeof(xseg_share_stats));
    xseg_status st = enter(xs, &fam, &sh);
    if (st != XSEG_OK)
        return st;
    xseg_share_stats s = {.size = sizeof s, .handle_types = sh->types, .peers = sh->peers,
                          .dedicated_blocks = pub(sh->ded_blocks),
                          .dedicated_bytes = pub(sh->ded_bytes),
                          .imported_blocks = pub(sh->imp_blocks),
                          .imported_bytes = pub(sh->imp_bytes), .exports = sh->exports,
                          .exported_live = sh->exported_live, .refused_imports = sh->refused};
    snprintf(s.why, sizeof s.why, "%s", sh->why);
    xlock_unlock(&fam->lock);
    size_t n = out->size < sizeof s ? out->size : sizeof s;
    memcpy(out, &s, n);
    out->size = (uint32_t)n;
    return XSEG_OK;
}

/* xseg_reset_peak's part: every peak to its current (api.c declares it). */
void xshare_reset_peak(xseg_t *xs)
{
    xseg_t *fam = xfam(xs);
    xlock_lock(&fam->lock);
    struct xshare *sh = fam->share;
    if (sh) {
        xcnt *all[] = {&sh->ded_blocks, &sh->ded_bytes, &sh->imp_blocks, &sh->imp_bytes};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
            all[i]->peak = all[i]->cur;
    }
    xlock_unlock(&fam->lock);
}

typedef struct fini_arg {
    xseg_t *xs;
    struct xshare *sh;
    int call_driver;
} fini_arg;

static void fini_ded(uintptr_t key, uintptr_t val, void *arg)
{
    fini_arg *a = arg;
    xded *d = (xded *)val;
    (void)key;
    if (a->call_driver) {
        (void)xdrv_unmap(a->xs, d->va, d->size);
        release_or_keep(a->xs, a->sh, d->drv);
        free_range_or_keep(a->xs, a->sh, d->va, d->size);
    }
    free(d);
}

static void fini_imp(uintptr_t key, uintptr_t val, void *arg)
{
    fini_arg *a = arg;
    ximp *m = (ximp *)val;
    (void)key;
    if (a->call_driver)
        imp_undo(a->xs, a->sh, m, m->size, m->n);
    free(m);
}

/* Destroy: every dedicated and imported block unmapped and released
 * (driver calls only if call_driver: not in a forked child). */
void xshare_fini(xseg_t *xs, int call_driver)
{
    struct xshare *sh = xs->share;
    if (!sh)
        return;
    fini_arg a = {xs, sh, call_driver};
    xseg_ptrmap_each(&sh->ded, fini_ded, &a);
    xseg_ptrmap_each(&sh->imp, fini_imp, &a);
    if (call_driver) {
        release_orphans(xs, sh);
        int bad;
        if (sh->peers)
            (void)set_peers_mask(xs, 0, &bad);
    }
    atomic_fetch_sub_explicit(&xs->fam_mapped, sh->ded_bytes.cur, memory_order_relaxed);
    xs->share = NULL;
    share_free(sh);
}
