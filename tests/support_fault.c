/* support_fault.c: the fault-injecting driver table (support_fault.h): each
 * entry asks fault_hit() whether this call fails, then either returns the
 * armed code at once or forwards to the host backend. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "support_fault.h"

static const xseg_driver *const H = &xseg_driver_host;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    uint64_t calls[FAULT_NOPS];
    uint64_t fired;
    int armed, op, code, paused, have_fini;
    uint64_t nth;
    fault_mode mode;
    xseg_host_counts fini;
} g;

void fault_reset(void)
{
    pthread_mutex_lock(&g_lock);
    memset(&g, 0, sizeof g);
    pthread_mutex_unlock(&g_lock);
}

void fault_arm(int op, uint64_t nth, int code, fault_mode mode)
{
    pthread_mutex_lock(&g_lock);
    g.armed = 1;
    g.op = op;
    g.nth = nth;
    g.code = code;
    g.mode = mode;
    pthread_mutex_unlock(&g_lock);
}

void fault_disarm(void)
{
    pthread_mutex_lock(&g_lock);
    g.armed = 0;
    pthread_mutex_unlock(&g_lock);
}

void fault_pause(int paused)
{
    pthread_mutex_lock(&g_lock);
    g.paused = paused;
    pthread_mutex_unlock(&g_lock);
}

uint64_t fault_calls(int op)
{
    pthread_mutex_lock(&g_lock);
    uint64_t n = (op >= 0 && op < FAULT_NOPS) ? g.calls[op] : 0;
    pthread_mutex_unlock(&g_lock);
    return n;
}

uint64_t fault_fired(void)
{
    pthread_mutex_lock(&g_lock);
    uint64_t n = g.fired;
    pthread_mutex_unlock(&g_lock);
    return n;
}

int fault_fini_counts(xseg_host_counts *out)
{
    pthread_mutex_lock(&g_lock);
    int have = g.have_fini;
    *out = g.fini;
    pthread_mutex_unlock(&g_lock);
    return have;
}

/* Count a call of op; its XDRV code if it must fail, else XDRV_SUCCESS. */
static int fault_hit(int op)
{
    int rc = XDRV_SUCCESS;
    pthread_mutex_lock(&g_lock);
    if (!g.paused) {
        uint64_t n = ++g.calls[op];
        if (g.armed && g.op == op && (n == g.nth || (g.mode == FAULT_FROM && n > g.nth))) {
            rc = g.code;
            g.fired++;
        }
    }
    pthread_mutex_unlock(&g_lock);
    return rc;
}

const char *fault_op_name(int op)
{
    if (op == FAULT_OP_INIT)
        return "init";
    if (op == FAULT_OP_GRANULARITY)
        return "granularity";
    return xseg_op_name((xseg_op)op);
}

/* Per op, what cuMem* / cuEvent* / cuStream* / cuInit return on failure. */
int fault_codes(int op, int *codes, int max)
{
    static const int oom_inval[] = {XDRV_OUT_OF_MEMORY, XDRV_INVALID_VALUE};
    static const int inval[] = {XDRV_INVALID_VALUE};
    static const int handle[] = {XDRV_INVALID_HANDLE};
    static const int illegal[] = {XDRV_ILLEGAL_ADDRESS};
    static const int oom[] = {XDRV_OUT_OF_MEMORY};
    static const int init[] = {XDRV_NO_DEVICE, XDRV_OUT_OF_MEMORY, XDRV_NOT_INITIALIZED};
    static const int info[] = {XDRV_NOT_INITIALIZED};
    static const struct { const int *c; int n; } tab[FAULT_NOPS] = {
        [XSEG_OP_RESERVE] = {oom_inval, 2},     [XSEG_OP_ADDRESS_FREE] = {inval, 1},
        [XSEG_OP_CREATE] = {oom_inval, 2},      [XSEG_OP_RELEASE] = {inval, 1},
        [XSEG_OP_MAP] = {oom_inval, 2},         [XSEG_OP_UNMAP] = {inval, 1},
        [XSEG_OP_SET_ACCESS] = {oom_inval, 2},  [XSEG_OP_MEM_INFO] = {info, 1},
        [XSEG_OP_EVENT_CREATE] = {oom, 1},      [XSEG_OP_EVENT_RECORD] = {handle, 1},
        [XSEG_OP_EVENT_QUERY] = {illegal, 1},   [XSEG_OP_EVENT_SYNC] = {illegal, 1},
        [XSEG_OP_EVENT_DESTROY] = {handle, 1},  [XSEG_OP_STREAM_SYNC] = {illegal, 1},
        [XSEG_OP_HOST_ALLOC] = {oom_inval, 2},  [XSEG_OP_HOST_FREE] = {inval, 1},
        [XSEG_OP_COPY_TO_HOST] = {illegal, 1},  [XSEG_OP_COPY_TO_DEVICE] = {illegal, 1},
        [XSEG_OP_COPY_WAIT] = {illegal, 1},
        [XSEG_OP_EXPORT] = {oom_inval, 2},      [XSEG_OP_IMPORT] = {oom_inval, 2},
        [FAULT_OP_INIT] = {init, 3},            [FAULT_OP_GRANULARITY] = {inval, 1},
    };
    if (op < 0 || op >= FAULT_NOPS)
        return 0;
    int n = tab[op].n < max ? tab[op].n : max;
    memcpy(codes, tab[op].c, (size_t)n * sizeof *codes);
    return n;
}

/* ---- the table ---- */

static int f_init(void **ctx, int device, size_t capacity, char *err, size_t errlen)
{
    int rc = fault_hit(FAULT_OP_INIT);
    if (rc == XDRV_SUCCESS)
        return H->init(ctx, device, capacity, err, errlen);
    if (err && errlen)
        snprintf(err, errlen, "injected fault (%s)", xseg_drv_code_name(rc));
    return rc;
}

