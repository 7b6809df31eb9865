/* driver_host.c: the "host" driver backend: CUDA virtual-memory semantics
 * on Linux virtual memory, so the allocator runs and is tested without a GPU.
 *
 *  - Reservations: PROT_NONE, MAP_NORESERVE anonymous ranges, 2 MiB aligned.
 *  - Physical handles: ranges of ONE sparse memfd per context.  Each handle
 *    owns a slot (offset, size) in a table; a released slot keeps its range
 *    and is recycled by the next create of the same size (free lists keyed by
 *    size), so the file never fragments and ids stay O(1) to check.  Release
 *    punches the range's hole, so the memory really goes back.  Capacity is
 *    simulated: the bytes of live handles may not exceed it.
 *  - Maps: MAP_SHARED|MAP_FIXED views of the memfd, PROT_NONE until
 *    set_access.  Unmap puts the PROT_NONE reservation back.  A hash keyed by
 *    granule index (va >> 21) finds the mapping of any address in O(1).
 *  - Events complete at once unless their stream is held (test control);
 *    held streams count records (seq) and completions (done).
 *  - Shareable handles (create_as XDRV_HT_FD): a memfd of their own each,
 *    so that export_fd hands out a dup of it and import_fd (of a memfd, big
 *    enough: checked) maps the same pages in another process; the memory
 *    lives until its last descriptor and mapping are gone, in any process,
 *    as a CUDA allocation lives until its last handle.  Imported handles
 *    are not charged to the simulated capacity (the exporter's memory).
 *  - Peers: the backend plays HOST_DEVICES devices; device 0 is the one
 *    opened, the others exist as peers only: set_peers chooses who
 *    set_access gives access to, recorded per granule (a device mask) so
 *    tests can read it (xseg_host_access_mask).
 *  - Latency model (xseg_host_set_latency): create, release, map, unmap and
 *    set_access can be made to last as long as the CUDA driver's do (per
 *    call or handle, plus per 2 MiB); the time is spent spinning after the
 *    lock is given back.  Timed calls of every thread and context take
 *    turns on one timeline, as the CUDA driver serialises them (two threads
 *    in it were slower than one on an H100: tools/gpu/vmm_probe.c).
 * Every public operation takes the context's mutex; the process-wide
 * counters (xseg_host_counts_global) have their own.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "driver.h"
#include "driver_host.h"
#include "list.h"
#include "ptrmap.h"

#define HOST_SHIFT 21
#define HOST_GRAN ((size_t)1 << HOST_SHIFT) /* 2 MiB, as on the H200 */
#define NO_SLOT UINT32_MAX
#define EV_MAGIC 0x78657631u
#define PV_START ((uint64_t)1)  /* granule value: first granule of a map */
#define PV_ACCESS ((uint64_t)2) /* granule value: set_access done */
#define FILE_MAX ((uint64_t)INT64_MAX)
#define HOST_DEVICES 8 /* device 0 and seven simulated peers */

/* ---- context ------------------------------------------------------------ */

enum { SLOT_LIVE = 1, SLOT_ZOMBIE, SLOT_FREE };

/* A physical handle: a range of the memfd.  ZOMBIE: released while still
 * mapped (the memory lives until its last unmap).  FREE: range recyclable. */
typedef struct hslot {
    uint64_t off, size;
    uint32_t gen;  /* bumped at release: stale ids fail */
    uint32_t maps; /* live maps of this handle */
    uint32_t next; /* next FREE slot of the same size (own fd: of any size) */
    uint8_t state;
    uint8_t imported; /* import_fd: not charged to the capacity */
    int fd;        /* a memfd of its own (shareable, imported), or -1: a range of ctx->memfd */
} hslot;

typedef struct hres {
    uintptr_t va;
    size_t size;
    size_t mapped; /* bytes mapped inside: address_free refuses while > 0 */
} hres;

typedef struct hstream {
    uint64_t seq;  /* events recorded while held */
    uint64_t done; /* events of seq <= done are complete */
    int held;
} hstream;

struct host_ctx;
typedef struct hevent {
    uint32_t magic;
    struct host_ctx *ctx;
    xlist_node link; /* in the context's live events, freed by fini */
    void *stream;
    uint64_t seq;
    int pending;
    unsigned lag_left; /* queries before it completes (host_event_lag) */
} hevent;

enum { C_RES, C_RES_BYTES, C_HANDLES, C_HANDLE_BYTES, C_MAPS, C_MAP_BYTES,
       C_EVENTS, C_SHARED, C_IMPORTED, C_OVERLAPS, C_N };

typedef struct host_ctx {
    pthread_mutex_t lock;
    size_t capacity;
    int memfd;
    uint64_t file_size, bump; /* memfd length; end of ranges ever handed out */
    hslot *slots;
    uint32_t nslots;
    size_t slots_cap;
    xseg_ptrmap free_by_size; /* size >> 21 -> first FREE slot of that size */
    xseg_ptrmap pages;        /* va >> 21 -> slot << 2 | PV_START | PV_ACCESS */
    xseg_ptrmap acc;          /* va >> 21 -> devices with access (bit d), after set_access */
    xseg_ptrmap busy;         /* handle id -> its unmaps and releases under way (busy_call) */
    uint64_t peers;           /* set_peers: devices set_access gives access to, besides 0 */
    uint32_t own_free;        /* first FREE slot that had a memfd of its own (NO_SLOT: none) */
    uint64_t copies;          /* copies done (sleep and wake) */
    hres *res;           /* sorted by va */
    size_t nres, res_cap;
    xseg_ptrmap stream_idx;   /* stream token -> index in streams */
    hstream *streams;
    size_t nstreams, streams_cap;
    xlist events;         /* live events (hevent.link) */
    size_t cnt[C_N];
    uint64_t syncs;
    unsigned lag; /* host_event_lag */
    xseg_host_latency lat; /* host_driver_latency; zeros = off */
} host_ctx;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t g_atfork_once = PTHREAD_ONCE_INIT;

/* fork() while another thread holds g_lock would leave it held forever in
 * the child, and a new context there would hang on its first count: hold
 * it across the fork instead. */
static void g_lock_take(void)
{
    pthread_mutex_lock(&g_lock);
}

static void g_lock_give(void)
{
    pthread_mutex_unlock(&g_lock);
}

static void register_atfork(void)
{
    pthread_atfork(g_lock_take, g_lock_give, g_lock_give);
}