static void f_fini(void *ctx)
{
    xseg_host_counts c;
    xseg_host_counts_of(ctx, &c);
    pthread_mutex_lock(&g_lock);
    g.fini = c;
    g.have_fini = 1;
    pthread_mutex_unlock(&g_lock);
    H->fini(ctx);
}

#define FAULT_FWD(op, call)             \
    do {                                \
        int rc_ = fault_hit(op);        \
        return rc_ ? rc_ : (call);      \
    } while (0)

static int f_granularity(void *c, size_t *b) { FAULT_FWD(FAULT_OP_GRANULARITY, H->granularity(c, b)); }
static int f_mem_info(void *c, size_t *f, size_t *t) { FAULT_FWD(XSEG_OP_MEM_INFO, H->mem_info(c, f, t)); }
static int f_reserve(void *c, size_t s, uintptr_t *va) { FAULT_FWD(XSEG_OP_RESERVE, H->reserve(c, s, va)); }
static int f_address_free(void *c, uintptr_t va, size_t s) { FAULT_FWD(XSEG_OP_ADDRESS_FREE, H->address_free(c, va, s)); }
static int f_create(void *c, size_t s, uint64_t *h) { FAULT_FWD(XSEG_OP_CREATE, H->create(c, s, h)); }
static int f_release(void *c, uint64_t h) { FAULT_FWD(XSEG_OP_RELEASE, H->release(c, h)); }
static int f_map(void *c, uintptr_t va, size_t s, uint64_t h) { FAULT_FWD(XSEG_OP_MAP, H->map(c, va, s, h)); }
static int f_unmap(void *c, uintptr_t va, size_t s) { FAULT_FWD(XSEG_OP_UNMAP, H->unmap(c, va, s)); }
static int f_set_access(void *c, uintptr_t va, size_t s) { FAULT_FWD(XSEG_OP_SET_ACCESS, H->set_access(c, va, s)); }
static int f_event_create(void *c, void **e) { FAULT_FWD(XSEG_OP_EVENT_CREATE, H->event_create(c, e)); }
static int f_event_record(void *c, void *e, void *s) { FAULT_FWD(XSEG_OP_EVENT_RECORD, H->event_record(c, e, s)); }
static int f_event_query(void *c, void *e) { FAULT_FWD(XSEG_OP_EVENT_QUERY, H->event_query(c, e)); }
static int f_event_sync(void *c, void *e) { FAULT_FWD(XSEG_OP_EVENT_SYNC, H->event_sync(c, e)); }
static int f_event_destroy(void *c, void *e) { FAULT_FWD(XSEG_OP_EVENT_DESTROY, H->event_destroy(c, e)); }
static int f_stream_sync(void *c, void *s) { FAULT_FWD(XSEG_OP_STREAM_SYNC, H->stream_sync(c, s)); }
static int f_host_alloc(void *c, size_t s, void **p) { FAULT_FWD(XSEG_OP_HOST_ALLOC, H->host_alloc(c, s, p)); }
static int f_host_free(void *c, void *p) { FAULT_FWD(XSEG_OP_HOST_FREE, H->host_free(c, p)); }
static int f_copy(void *c, void *d, const void *s, size_t n, int to_dev)
{
    FAULT_FWD(to_dev ? XSEG_OP_COPY_TO_DEVICE : XSEG_OP_COPY_TO_HOST, H->copy(c, d, s, n, to_dev));
}
static int f_copy_wait(void *c) { FAULT_FWD(XSEG_OP_COPY_WAIT, H->copy_wait(c)); }
/* sharing: create_as is a create; the uncounted entries pass through */
static unsigned f_share_types(void *c) { return H->share_types(c); }
static int f_create_as(void *c, size_t s, unsigned t, uint64_t *h) { FAULT_FWD(XSEG_OP_CREATE, H->create_as(c, s, t, h)); }
static int f_export_fd(void *c, uint64_t h, int *fd) { FAULT_FWD(XSEG_OP_EXPORT, H->export_fd(c, h, fd)); }
static int f_import_fd(void *c, int fd, size_t s, uint64_t *h) { FAULT_FWD(XSEG_OP_IMPORT, H->import_fd(c, fd, s, h)); }
static int f_set_peers(void *c, const int *d, int n) { return H->set_peers(c, d, n); }
static int f_reg_granularity(void *c, size_t *b) { return H->reg_granularity(c, b); }
static int f_device_uuid(void *c, unsigned char u[16]) { return H->device_uuid(c, u); }

const xseg_driver fault_driver = {
    .name = "host-fault",
    .init = f_init,
    .fini = f_fini,
    .granularity = f_granularity,
    .mem_info = f_mem_info,
    .reserve = f_reserve,
    .address_free = f_address_free,
    .create = f_create,
    .release = f_release,
    .map = f_map,
    .unmap = f_unmap,
    .set_access = f_set_access,
    .event_create = f_event_create,
    .event_record = f_event_record,
    .event_query = f_event_query,
    .event_sync = f_event_sync,
    .event_destroy = f_event_destroy,
    .stream_sync = f_stream_sync,
    .host_alloc = f_host_alloc,
    .host_free = f_host_free,
    .copy = f_copy,
    .copy_wait = f_copy_wait,
    .error_name = xseg_drv_code_name,
    .share_types = f_share_types,
    .create_as = f_create_as,
    .export_fd = f_export_fd,
    .import_fd = f_import_fd,
    .set_peers = f_set_peers,
    .reg_granularity = f_reg_granularity,
    .device_uuid = f_device_uuid,
};