/* Register the fork handler now (process.c's fork module needs it before its own). */
void xhost_fork_init(void)
{
    pthread_once(&g_atfork_once, register_atfork);
}

static size_t g_cnt[C_N];

static void cnt_add(host_ctx *c, int i, size_t d)
{
    c->cnt[i] += d;
    pthread_mutex_lock(&g_lock);
    g_cnt[i] += d;
    pthread_mutex_unlock(&g_lock);
}

static void cnt_sub(host_ctx *c, int i, size_t d)
{
    c->cnt[i] -= d;
    pthread_mutex_lock(&g_lock);
    g_cnt[i] -= d;
    pthread_mutex_unlock(&g_lock);
}

static int aligned(uintptr_t va, size_t size)
{
    return size != 0 && va % HOST_GRAN == 0 && size % HOST_GRAN == 0 &&
           va + size > va;
}

/* Grow an array of `*cap` elements of `elem` bytes to hold `need`. */
static int grow(void **arr, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t n = *cap ? *cap * 2 : 16;
    while (n < need)
        n *= 2;
    if (n > SIZE_MAX / elem)
        return -1;
    void *p = realloc(*arr, n * elem);
    if (!p)
        return -1;
    *arr = p;
    *cap = n;
    return 0;
}

/* ---- reservations (sorted array, binary search; reserve is rare) ------ */

/* Number of reservations with va <= x. */
static size_t res_upper(const host_ctx *c, uintptr_t x)
{
    size_t lo = 0, hi = c->nres;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (c->res[mid].va <= x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The reservation holding [va, va + size), or NULL. */
static hres *res_holding(host_ctx *c, uintptr_t va, size_t size)
{
    size_t i = res_upper(c, va);
    if (i == 0)
        return NULL;
    hres *r = &c->res[i - 1];
    return va + size <= r->va + r->size ? r : NULL;
}

/* mmap a PROT_NONE range of `size` aligned to the granularity. */
static void *reserve_aligned(size_t size)
{
    size_t len = size + HOST_GRAN;
    char *p = mmap(NULL, len, PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    uintptr_t a = ((uintptr_t)p + HOST_GRAN - 1) & ~(uintptr_t)(HOST_GRAN - 1);
    size_t head = a - (uintptr_t)p;
    if (head)
        munmap(p, head);
    if (len - head - size)
        munmap((char *)a + size, len - head - size);
    return (void *)a;
}

static int reserve_locked(host_ctx *c, size_t size, uintptr_t *va)
{
    if (!va || !aligned(0, size) || size > SIZE_MAX - HOST_GRAN)
        return XDRV_INVALID_VALUE;
    if (grow((void **)&c->res, &c->res_cap, c->nres + 1, sizeof(hres)))
        return XDRV_OUT_OF_MEMORY;
    void *p = reserve_aligned(size);
    if (!p)
        return XDRV_OUT_OF_MEMORY;
    size_t i = res_upper(c, (uintptr_t)p);
    memmove(&c->res[i + 1], &c->res[i], (c->nres - i) * sizeof(hres));
    c->res[i] = (hres){(uintptr_t)p, size, 0};
    c->nres++;
    cnt_add(c, C_RES, 1);
    cnt_add(c, C_RES_BYTES, size);
    *va = (uintptr_t)p;
    return XDRV_SUCCESS;
}

static int address_free_locked(host_ctx *c, uintptr_t va, size_t size)
{
    size_t i = res_upper(c, va);
    if (i == 0 || c->res[i - 1].va != va || c->res[i - 1].size != size)
        return XDRV_INVALID_VALUE;
    if (c->res[i - 1].mapped)
        return XDRV_INVALID_VALUE; /* CUDA: unmap first */
    if (munmap((void *)va, size))
        return XDRV_UNKNOWN;
    i--;
    memmove(&c->res[i], &c->res[i + 1], (c->nres - i - 1) * sizeof(hres));
    c->nres--;
    cnt_sub(c, C_RES, 1);
    cnt_sub(c, C_RES_BYTES, size);
    return XDRV_SUCCESS;
}

/* ---- physical handles --------------------------------------------------- */

static uint64_t slot_id(const host_ctx *c, uint32_t idx)
{
    return (uint64_t)c->slots[idx].gen << 32 | ((uint64_t)idx + 1);
}

/* Index of the LIVE slot behind a handle id, or NO_SLOT. */
static uint32_t slot_of(const host_ctx *c, uint64_t h)
{
    uint64_t lo = h & 0xffffffffu;
    if (lo == 0 || lo > c->nslots)
        return NO_SLOT;
    const hslot *s = &c->slots[lo - 1];
    if (s->state != SLOT_LIVE || s->gen != (uint32_t)(h >> 32))
        return NO_SLOT;
    return (uint32_t)(lo - 1);
}

/* Pop a FREE slot of exactly `size` bytes, or NO_SLOT. */
static uint32_t slot_take_free(host_ctx *c, size_t size)
{
    uint64_t head;
    if (!xseg_ptrmap_get(&c->free_by_size, size >> HOST_SHIFT, &head))
        return NO_SLOT;
    uint32_t idx = (uint32_t)head, next = c->slots[idx].next;
    if (next == NO_SLOT)
        xseg_ptrmap_del(&c->free_by_size, size >> HOST_SHIFT, NULL);
    else
        (void)xseg_ptrmap_put(&c->free_by_size, size >> HOST_SHIFT, next);
    return idx;
}

/* Make the memfd at least `end` bytes long (sparse). */
static int file_cover(host_ctx *c, uint64_t end)
{
    if (end <= c->file_size)
        return 0;
    uint64_t n = c->file_size > FILE_MAX / 2 ? FILE_MAX : c->file_size * 2;
    if (n < end)
        n = end;
    if (ftruncate(c->memfd, (off_t)n))
        return -1;
    c->file_size = n;
    return 0;
}

/* A new slot with a fresh range at the end of the memfd, or NO_SLOT. */
static uint32_t slot_new(host_ctx *c, size_t size)
{
    if (c->nslots >= NO_SLOT - 1 || c->bump > FILE_MAX - size)
        return NO_SLOT;
    if (grow((void **)&c->slots, &c->slots_cap, (size_t)c->nslots + 1,
             sizeof(hslot)))
        return NO_SLOT;
    if (file_cover(c, c->bump + size))
        return NO_SLOT;
    c->slots[c->nslots] = (hslot){.off = c->bump, .size = size, .gen = 1, .next = NO_SLOT,
                                  .state = SLOT_FREE, .fd = -1};
    c->bump += size;
    return c->nslots++;
}

static int create_locked(host_ctx *c, size_t size, uint64_t *handle)
{
    if (!handle || !aligned(0, size))
        return XDRV_INVALID_VALUE;
    if (size > c->capacity - c->cnt[C_HANDLE_BYTES])
        return XDRV_OUT_OF_MEMORY;
    uint32_t idx = slot_take_free(c, size);
    if (idx == NO_SLOT)
        idx = slot_new(c, size);
    if (idx == NO_SLOT)
        return XDRV_OUT_OF_MEMORY;
    c->slots[idx].state = SLOT_LIVE;
    c->slots[idx].maps = 0;
    cnt_add(c, C_HANDLES, 1);
    cnt_add(c, C_HANDLE_BYTES, size);
    *handle = slot_id(c, idx);
    return XDRV_SUCCESS;
}

static int punch(host_ctx *c, const hslot *s)
{
    return fallocate(c->memfd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                     (off_t)s->off, (off_t)s->size);
}

/* The memory of slot idx is gone: recycle its range (room in
 * free_by_size reserved by the caller). */
static void slot_retire(host_ctx *c, uint32_t idx)
{
    hslot *s = &c->slots[idx];
    uint64_t head;
    s->gen++;
    s->state = SLOT_FREE;
    s->next = xseg_ptrmap_get(&c->free_by_size, s->size >> HOST_SHIFT, &head)
                  ? (uint32_t)head : NO_SLOT;
    (void)xseg_ptrmap_put(&c->free_by_size, s->size >> HOST_SHIFT, idx);
    cnt_sub(c, C_HANDLES, 1);
    cnt_sub(c, C_HANDLE_BYTES, s->size);
}

/* ---- handles with a memfd of their own (shareable, imported) ------------- */

/* A slot record for such a handle (no range of ctx->memfd), or NO_SLOT. */
static uint32_t own_slot(host_ctx *c)
{
    uint32_t idx = c->own_free;
    if (idx != NO_SLOT) {
        c->own_free = c->slots[idx].next;
        return idx;
    }
    if (c->nslots >= NO_SLOT - 1 ||
        grow((void **)&c->slots, &c->slots_cap, (size_t)c->nslots + 1, sizeof(hslot)))
        return NO_SLOT;
    c->slots[c->nslots] = (hslot){.gen = 1, .next = NO_SLOT, .state = SLOT_FREE, .fd = -1};
    return c->nslots++;
}

/* Make slot idx a live handle of `size` bytes behind fd (taken over). */
static uint64_t own_live(host_ctx *c, uint32_t idx, size_t size, int fd, int imported)
{
    hslot *s = &c->slots[idx];
    s->off = 0;
    s->size = size;
    s->maps = 0;
    s->next = NO_SLOT;
    s->state = SLOT_LIVE;
    s->imported = (uint8_t)imported;
    s->fd = fd;
    cnt_add(c, C_HANDLES, 1);
    if (imported) {
        cnt_add(c, C_IMPORTED, 1);
    } else {
        cnt_add(c, C_SHARED, 1);
        cnt_add(c, C_HANDLE_BYTES, size);
    }
    return slot_id(c, idx);
}

/* The handle's memory is this process's no more: close its memfd (the
 * pages live on while another process maps or holds them). */
static void own_retire(host_ctx *c, uint32_t idx)
{
    hslot *s = &c->slots[idx];
    close(s->fd);
    s->fd = -1;
    s->gen++;
    s->state = SLOT_FREE;
    s->next = c->own_free;
    c->own_free = idx;
    cnt_sub(c, C_HANDLES, 1);
    if (s->imported) {
        cnt_sub(c, C_IMPORTED, 1);
    } else {
        cnt_sub(c, C_SHARED, 1);
        cnt_sub(c, C_HANDLE_BYTES, s->size);
    }
    s->imported = 0;
}

static int create_as_locked(host_ctx *c, size_t size, unsigned types, uint64_t *handle)
{
    if (!types)
        return create_locked(c, size, handle);
    if (types & ~(unsigned)XDRV_HT_FD)
        return XDRV_NOT_SUPPORTED; /* fabric handles are not simulated */
    if (!handle || !aligned(0, size))
        return XDRV_INVALID_VALUE;
    if (size > c->capacity - c->cnt[C_HANDLE_BYTES])
        return XDRV_OUT_OF_MEMORY;
    int fd = memfd_create("xseg-shared", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0)
        return XDRV_OUT_OF_MEMORY;
    uint32_t idx = ftruncate(fd, (off_t)size) ? NO_SLOT : own_slot(c);
    if (idx == NO_SLOT) {
        close(fd);
        return XDRV_OUT_OF_MEMORY;
    }
    *handle = own_live(c, idx, size, fd, 0);
    return XDRV_SUCCESS;
}

static int export_fd_locked(host_ctx *c, uint64_t handle, int *fd)
{
    uint32_t idx = slot_of(c, handle);
    if (!fd)
        return XDRV_INVALID_VALUE;
    if (idx == NO_SLOT)
        return XDRV_INVALID_HANDLE;
    if (c->slots[idx].fd < 0)
        return XDRV_NOT_SUPPORTED; /* created without a shareable type */
    int d = fcntl(c->slots[idx].fd, F_DUPFD_CLOEXEC, 0);
    if (d < 0)
        return XDRV_OUT_OF_MEMORY; /* out of descriptors */
    *fd = d;
    return XDRV_SUCCESS;
}

/* A memfd (F_GET_SEALS answers only for memfds and shared memory) of at
 * least `size` bytes. */
static int import_fd_locked(host_ctx *c, int fd, size_t size, uint64_t *handle)
{
    struct stat st;
    if (!handle || fd < 0 || !aligned(0, size))
        return XDRV_INVALID_VALUE;
    if (fcntl(fd, F_GET_SEALS) < 0 || fstat(fd, &st) || !S_ISREG(st.st_mode) ||
        (uint64_t)st.st_size < size)
        return XDRV_INVALID_VALUE;
    int d = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (d < 0)
        return XDRV_OUT_OF_MEMORY;
    uint32_t idx = own_slot(c);
    if (idx == NO_SLOT) {
        close(d);
        return XDRV_OUT_OF_MEMORY;
    }
    *handle = own_live(c, idx, size, d, 1);
    return XDRV_SUCCESS;
}

static int set_peers_locked(host_ctx *c, const int *devices, int n)
{
    uint64_t mask = 0;
    if (n < 0 || n > XDRV_MAX_PEERS || (n && !devices))
        return XDRV_INVALID_VALUE;
    for (int i = 0; i < n; i++) {
        if (devices[i] <= 0 || devices[i] >= HOST_DEVICES)
            return XDRV_INVALID_DEVICE; /* 0 is the context's own */
        mask |= (uint64_t)1 << devices[i];
    }
    c->peers = mask;
    return XDRV_SUCCESS;
}

static int release_locked(host_ctx *c, uint64_t handle)
{
    uint32_t idx = slot_of(c, handle);
    if (idx == NO_SLOT)
        return XDRV_INVALID_HANDLE;
    hslot *s = &c->slots[idx];
    if (s->maps) { /* as CUDA: the memory lives until its last unmap */
        s->state = SLOT_ZOMBIE;
        s->gen++;
        return XDRV_SUCCESS;
    }
    if (s->fd >= 0) {
        own_retire(c, idx);
        return XDRV_SUCCESS;
    }
    if (xseg_ptrmap_reserve(&c->free_by_size, 1))
        return XDRV_OUT_OF_MEMORY;
    if (punch(c, s))
        return XDRV_UNKNOWN;
    slot_retire(c, idx);
    return XDRV_SUCCESS;
}

/* ---- maps ---------------------------------------------------------------- */

static int range_any_mapped(const host_ctx *c, uintptr_t va, size_t size)
{
    for (uintptr_t p = va; p < va + size; p += HOST_GRAN)
        if (xseg_ptrmap_get(&c->pages, p >> HOST_SHIFT, NULL))
            return 1;
    return 0;
}

static int range_all_mapped(const host_ctx *c, uintptr_t va, size_t size)
{
    for (uintptr_t p = va; p < va + size; p += HOST_GRAN)
        if (!xseg_ptrmap_get(&c->pages, p >> HOST_SHIFT, NULL))
            return 0;
    return 1;
}

/* Put the PROT_NONE reservation back over [va, va + size). */
static int restore_reserved(uintptr_t va, size_t size)
{
    void *p = mmap((void *)va, size, PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    return p == MAP_FAILED ? -1 : 0;
}

static int map_locked(host_ctx *c, uintptr_t va, size_t size, uint64_t handle)
{
    if (!aligned(va, size))
        return XDRV_INVALID_VALUE;
    uint32_t idx = slot_of(c, handle);
    if (idx == NO_SLOT)
        return XDRV_INVALID_HANDLE;
    hslot *s = &c->slots[idx];
    hres *r = res_holding(c, va, size);
    if (s->size != size || !r || range_any_mapped(c, va, size))
        return XDRV_INVALID_VALUE;
    if (xseg_ptrmap_reserve(&c->pages, size >> HOST_SHIFT))
        return XDRV_OUT_OF_MEMORY;
    void *p = mmap((void *)va, size, PROT_NONE, MAP_SHARED | MAP_FIXED,
                   s->fd >= 0 ? s->fd : c->memfd, (off_t)s->off);
    if (p == MAP_FAILED) {
        restore_reserved(va, size);
        return XDRV_OUT_OF_MEMORY;
    }
    for (uintptr_t q = va; q < va + size; q += HOST_GRAN)
        (void)xseg_ptrmap_put(&c->pages, q >> HOST_SHIFT,
                (uint64_t)idx << 2 | (q == va ? PV_START : 0));
    s->maps++;
    r->mapped += size;
    cnt_add(c, C_MAPS, 1);
    cnt_add(c, C_MAP_BYTES, size);
    return XDRV_SUCCESS;
}

/* Do whole maps tile [va, va + size) exactly?  *n receives their count. */
static int maps_tile(const host_ctx *c, uintptr_t va, size_t size, size_t *n)
{
    uintptr_t p = va;
    uint64_t v;
    *n = 0;
    while (p < va + size) {
        if (!xseg_ptrmap_get(&c->pages, p >> HOST_SHIFT, &v) || !(v & PV_START))
            return 0;
        p += c->slots[v >> 2].size;
        ++*n;
    }
    return p == va + size;
}

/* Forget the map starting at va (already unmapped); returns its size. */
static size_t map_forget(host_ctx *c, uintptr_t va)
{
    uint64_t v;
    xseg_ptrmap_get(&c->pages, va >> HOST_SHIFT, &v);
    uint32_t idx = (uint32_t)(v >> 2);
    hslot *s = &c->slots[idx];
    size_t size = s->size;
    for (uintptr_t q = va; q < va + size; q += HOST_GRAN) {
        xseg_ptrmap_del(&c->pages, q >> HOST_SHIFT, NULL);
        xseg_ptrmap_del(&c->acc, q >> HOST_SHIFT, NULL);
    }
    res_holding(c, va, size)->mapped -= size;
    cnt_sub(c, C_MAPS, 1);
    cnt_sub(c, C_MAP_BYTES, size);
    if (--s->maps == 0 && s->state == SLOT_ZOMBIE && s->fd >= 0) {
        own_retire(c, idx);
    } else if (s->maps == 0 && s->state == SLOT_ZOMBIE) {
        punch(c, s); /* best effort: the unmap already happened */
        slot_retire(c, idx);
    }
    return size;
}

static int unmap_locked(host_ctx *c, uintptr_t va, size_t size)
{
    size_t n;
    if (!aligned(va, size) || !maps_tile(c, va, size, &n))
        return XDRV_INVALID_VALUE;
    if (xseg_ptrmap_reserve(&c->free_by_size, n))
        return XDRV_OUT_OF_MEMORY;
    if (restore_reserved(va, size))
        return XDRV_OUT_OF_MEMORY;
    for (uintptr_t p = va; p < va + size;)
        p += map_forget(c, p);
    return XDRV_SUCCESS;
}

static int set_access_locked(host_ctx *c, uintptr_t va, size_t size)
{
    if (!aligned(va, size) || !range_all_mapped(c, va, size))
        return XDRV_INVALID_VALUE;
    if (xseg_ptrmap_reserve(&c->acc, size >> HOST_SHIFT))
        return XDRV_OUT_OF_MEMORY;
    if (mprotect((void *)va, size, PROT_READ | PROT_WRITE))
        return XDRV_OUT_OF_MEMORY;
    for (uintptr_t p = va; p < va + size; p += HOST_GRAN) {
        uint64_t v;
        xseg_ptrmap_get(&c->pages, p >> HOST_SHIFT, &v);
        (void)xseg_ptrmap_put(&c->pages, p >> HOST_SHIFT, v | PV_ACCESS);
        (void)xseg_ptrmap_put(&c->acc, p >> HOST_SHIFT, 1u | c->peers);
    }
    return XDRV_SUCCESS;
}

/* ---- streams and events --------------------------------------------------- */

/* The hold record of a stream; created on demand when `make`. */
static hstream *stream_get(host_ctx *c, void *stream, int make)
{
    uint64_t i;
    if (xseg_ptrmap_get(&c->stream_idx, (uintptr_t)stream, &i))
        return &c->streams[i];
    if (!make || xseg_ptrmap_reserve(&c->stream_idx, 1) ||
        grow((void **)&c->streams, &c->streams_cap, c->nstreams + 1,
             sizeof(hstream)))
        return NULL;
    (void)xseg_ptrmap_put(&c->stream_idx, (uintptr_t)stream, c->nstreams);
    c->streams[c->nstreams] = (hstream){0, 0, 0};
    return &c->streams[c->nstreams++];
}

static int ev_valid(const host_ctx *c, const hevent *e)
{
    return e && e->magic == EV_MAGIC && e->ctx == c;
}

/* Is the event complete?  Clears `pending` once it is. */
static int ev_done(host_ctx *c, hevent *e)
{
    if (!e->pending)
        return 1;
    hstream *st = stream_get(c, e->stream, 0);
    if (st && st->done < e->seq)
        return 0;
    if (e->lag_left) {
        e->lag_left--;
        return 0;
    }
    e->pending = 0;
    return 1;
}

static int event_create_locked(host_ctx *c, void **event)
{
    if (!event)
        return XDRV_INVALID_VALUE;
    hevent *e = calloc(1, sizeof(*e));
    if (!e)
        return XDRV_OUT_OF_MEMORY;
    e->magic = EV_MAGIC;
    e->ctx = c;
    xlist_push_front(&c->events, &e->link);
    cnt_add(c, C_EVENTS, 1);
    *event = e;
    return XDRV_SUCCESS;
}

static int event_record_locked(host_ctx *c, hevent *e, void *stream)
{
    if (!ev_valid(c, e))
        return XDRV_INVALID_HANDLE;
    hstream *st = stream_get(c, stream, 0);
    e->stream = stream;
    e->pending = st && st->held;
    e->seq = e->pending ? ++st->seq : 0;
    e->lag_left = c->lag;
    e->pending |= c->lag > 0;
    return XDRV_SUCCESS;
}

static int event_query_locked(host_ctx *c, hevent *e)
{
    if (!ev_valid(c, e))
        return XDRV_INVALID_HANDLE;
    return ev_done(c, e) ? XDRV_SUCCESS : XDRV_NOT_READY;
}

static int event_sync_locked(host_ctx *c, hevent *e)
{
    if (!ev_valid(c, e))
        return XDRV_INVALID_HANDLE;
    if (!ev_done(c, e)) { /* the GPU finishes the stream up to e */
        hstream *st = stream_get(c, e->stream, 0);
        if (st)
            st->done = e->seq;
        e->pending = 0;
        e->lag_left = 0;
    }
    c->syncs++;
    return XDRV_SUCCESS;
}

static void event_unlink(host_ctx *c, hevent *e)
{
    xlist_remove(&c->events, &e->link);
    e->magic = 0;
    free(e);
    cnt_sub(c, C_EVENTS, 1);
}

static int event_destroy_locked(host_ctx *c, hevent *e)
{
    if (!ev_valid(c, e))
        return XDRV_INVALID_HANDLE;
    event_unlink(c, e);
    return XDRV_SUCCESS;
}

static int stream_sync_locked(host_ctx *c, void *stream)
{
    hstream *st = stream_get(c, stream, 0);
    if (st)
        st->done = st->seq;
    for (xlist_node *n = c->lag ? xlist_first(&c->events) : NULL; n; n = xlist_next(n)) {
        hevent *e = XLIST_ENTRY(n, hevent, link);
        if (e->stream == stream)
            e->lag_left = 0; /* the stream's work is done */
    }
    c->syncs++;
    return XDRV_SUCCESS;
}

/* ---- copies (sleep and wake): host memory, memcpy done at once ------------- */

/* Every granule of [va, va + size) is mapped with access. */
static int range_accessible(host_ctx *c, uintptr_t va, size_t size)
{
    if (!size || va + size < va)
        return 0;
    for (uintptr_t p = va & ~(uintptr_t)(HOST_GRAN - 1); p < va + size; p += HOST_GRAN) {
        uint64_t v;
        if (!xseg_ptrmap_get(&c->pages, p >> HOST_SHIFT, &v) || !(v & PV_ACCESS))
            return 0;
    }
    return 1;
}

static int copy_locked(host_ctx *c, void *dst, const void *src, size_t size, int to_device)
{
    uintptr_t dev = (uintptr_t)(to_device ? dst : src);
    if (!dst || !src || !range_accessible(c, dev, size))
        return XDRV_INVALID_VALUE;
    c->copies++;
    return XDRV_SUCCESS;
}


static int fail(char *err, size_t errlen, int code, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return code;
}

static int h_init(void **ctx, int device, size_t capacity, char *err,
                  size_t errlen)
{
    if (!ctx)
        return fail(err, errlen, XDRV_INVALID_VALUE, "host backend: ctx is NULL");
    if (device != 0)
        return fail(err, errlen, XDRV_INVALID_DEVICE,
                    "host backend: device %d does not exist (only device 0)", device);
    if (capacity == 0)
        return fail(err, errlen, XDRV_INVALID_VALUE, "host backend: capacity is 0");
    pthread_once(&g_atfork_once, register_atfork);
    host_ctx *c = calloc(1, sizeof(*c));
    if (!c)
        return fail(err, errlen, XDRV_OUT_OF_MEMORY, "host backend: out of host memory");
    c->capacity = capacity;
    c->memfd = memfd_create("xseg-host", MFD_CLOEXEC);
    if (c->memfd < 0 || file_cover(c, capacity)) {
        int e = errno;
        if (c->memfd >= 0)
            close(c->memfd);
        free(c);
        return fail(err, errlen, XDRV_UNKNOWN,
                    "host backend: memfd of %zu bytes: %s", capacity, strerror(e));
    }
    pthread_mutex_init(&c->lock, NULL);
    c->own_free = NO_SLOT;
    *ctx = c;
    return XDRV_SUCCESS;
}

static void h_fini(void *ctx)
{
    host_ctx *c = ctx;
    if (!c)
        return;
    pthread_mutex_lock(&c->lock);
    for (size_t i = 0; i < c->nres; i++) /* drops the maps inside too */
        munmap((void *)c->res[i].va, c->res[i].size);
    while (!xlist_empty(&c->events))
        event_unlink(c, XLIST_ENTRY(xlist_first(&c->events), hevent, link));
    close(c->memfd);
    for (uint32_t i = 0; i < c->nslots; i++) /* memfds of their own: live or zombie */
        if (c->slots[i].fd >= 0)
            close(c->slots[i].fd);
    for (int i = 0; i < C_N; i++)
        cnt_sub(c, i, c->cnt[i]);
    pthread_mutex_unlock(&c->lock);
    xseg_ptrmap_fini(&c->free_by_size);
    xseg_ptrmap_fini(&c->pages);
    xseg_ptrmap_fini(&c->acc);
    xseg_ptrmap_fini(&c->busy);
    xseg_ptrmap_fini(&c->stream_idx);
    free(c->slots);
    free(c->res);
    free(c->streams);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

/* ---- the table: lock, run, unlock ------------------------------------------ */

#define LOCKED(c, expr)                          \
    do {                                         \
        host_ctx *c_ = (c);                      \
        pthread_mutex_lock(&c_->lock);           \
        int r_ = (expr);                         \
        pthread_mutex_unlock(&c_->lock);         \
        return r_;                               \
    } while (0)

static int h_granularity(void *ctx, size_t *bytes)
{
    (void)ctx;
    if (!bytes)
        return XDRV_INVALID_VALUE;
    *bytes = HOST_GRAN;
    return XDRV_SUCCESS;
}

static int mem_info_locked(host_ctx *c, size_t *free_bytes, size_t *total)
{
    if (!free_bytes || !total)
        return XDRV_INVALID_VALUE;
    *free_bytes = c->capacity - c->cnt[C_HANDLE_BYTES];
    *total = c->capacity;
    return XDRV_SUCCESS;
}

static int h_mem_info(void *ctx, size_t *f, size_t *t)
{
    LOCKED(ctx, mem_info_locked(ctx, f, t));
}

static int h_reserve(void *ctx, size_t size, uintptr_t *va)
{
    LOCKED(ctx, reserve_locked(ctx, size, va));
}

static int h_address_free(void *ctx, uintptr_t va, size_t size)
{
    LOCKED(ctx, address_free_locked(ctx, va, size));
}

/* ---- the latency model ------------------------------------------------------ */

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* 2 MiB units of size, rounded up. */
static uint64_t units_of(size_t size)
{
    return size / HOST_GRAN + (size % HOST_GRAN != 0);
}

/* Handles mapped in [va, va + size), at least 1 (before an unmap). */
static uint64_t maps_in_locked(host_ctx *c, uintptr_t va, size_t size)
{
    uint64_t n = 0, v;
    if (!aligned(va, size)) /* the call fails anyway */
        return 1;
    for (uintptr_t p = va; p < va + size; p += HOST_GRAN)
        if (xseg_ptrmap_get(&c->pages, p >> HOST_SHIFT, &v) && (v & PV_START))
            n++;
    return n ? n : 1;
}

/* The model's time: `calls` x call_ns + 2 MiB units of size x per_2mib_ns. */
static uint64_t model_ns(xseg_host_cost k, uint64_t calls, size_t size)
{
    if (!k.call_ns && !k.per_2mib_ns)
        return 0;
    return (uint64_t)k.call_ns * calls + (uint64_t)k.per_2mib_ns * units_of(size);
}

/* The end of the last timed call on the process's one driver timeline. */
static _Atomic uint64_t g_driver_free_at;

/* A timed call that came in at t0 and lasts ns: it starts once the calls
 * before it on the timeline have ended, then holds the timeline; returns
 * when it ends.  Its state change was made at once (under the context's
 * lock): only its time waits, so calls still overlap for the busy sets. */
static uint64_t driver_turn(uint64_t t0, uint64_t ns)
{
    uint64_t cur = atomic_load(&g_driver_free_at), end;
    do
        end = (cur > t0 ? cur : t0) + ns;
    while (!atomic_compare_exchange_weak(&g_driver_free_at, &cur, end));
    return end;
}

/* Spin on this thread until CLOCK_MONOTONIC reads `end`.  A spin (a vDSO
 * clock read, tens of ns) keeps microsecond figures exact; nanosleep would
 * add the timer slack (50 us by default), more than most of the figures,
 * and a driver call is CPU time of the calling thread too. */
static void spin_until(uint64_t end)
{
    while (mono_ns() < end) {
    }
}

/* Run expr under the lock; on success the call lasts (at least) the
 * model's time for the cost `field` of c->lat over `calls` calls (or
 * handles) and `size` bytes, both read under the lock before expr runs:
 * the backend's own work counts towards it, the rest is spun after the
 * lock is given back, behind the timed calls of other threads
 * (driver_turn). */
#define LOCKED_TIMED(c, field, calls, size, expr)                   \
    do {                                                            \
        host_ctx *c_ = (c);                                         \
        pthread_mutex_lock(&c_->lock);                              \
        xseg_host_cost k_ = c_->lat.field;                          \
        uint64_t ns_ = k_.call_ns || k_.per_2mib_ns ? model_ns(k_, (calls), (size)) : 0; \
        uint64_t t0_ = ns_ ? mono_ns() : 0;                         \
        int r_ = (expr);                                            \
        pthread_mutex_unlock(&c_->lock);                            \
        if (r_ == XDRV_SUCCESS && ns_)                              \
            spin_until(driver_turn(t0_, ns_));                      \
        return r_;                                                  \
    } while (0)

/* Fits (REFERENCE figures in us, per 2 / 20 / 512 MiB handle): create
 * 8.7 / 8.6 / 17.2; map 1.3 / 0.8 / 1.0; set_access 25.0 / 23.2 / 44.2 and
 * 13.2 ms over 512 x 2 MiB; unmap 18.2 / 16.2 / 25.5 and 8.1 ms over 512;
 * release 11.1 / 16.8 / 189.9. */
const xseg_host_latency xseg_host_latency_h200 = {
    .create = {8650, 35},
    .release = {10400, 700},
    .map = {1300, 0},
    .unmap = {18100, 40},
    .set_access = {24900, 80},
};

/* Size of the handle h before its release (0 if it is not one). */
static size_t handle_size_locked(host_ctx *c, uint64_t h)
{
    uint32_t idx = slot_of(c, h);
    return idx == NO_SLOT ? 0 : (size_t)c->slots[idx].size;
}

static int h_create(void *ctx, size_t size, uint64_t *h)
{
    LOCKED_TIMED(ctx, create, 1, size, create_locked(ctx, size, h));
}

/* ---- one handle, one thread at a time ----
 * The CUDA driver's own heap was corrupted on the H200 when one thread
 * unmapped a mapping of a handle while another released it (or unmapped
 * another mapping of it).  Unmap and release mark the handles they work on
 * busy until their modelled end; a call that finds one busy counts an
 * overlap (xseg_host_counts.overlaps), which tests hold at 0. */
#define BUSY_MAX 64

typedef struct busyset {
    uint64_t id[BUSY_MAX]; /* handle ids (a slot and its generation: a slot
                              reused by a new handle is another id) */
    uint32_t n;
} busyset;

static void busy_take(host_ctx *c, busyset *b, uint64_t id)
{
    uintptr_t n = 0;
    if (!id || b->n == BUSY_MAX)
        return;
    xseg_ptrmap_get(&c->busy, id, &n);
    if (n)
        cnt_add(c, C_OVERLAPS, 1);
    if (xseg_ptrmap_put(&c->busy, id, n + 1) == 0)
        b->id[b->n++] = id;
}

/* The handles mapped in [va, va + size). */
static void busy_range(host_ctx *c, busyset *b, uintptr_t va, size_t size)
{
    uint64_t v;
    if (!aligned(va, size))
        return;
    for (uintptr_t p = va; p < va + size; p += HOST_GRAN)
        if (xseg_ptrmap_get(&c->pages, p >> HOST_SHIFT, &v) && (v & PV_START))
            busy_take(c, b, slot_id(c, (uint32_t)(v >> 2)));
}

static void busy_give(host_ctx *c, const busyset *b)
{
    pthread_mutex_lock(&c->lock);
    for (uint32_t i = 0; i < b->n; i++) {
        uintptr_t n = 0;
        xseg_ptrmap_get(&c->busy, b->id[i], &n);
        if (n > 1)
            xseg_ptrmap_put(&c->busy, b->id[i], n - 1); /* the key exists: cannot fail */
        else
            xseg_ptrmap_del(&c->busy, b->id[i], NULL);
    }
    pthread_mutex_unlock(&c->lock);
}

/* Unmap or release (h: the handle; 0: the handles mapped in the range),
 * lasting the model's time, its handles busy meanwhile. */
static int busy_call(host_ctx *c, int release, uint64_t h, uintptr_t va, size_t size)
{
    busyset b = {.n = 0};
    pthread_mutex_lock(&c->lock);
    xseg_host_cost k = release ? c->lat.release : c->lat.unmap;
    uint64_t ns = release ? model_ns(k, 1, handle_size_locked(c, h))
                          : model_ns(k, maps_in_locked(c, va, size), size);
    uint64_t t0 = mono_ns();
    if (release)
        busy_take(c, &b, slot_of(c, h) == NO_SLOT ? 0 : h);
    else
        busy_range(c, &b, va, size);
    int r = release ? release_locked(c, h) : unmap_locked(c, va, size);
    pthread_mutex_unlock(&c->lock);
    if (r == XDRV_SUCCESS && ns)
        spin_until(driver_turn(t0, ns));
    busy_give(c, &b);
    return r;
}

static int h_release(void *ctx, uint64_t h)
{
    return busy_call(ctx, 1, h, 0, 0);
}

static int h_map(void *ctx, uintptr_t va, size_t size, uint64_t h)
{
    LOCKED_TIMED(ctx, map, 1, size, map_locked(ctx, va, size, h));
}

static int h_unmap(void *ctx, uintptr_t va, size_t size)
{
    return busy_call(ctx, 0, 0, va, size);
}

static int h_set_access(void *ctx, uintptr_t va, size_t size)
{
    LOCKED_TIMED(ctx, set_access, maps_in_locked(ctx, va, size), size,
                 set_access_locked(ctx, va, size));
}

static int h_event_create(void *ctx, void **ev)
{
    LOCKED(ctx, event_create_locked(ctx, ev));
}

static int h_event_record(void *ctx, void *ev, void *s)
{
    LOCKED(ctx, event_record_locked(ctx, ev, s));
}

static int h_event_query(void *ctx, void *ev)
{
    LOCKED(ctx, event_query_locked(ctx, ev));
}

static int h_event_sync(void *ctx, void *ev)
{
    LOCKED(ctx, event_sync_locked(ctx, ev));
}

static int h_event_destroy(void *ctx, void *ev)
{
    LOCKED(ctx, event_destroy_locked(ctx, ev));
}

static int h_stream_sync(void *ctx, void *s)
{
    LOCKED(ctx, stream_sync_locked(ctx, s));
}

/* Pinned memory is plain memory here (no capacity is charged: it is host
 * memory on a GPU too). */
static int h_host_alloc(void *ctx, size_t size, void **host)
{
    (void)ctx;
    if (!host || !size)
        return XDRV_INVALID_VALUE;
    void *p = malloc(size);
    if (!p)
        return XDRV_OUT_OF_MEMORY;
    *host = p;
    return XDRV_SUCCESS;
}

static int h_host_free(void *ctx, void *host)
{
    (void)ctx;
    if (!host)
        return XDRV_INVALID_VALUE;
    free(host);
    return XDRV_SUCCESS;
}

/* The check runs under the lock; the copy itself after it, as a DMA engine
 * works while the driver takes other calls (the allocator's lock keeps the
 * range mapped meanwhile). */
static int h_copy(void *ctx, void *dst, const void *src, size_t size, int to_device)
{
    host_ctx *c = ctx;
    pthread_mutex_lock(&c->lock);
    int rc = copy_locked(c, dst, src, size, to_device);
    pthread_mutex_unlock(&c->lock);
    if (rc == XDRV_SUCCESS)
        memcpy(dst, src, size);
    return rc;
}

static int h_copy_wait(void *ctx)
{
    (void)ctx;
    return XDRV_SUCCESS;
}

/* ---- sharing ------------------------------------------------------------------ */

static unsigned h_share_types(void *ctx)
{
    (void)ctx;
    return XDRV_HT_FD;
}

static int h_create_as(void *ctx, size_t size, unsigned types, uint64_t *h)
{
    LOCKED_TIMED(ctx, create, 1, size, create_as_locked(ctx, size, types, h));
}

static int h_export_fd(void *ctx, uint64_t h, int *fd)
{
    LOCKED(ctx, export_fd_locked(ctx, h, fd));
}

static int h_import_fd(void *ctx, int fd, size_t size, uint64_t *h)
{
    LOCKED(ctx, import_fd_locked(ctx, fd, size, h));
}

static int h_set_peers(void *ctx, const int *devices, int n)
{
    LOCKED(ctx, set_peers_locked(ctx, devices, n));
}

static int h_reg_granularity(void *ctx, size_t *bytes)
{
    return h_granularity(ctx, bytes);
}

/* The same 16 bytes in every process: the one simulated device 0. */
static int h_device_uuid(void *ctx, unsigned char uuid[16])
{
    (void)ctx;
    if (!uuid)
        return XDRV_INVALID_VALUE;
    memcpy(uuid, "xseg-host-dev-0", 16);
    return XDRV_SUCCESS;
}

const xseg_driver xseg_driver_host = {
    .name = "host",
    .init = h_init,
    .fini = h_fini,
    .granularity = h_granularity,
    .mem_info = h_mem_info,
    .reserve = h_reserve,
    .address_free = h_address_free,
    .create = h_create,
    .release = h_release,
    .map = h_map,
    .unmap = h_unmap,
    .set_access = h_set_access,
    .event_create = h_event_create,
    .event_record = h_event_record,
    .event_query = h_event_query,
    .event_sync = h_event_sync,
    .event_destroy = h_event_destroy,
    .stream_sync = h_stream_sync,
    .host_alloc = h_host_alloc,
    .host_free = h_host_free,
    .copy = h_copy,
    .copy_wait = h_copy_wait,
    .error_name = xseg_drv_code_name,
    .caps = XDRV_CAP_EVENT_LAG | XDRV_CAP_SIMULATED_CAPACITY | XDRV_CAP_LATENCY_MODEL,
    .share_types = h_share_types,
    .create_as = h_create_as,
    .export_fd = h_export_fd,
    .import_fd = h_import_fd,
    .set_peers = h_set_peers,
    .reg_granularity = h_reg_granularity,
    .device_uuid = h_device_uuid,
};

/* ---- test controls and counters (driver_host.h) ----------------------------- */

static void counts_fill(xseg_host_counts *out, const size_t *n, size_t capacity)
{
    *out = (xseg_host_counts){n[C_RES], n[C_RES_BYTES], n[C_HANDLES],
                              n[C_HANDLE_BYTES], n[C_MAPS], n[C_MAP_BYTES],
                              n[C_EVENTS], capacity, n[C_SHARED], n[C_IMPORTED],
                              n[C_OVERLAPS]};
}

void xseg_host_counts_of(void *ctx, xseg_host_counts *out)
{
    host_ctx *c = ctx;
    if (!out)
        return;
    memset(out, 0, sizeof(*out));
    if (!c)
        return;
    pthread_mutex_lock(&c->lock);
    counts_fill(out, c->cnt, c->capacity);
    pthread_mutex_unlock(&c->lock);
}

void xseg_host_counts_global(xseg_host_counts *out)
{
    if (!out)
        return;
    pthread_mutex_lock(&g_lock);
    counts_fill(out, g_cnt, 0);
    pthread_mutex_unlock(&g_lock);
}

void xseg_host_hold_stream(void *ctx, void *stream, int hold)
{
    host_ctx *c = ctx;
    if (!c)
        return;
    pthread_mutex_lock(&c->lock);
    hstream *st = stream_get(c, stream, hold);
    if (st && hold) {
        st->held = 1;
    } else if (st) { /* lifted: everything recorded meanwhile completes */
        st->held = 0;
        st->done = st->seq;
    }
    pthread_mutex_unlock(&c->lock);
}

void xseg_host_set_event_lag(void *ctx, unsigned lag)
{
    host_ctx *c = ctx;
    if (!c)
        return;
    pthread_mutex_lock(&c->lock);
    c->lag = lag;
    pthread_mutex_unlock(&c->lock);
}

void xseg_host_set_latency(void *ctx, const xseg_host_latency *lat)
{
    host_ctx *c = ctx;
    if (!c)
        return;
    pthread_mutex_lock(&c->lock);
    if (lat)
        c->lat = *lat;
    else
        memset(&c->lat, 0, sizeof c->lat);
    pthread_mutex_unlock(&c->lock);
}

int xseg_host_is_accessible(void *ctx, uintptr_t va)
{
    host_ctx *c = ctx;
    uint64_t v = 0;
    if (!c)
        return 0;
    pthread_mutex_lock(&c->lock);
    int ok = xseg_ptrmap_get(&c->pages, va >> HOST_SHIFT, &v) && (v & PV_ACCESS);
    pthread_mutex_unlock(&c->lock);
    return ok;
}

uint64_t xseg_host_sync_count(void *ctx)
{
    host_ctx *c = ctx;
    if (!c)
        return 0;
    pthread_mutex_lock(&c->lock);
    uint64_t n = c->syncs;
    pthread_mutex_unlock(&c->lock);
    return n;
}

uint64_t xseg_host_access_mask(void *ctx, uintptr_t va)
{
    host_ctx *c = ctx;
    uint64_t v = 0;
    if (!c)
        return 0;
    pthread_mutex_lock(&c->lock);
    if (!xseg_ptrmap_get(&c->acc, va >> HOST_SHIFT, &v))
        v = 0;
    pthread_mutex_unlock(&c->lock);
    return v;
}
