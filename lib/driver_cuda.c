/* driver_cuda.c: the CUDA backend of the driver contract (driver.h): CUDA
 * virtual memory management (cuMemAddressReserve / cuMemCreate / cuMemMap /
 * cuMemSetAccess) and events through the driver API.
 *
 * libcuda.so.1 is never linked: it is dlopen()ed once, only cuGetProcAddress
 * is taken with dlsym(), and every other entry point, all named once in
 * cuda_syms.h, comes from cuGetProcAddress at a fixed ABI version; the rest
 * of the library gets them from here (xseg_cuda_sym).  Each operation runs with the
 * device's primary context (retained by init) current on the calling thread,
 * so the allocator shares memory and streams with the CUDA runtime.
 * Sharing (driver.h): handles requested with POSIX file-descriptor and/or
 * fabric types (create_as; the device attributes say which it takes),
 * exported and imported as file descriptors; set_access gives access to
 * the device and to the peers set_peers chose, one descriptor each, in one
 * cuMemSetAccess. */
#include <cuda.h>
#include <cudaTypedefs.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_syms.h"
#include "driver.h"
#include "driver_cuda.h"

#if CUDA_VERSION < 12000
#error "xseg's CUDA backend needs the headers of CUDA 12.0 or newer"
#endif

/* ABI version asked of cuGetProcAddress.  Every entry point used here has
 * had this ABI since CUDA 11.0 at the latest; a higher number would make a
 * driver older than it answer CUDA_ERROR_INVALID_VALUE.  Drivers 11.3-11.8
 * only have the 4-argument cuGetProcAddress, which cannot be asked for more
 * than its own version. */
#define XSEG_CU_ABI 12000
#define XSEG_CU_ABI_V1 11030

/* XDRV codes are CUresult numbers. */
_Static_assert((int)CUDA_SUCCESS == (int)XDRV_SUCCESS, "CUresult mismatch");
_Static_assert((int)CUDA_ERROR_INVALID_VALUE == (int)XDRV_INVALID_VALUE, "CUresult mismatch");
_Static_assert((int)CUDA_ERROR_OUT_OF_MEMORY == (int)XDRV_OUT_OF_MEMORY, "CUresult mismatch");
_Static_assert((int)CUDA_ERROR_NOT_INITIALIZED == (int)XDRV_NOT_INITIALIZED, "CUresult mismatch");
_Static_assert((int)CUDA_ERROR_NO_DEVICE == (int)XDRV_NO_DEVICE, "CUresult mismatch");
_Static_assert((int)CUDA_ERROR_INVALID_DEVICE == (int)XDRV_INVALID_DEVICE, "CUresult mismatch");
_Static_assert((int)CUDA_ERROR_INVALID_HANDLE == (int)XDRV_INVALID_HANDLE, "CUresult mismatch");
_Static_assert((int)CUDA_ERROR_NOT_READY == (int)XDRV_NOT_READY, "CUresult mismatch");
_Static_assert((int)CUDA_ERROR_ILLEGAL_ADDRESS == (int)XDRV_ILLEGAL_ADDRESS, "CUresult mismatch");
_Static_assert((int)CUDA_ERROR_NOT_PERMITTED == (int)XDRV_NOT_PERMITTED, "CUresult mismatch");
_Static_assert((int)CUDA_ERROR_NOT_SUPPORTED == (int)XDRV_NOT_SUPPORTED, "CUresult mismatch");
_Static_assert((int)CUDA_ERROR_UNKNOWN == (int)XDRV_UNKNOWN, "CUresult mismatch");
_Static_assert(sizeof(void *) == sizeof(PFN_cuInit_v2000), "function pointer size");

/* The entry points (cuda_syms.h), typed by the ABI of each signature. */
#define FIELD(name, ver) PFN_cu##name##_v##ver name;
typedef struct cuda_api {
    XSEG_CUDA_SYMS(FIELD)
} cuda_api;
#undef FIELD

/* Both ABIs asked of cuGetProcAddress reach every signature listed. */
#define ABI_REACHES(name, ver)                                                  \
    _Static_assert((ver) <= XSEG_CU_ABI && (ver) <= XSEG_CU_ABI_V1,             \
                   "cu" #name "'s ABI version is above the one xseg asks for");
XSEG_CUDA_SYMS(ABI_REACHES)
#undef ABI_REACHES

/* Base symbol name ("cu" + field) and slot of each entry point. */
#define ENTRY(name, ver) {"cu" #name, offsetof(cuda_api, name)},
static const struct {
    const char *name;
    size_t offset;
} k_entries[] = {XSEG_CUDA_SYMS(ENTRY)};
#undef ENTRY

/* Loader state, written once under g_load_once, read-only afterwards. */
static pthread_once_t g_load_once = PTHREAD_ONCE_INIT;
static int g_load_rc = XDRV_NOT_INITIALIZED;
static char g_load_msg[256];
static cuda_api g_api;
static PFN_cuGetProcAddress_v12000 g_getproc2;
static PFN_cuGetProcAddress_v11030 g_getproc1;

/* Probe state for xseg_cuda_available / xseg_cuda_device_count. */
static pthread_once_t g_probe_once = PTHREAD_ONCE_INIT;
static int g_device_count;

/* One open device. */
typedef struct cuda_ctx {
    int ordinal;
    CUdevice dev;
    CUcontext primary;
    size_t granularity;
    CUmemAllocationProp prop;
    unsigned share_types;     /* XDRV_HT_* the device takes (attributes, at init) */
    size_t reg_granularity;   /* recommended granularity (registration), at init */
    pthread_mutex_t acc_mu;   /* guards acc: set_peers runs beside set_access (tags) */
    CUmemAccessDesc acc[1 + XDRV_MAX_PEERS]; /* the device's own, then the peers' */
    int nacc;
    pthread_mutex_t copy_mu;  /* guards copy_stream's creation (shared ctx) */
    CUstream copy_stream;     /* sleep and wake copies, created on first use */
} cuda_ctx;

/* ---- loading ---------------------------------------------------------- */

/* Store a symbol address into a function pointer object (same size and
 * representation on every POSIX system; memcpy keeps ISO C quiet). */
static void set_fn(void *slot, void *sym)
{
    memcpy(slot, &sym, sizeof sym);
}

static int find_getproc(void *lib)
{
    void *p = dlsym(lib, "cuGetProcAddress_v2");

    if (p != NULL) {
        set_fn(&g_getproc2, p);
        return 0;
    }
    p = dlsym(lib, "cuGetProcAddress");
    if (p == NULL)
        return -1;
    set_fn(&g_getproc1, p);
    return 0;
}

/* One entry point by base name; *status: a CUdriverProcAddressQueryResult. */
static int get_proc(const char *name, void **fn, int *status)
{
    CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    CUresult rc;

    *fn = NULL;
    if (g_getproc2 != NULL) {
        rc = g_getproc2(name, fn, XSEG_CU_ABI, CU_GET_PROC_ADDRESS_DEFAULT, &st);
    } else {
        rc = g_getproc1(name, fn, XSEG_CU_ABI_V1, CU_GET_PROC_ADDRESS_DEFAULT);
        st = CU_GET_PROC_ADDRESS_SUCCESS;
    }
    *status = (int)st;
    if (rc != CUDA_SUCCESS)
        return (int)rc;
    if (st != CU_GET_PROC_ADDRESS_SUCCESS || *fn == NULL)
        return XDRV_NOT_SUPPORTED;
    return XDRV_SUCCESS;
}

static int load_entries(void)
{
    for (size_t i = 0; i < sizeof k_entries / sizeof k_entries[0]; i++) {
        void *fn = NULL;
        int status = 0;
        int rc = get_proc(k_entries[i].name, &fn, &status);

        if (rc != XDRV_SUCCESS) {
            snprintf(g_load_msg, sizeof g_load_msg,
                     "cuGetProcAddress(\"%s\", version %d) failed: code %d, "
                     "query status %d", k_entries[i].name,
                     g_getproc2 != NULL ? XSEG_CU_ABI : XSEG_CU_ABI_V1, rc, status);
            return rc;
        }
        set_fn((char *)&g_api + k_entries[i].offset, fn);
    }
    return XDRV_SUCCESS;
}

/* Runs once; the library stays loaded for the life of the process. */
static void load_all(void)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);

    if (lib == NULL) {
        const char *why = dlerror();

        snprintf(g_load_msg, sizeof g_load_msg, "libcuda.so.1 could not be loaded: %s",
                 why != NULL ? why : "unknown reason");
        g_load_rc = XDRV_NO_DEVICE;
        return;
    }
    if (find_getproc(lib) != 0) {
        snprintf(g_load_msg, sizeof g_load_msg,
                 "libcuda.so.1 has no cuGetProcAddress (driver older than CUDA 11.3)");
        g_load_rc = XDRV_NOT_SUPPORTED;
        return;
    }
    g_load_rc = load_entries();
}

static int ensure_loaded(void)
{
    pthread_once(&g_load_once, load_all);
    return g_load_rc;
}

static void probe(void)
{
    int n = 0;

    if (ensure_loaded() != XDRV_SUCCESS || g_api.Init(0) != CUDA_SUCCESS)
        return;
    if (g_api.DeviceGetCount(&n) == CUDA_SUCCESS && n > 0)
        g_device_count = n;
}

int xseg_cuda_device_count(void)
{
    pthread_once(&g_probe_once, probe);
    return g_device_count;
}

int xseg_cuda_available(void)
{
    return xseg_cuda_device_count() > 0;
}

void *xseg_cuda_sym(const char *name)
{
    if (name == NULL || ensure_loaded() != XDRV_SUCCESS)
        return NULL;
    for (size_t i = 0; i < sizeof k_entries / sizeof k_entries[0]; i++) {
        if (strcmp(k_entries[i].name, name) == 0) {
            void *fn;
            memcpy(&fn, (const char *)&g_api + k_entries[i].offset, sizeof fn);
            return fn;
        }
    }
    return NULL;
}

static const char *cuda_error_name(int code)
{
    const char *s = NULL;

    if (ensure_loaded() == XDRV_SUCCESS &&
        g_api.GetErrorName((CUresult)code, &s) == CUDA_SUCCESS && s != NULL)
        return s;
    return xseg_drv_code_name(code);
}

/* ---- context ---------------------------------------------------------- */

/* Make the primary context current.  Nothing current: set it (as the
 * runtime would) and leave it.  Another context current: push it, and
 * ctx_leave() pops it, so the caller's context is untouched. */
static int ctx_enter(const cuda_ctx *c, int *pushed)
{
    CUcontext cur = NULL;
    CUresult rc = g_api.CtxGetCurrent(&cur);

    *pushed = 0;
    if (rc != CUDA_SUCCESS || cur == c->primary)
        return (int)rc;
    if (cur == NULL)
        return (int)g_api.CtxSetCurrent(c->primary);
    rc = g_api.CtxPushCurrent(c->primary);
    *pushed = rc == CUDA_SUCCESS;
    return (int)rc;
}

static void ctx_leave(int pushed)
{
    CUcontext popped = NULL;

    if (pushed)
        (void)g_api.CtxPopCurrent(&popped);
}

/* Evaluates `rc` (the call) before leaving: use as the return value. */
static int leave_with(int pushed, CUresult rc)
{
    ctx_leave(pushed);
    return (int)rc;
}

static int sized(const cuda_ctx *c, size_t size)
{
    return size != 0 && size % c->granularity == 0;
}

static int placed(const cuda_ctx *c, uintptr_t va, size_t size)
{
    return va != 0 && va % c->granularity == 0 && sized(c, size);
}

/* ---- init / fini ------------------------------------------------------ */

__attribute__((format(printf, 3, 4)))
static void set_err(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;

    if (err == NULL || errlen == 0)
        return;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

static int fail(char *err, size_t errlen, int device, const char *what, int rc)
{
    set_err(err, errlen, "CUDA device %d: %s failed: %s (%d)", device, what,
            cuda_error_name(rc), rc);
    return rc;
}

static int open_device(cuda_ctx *c, char *err, size_t errlen)
{
    int n = 0;
    int rc = (int)g_api.Init(0);

    if (rc != CUDA_SUCCESS)
        return fail(err, errlen, c->ordinal, "cuInit(0)", rc);
    rc = (int)g_api.DeviceGetCount(&n);
    if (rc != CUDA_SUCCESS)
        return fail(err, errlen, c->ordinal, "cuDeviceGetCount", rc);
    if (n <= 0) {
        set_err(err, errlen, "CUDA device %d requested but the driver reports 0 devices",
                c->ordinal);
        return XDRV_NO_DEVICE;
    }
    if (c->ordinal < 0 || c->ordinal >= n) {
        set_err(err, errlen, "CUDA device %d out of range: %d device(s), valid 0..%d",
                c->ordinal, n, n - 1);
        return XDRV_INVALID_DEVICE;
    }
    rc = (int)g_api.DeviceGet(&c->dev, c->ordinal);
    return rc != CUDA_SUCCESS ? fail(err, errlen, c->ordinal, "cuDeviceGet", rc) : rc;
}

static int check_vmm(const cuda_ctx *c, char *err, size_t errlen)
{
    int vmm = 0;
    int rc = (int)g_api.DeviceGetAttribute(
        &vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, c->dev);

    if (rc != CUDA_SUCCESS)
        return fail(err, errlen, c->ordinal, "cuDeviceGetAttribute(VMM supported)", rc);
    if (!vmm) {
        set_err(err, errlen, "CUDA device %d does not support virtual memory management "
                "(CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED = 0)", c->ordinal);
        return XDRV_NOT_SUPPORTED;
    }
    return XDRV_SUCCESS;
}

/* Pinned device memory, no exportable handle; RDMA-capable where the
 * device allows it with VMM (an attribute query failure means no). */
static void fill_props(cuda_ctx *c)
{
    int rdma = 0;

    memset(&c->prop, 0, sizeof c->prop);
    c->prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    c->prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
    c->prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    c->prop.location.id = c->ordinal;
    if (g_api.DeviceGetAttribute(&rdma, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED,
                                 c->dev) == CUDA_SUCCESS && rdma)
        c->prop.allocFlags.gpuDirectRDMACapable = 1;
    memset(c->acc, 0, sizeof c->acc);
    c->acc[0].location = c->prop.location;
    c->acc[0].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    c->nacc = 1;
}

/* The shareable handle types the device takes (a failed query: none). */
static void probe_share_types(cuda_ctx *c)
{
    int fd = 0, fabric = 0;

    c->share_types = 0;
    if (g_api.DeviceGetAttribute(&fd, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
                                 c->dev) == CUDA_SUCCESS && fd)
        c->share_types |= XDRV_HT_FD;
    if (g_api.DeviceGetAttribute(&fabric, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED,
                                 c->dev) == CUDA_SUCCESS && fabric)
        c->share_types |= XDRV_HT_FABRIC;
}

/* The handle types of cuda.h for XDRV_HT_* bits. */
static CUmemAllocationHandleType handle_types(unsigned types)
{
    unsigned t = 0;

    if (types & XDRV_HT_FD)
        t |= CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    if (types & XDRV_HT_FABRIC)
        t |= CU_MEM_HANDLE_TYPE_FABRIC;
    return (CUmemAllocationHandleType)t;
}

static int query_granularity(cuda_ctx *c, char *err, size_t errlen)
{
    size_t g = 0;
    int pushed = 0;
    int rc = ctx_enter(c, &pushed);

    if (rc != CUDA_SUCCESS)
        return fail(err, errlen, c->ordinal, "making the primary context current", rc);
    rc = leave_with(pushed, g_api.MemGetAllocationGranularity(
                                &g, &c->prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    if (rc != CUDA_SUCCESS)
        return fail(err, errlen, c->ordinal, "cuMemGetAllocationGranularity", rc);
    if (g == 0) {
        set_err(err, errlen, "CUDA device %d: allocation granularity reported as 0",
                c->ordinal);
        return XDRV_UNKNOWN;
    }
    c->granularity = g;
    c->reg_granularity = g;
    if (c->share_types) { /* the recommended one, for handles of the shareable types */
        CUmemAllocationProp p = c->prop;
        size_t r = 0;
        p.requestedHandleTypes = handle_types(c->share_types);
        if (ctx_enter(c, &pushed) == CUDA_SUCCESS &&
            leave_with(pushed, g_api.MemGetAllocationGranularity(
                                   &r, &p, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)) == CUDA_SUCCESS &&
            r >= g && r % g == 0)
            c->reg_granularity = r;
    }
    return XDRV_SUCCESS;
}

/* Device checks, primary context, properties, granularity. */
static int open_ctx(cuda_ctx *c, char *err, size_t errlen)
{
    int rc = open_device(c, err, errlen);

    if (rc == XDRV_SUCCESS)
        rc = check_vmm(c, err, errlen);
    if (rc != XDRV_SUCCESS)
        return rc;
    rc = (int)g_api.DevicePrimaryCtxRetain(&c->primary, c->dev);
    if (rc != CUDA_SUCCESS)
        return fail(err, errlen, c->ordinal, "cuDevicePrimaryCtxRetain", rc);
    fill_props(c);
    probe_share_types(c);
    rc = query_granularity(c, err, errlen);
    if (rc != XDRV_SUCCESS)
        (void)g_api.DevicePrimaryCtxRelease(c->dev);
    return rc;
}

static int cuda_init(void **ctx, int device, size_t capacity, char *err, size_t errlen)
{
    cuda_ctx *c;
    int rc;

    (void)capacity;
    if (ctx == NULL)
        return XDRV_INVALID_VALUE;
    rc = ensure_loaded();
    if (rc != XDRV_SUCCESS) {
        set_err(err, errlen, "CUDA device %d: %s", device, g_load_msg);
        return rc;
    }
    c = calloc(1, sizeof *c);
    if (c == NULL) {
        set_err(err, errlen, "CUDA device %d: no host memory for the context", device);
        return XDRV_OUT_OF_MEMORY;
    }
    c->ordinal = device;
    pthread_mutex_init(&c->copy_mu, NULL);
    pthread_mutex_init(&c->acc_mu, NULL);
    rc = open_ctx(c, err, errlen);
    if (rc != XDRV_SUCCESS) {
        pthread_mutex_destroy(&c->acc_mu);
        pthread_mutex_destroy(&c->copy_mu);
        free(c);
        return rc;
    }
    *ctx = c;
    return XDRV_SUCCESS;
}

static void cuda_fini(void *ctx)
{
    cuda_ctx *c = ctx;

    if (c == NULL)
        return;
    if (c->copy_stream) {
        int pushed = 0;
        if (ctx_enter(c, &pushed) == CUDA_SUCCESS)
            (void)leave_with(pushed, g_api.StreamDestroy(c->copy_stream));
    }
    (void)g_api.DevicePrimaryCtxRelease(c->dev);
    pthread_mutex_destroy(&c->acc_mu);
    pthread_mutex_destroy(&c->copy_mu);
    free(c);
}

/* ---- memory ----------------------------------------------------------- */

static int cuda_granularity(void *ctx, size_t *bytes)
{
    if (bytes == NULL)
        return XDRV_INVALID_VALUE;
    *bytes = ((const cuda_ctx *)ctx)->granularity;
    return XDRV_SUCCESS;
}

static int cuda_mem_info(void *ctx, size_t *free_bytes, size_t *total_bytes)
{
    size_t f = 0, t = 0;
    int pushed = 0;
    int rc = ctx_enter(ctx, &pushed);

    if (rc != CUDA_SUCCESS)
        return rc;
    rc = leave_with(pushed, g_api.MemGetInfo(&f, &t));
    if (rc != CUDA_SUCCESS)
        return rc;
    if (free_bytes != NULL)
        *free_bytes = f;
    if (total_bytes != NULL)
        *total_bytes = t;
    return XDRV_SUCCESS;
}

static int cuda_reserve(void *ctx, size_t size, uintptr_t *va)
{
    const cuda_ctx *c = ctx;
    CUdeviceptr p = 0;
    int pushed = 0;
    int rc;

    if (va == NULL || !sized(c, size))
        return XDRV_INVALID_VALUE;
    rc = ctx_enter(c, &pushed);
    if (rc != CUDA_SUCCESS)
        return rc;
    rc = leave_with(pushed, g_api.MemAddressReserve(&p, size, c->granularity, 0, 0));
    if (rc == CUDA_SUCCESS)
        *va = (uintptr_t)p;
    return rc;
}

static int cuda_address_free(void *ctx, uintptr_t va, size_t size)
{
    int pushed = 0;
    int rc;

    if (!placed(ctx, va, size))
        return XDRV_INVALID_VALUE;
    rc = ctx_enter(ctx, &pushed);
    if (rc != CUDA_SUCCESS)
        return rc;
    return leave_with(pushed, g_api.MemAddressFree((CUdeviceptr)va, size));
}

static int cuda_create(void *ctx, size_t size, uint64_t *handle)
{
    const cuda_ctx *c = ctx;
    CUmemGenericAllocationHandle h = 0;
    int pushed = 0;
    int rc;

    if (handle == NULL || !sized(c, size))
        return XDRV_INVALID_VALUE;
    rc = ctx_enter(c, &pushed);
    if (rc != CUDA_SUCCESS)
        return rc;
    rc = leave_with(pushed, g_api.MemCreate(&h, size, &c->prop, 0));
    if (rc == CUDA_SUCCESS)
        *handle = (uint64_t)h;
    return rc;
}

static int cuda_release(void *ctx, uint64_t handle)
{
    int pushed = 0;
    int rc = ctx_enter(ctx, &pushed);

    if (rc != CUDA_SUCCESS)
        return rc;
    return leave_with(pushed, g_api.MemRelease((CUmemGenericAllocationHandle)handle));
}

static int cuda_map(void *ctx, uintptr_t va, size_t size, uint64_t handle)
{
    int pushed = 0;
    int rc;

    if (!placed(ctx, va, size))
        return XDRV_INVALID_VALUE;
    rc = ctx_enter(ctx, &pushed);
    if (rc != CUDA_SUCCESS)
        return rc;
    return leave_with(pushed, g_api.MemMap((CUdeviceptr)va, size, 0,
                                           (CUmemGenericAllocationHandle)handle, 0));
}

static int cuda_unmap(void *ctx, uintptr_t va, size_t size)
{
    int pushed = 0;
    int rc;

    if (!placed(ctx, va, size))
        return XDRV_INVALID_VALUE;
    rc = ctx_enter(ctx, &pushed);
    if (rc != CUDA_SUCCESS)
        return rc;
    return leave_with(pushed, g_api.MemUnmap((CUdeviceptr)va, size));
}

/* The device's own access and the peers' (set_peers), one call. */
static int cuda_set_access(void *ctx, uintptr_t va, size_t size)
{
    cuda_ctx *c = ctx;
    CUmemAccessDesc acc[1 + XDRV_MAX_PEERS];
    int pushed = 0;
    int rc, n;

    if (!placed(c, va, size))
        return XDRV_INVALID_VALUE;
    pthread_mutex_lock(&c->acc_mu);
    n = c->nacc;
    memcpy(acc, c->acc, (size_t)n * sizeof acc[0]);
    pthread_mutex_unlock(&c->acc_mu);
    rc = ctx_enter(c, &pushed);
    if (rc != CUDA_SUCCESS)
        return rc;
    return leave_with(pushed, g_api.MemSetAccess((CUdeviceptr)va, size, acc, (size_t)n));
}

/* ---- events and streams ----------------------------------------------- */

static int cuda_event_create(void *ctx, void **event)
{
    CUevent e = NULL;
    int pushed = 0;
    int rc;

    if (event == NULL)
        return XDRV_INVALID_VALUE;
    rc = ctx_enter(ctx, &pushed);
    if (rc != CUDA_SUCCESS)
        return rc;
    rc = leave_with(pushed, g_api.EventCreate(&e, CU_EVENT_DISABLE_TIMING));
    if (rc == CUDA_SUCCESS)
        *event = e;
    return rc;
}

static int cuda_event_record(void *ctx, void *event, void *stream)
{
    int pushed = 0;
    int rc;

    if (event == NULL)
        return XDRV_INVALID_HANDLE;
    rc = ctx_enter(ctx, &pushed);
    if (rc != CUDA_SUCCESS)
        return rc;
    return leave_with(pushed, g_api.EventRecord((CUevent)event, (CUstream)stream));
}

/* One event operation with the primary context current. */
static int on_event(void *ctx, void *event, CUresult (*fn)(CUevent))
{
    int pushed = 0;
    int rc;

    if (event == NULL)
        return XDRV_INVALID_HANDLE;
    rc = ctx_enter(ctx, &pushed);
    if (rc != CUDA_SUCCESS)
        return rc;
    return leave_with(pushed, fn((CUevent)event));
}

/* XDRV_SUCCESS when complete, XDRV_NOT_READY (CUDA_ERROR_NOT_READY) while
 * pending. */
static int cuda_event_query(void *ctx, void *event)
{
    return on_event(ctx, event, g_api.EventQuery);
}

static int cuda_event_sync(void *ctx, void *event)
{
    return on_event(ctx, event, g_api.EventSynchronize);
}

static int cuda_event_destroy(void *ctx, void *event)
{
    return on_event(ctx, event, g_api.EventDestroy);
}

/* stream NULL: the legacy default stream of the primary context. */
static int cuda_stream_sync(void *ctx, void *stream)
{
    int pushed = 0;
    int rc = ctx_enter(ctx, &pushed);

    if (rc != CUDA_SUCCESS)
        return rc;
    return leave_with(pushed, g_api.StreamSynchronize((CUstream)stream));
}

/* ---- copies (sleep and wake) -------------------------------------------- */

/* Portable pinned memory: any context of the process may copy with it. */
static int cuda_host_alloc(void *ctx, size_t size, void **host)
{
    int pushed = 0;
    int rc;

    if (host == NULL || size == 0)
        return XDRV_INVALID_VALUE;
    rc = ctx_enter(ctx, &pushed);
    if (rc != CUDA_SUCCESS)
        return rc;
    return leave_with(pushed, g_api.MemHostAlloc(host, size, CU_MEMHOSTALLOC_PORTABLE));
}

static int cuda_host_free(void *ctx, void *host)
{
    int pushed = 0;
    int rc;

    if (host == NULL)
        return XDRV_INVALID_VALUE;
    rc = ctx_enter(ctx, &pushed);
    if (rc != CUDA_SUCCESS)
        return rc;
    return leave_with(pushed, g_api.MemFreeHost(host));
}

/* The context's copy stream, made non-blocking on first use so that it
 * waits for no other stream (sleep waits for the users' streams itself). */
static int copy_stream(cuda_ctx *c, CUstream *out)
{
    int rc = CUDA_SUCCESS;

    pthread_mutex_lock(&c->copy_mu);
    if (c->copy_stream == NULL)
        rc = g_api.StreamCreate(&c->copy_stream, CU_STREAM_NON_BLOCKING);
    *out = c->copy_stream;
    pthread_mutex_unlock(&c->copy_mu);
    return rc;
}

static int cuda_copy(void *ctx, void *dst, const void *src, size_t size, int to_device)
{
    cuda_ctx *c = ctx;
    CUstream s = NULL;
    int pushed = 0;
    int rc;

    if (dst == NULL || src == NULL || size == 0)
        return XDRV_INVALID_VALUE;
    rc = ctx_enter(c, &pushed);
    if (rc != CUDA_SUCCESS)
        return rc;
    rc = copy_stream(c, &s);
    if (rc == CUDA_SUCCESS)
        rc = to_device ? g_api.MemcpyHtoDAsync((CUdeviceptr)(uintptr_t)dst, src, size, s)
                       : g_api.MemcpyDtoHAsync(dst, (CUdeviceptr)(uintptr_t)src, size, s);
    return leave_with(pushed, rc);
}

static int cuda_copy_wait(void *ctx)
{
    cuda_ctx *c = ctx;
    CUstream s = NULL;
    int pushed = 0;
    int rc;

    rc = ctx_enter(c, &pushed);
    if (rc != CUDA_SUCCESS)
        return rc;
    rc = copy_stream(c, &s);
    if (rc == CUDA_SUCCESS)
        rc = g_api.StreamSynchronize(s);
    return leave_with(pushed, rc);
}

/* ---- sharing ---------------------------------------------------------- */

static unsigned cuda_share_types(void *ctx)
{
    return ((const cuda_ctx *)ctx)->share_types;
}

/* create() with shareable types requested (the device must take them). */
static int cuda_create_as(void *ctx, size_t size, unsigned types, uint64_t *handle)
{
    const cuda_ctx *c = ctx;
    CUmemAllocationProp p = c->prop;
    CUmemGenericAllocationHandle h = 0;
    int pushed = 0;
    int rc;

    if (handle == NULL || !sized(c, size))
        return XDRV_INVALID_VALUE;
    if (types & ~c->share_types)
        return XDRV_NOT_SUPPORTED;
    p.requestedHandleTypes = handle_types(types);
    rc = ctx_enter(c, &pushed);
    if (rc != CUDA_SUCCESS)
        return rc;
    rc = leave_with(pushed, g_api.MemCreate(&h, size, &p, 0));
    if (rc == CUDA_SUCCESS)
        *handle = (uint64_t)h;
    return rc;
}

static int cuda_export_fd(void *ctx, uint64_t handle, int *fd)
{
    int out = -1;
    int pushed = 0;
    int rc;

    if (fd == NULL)
        return XDRV_INVALID_VALUE;
    rc = ctx_enter(ctx, &pushed);
    if (rc != CUDA_SUCCESS)
        return rc;
    rc = leave_with(pushed, g_api.MemExportToShareableHandle(
                                &out, (CUmemGenericAllocationHandle)handle,
                                CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    if (rc == CUDA_SUCCESS)
        *fd = out;
    return rc;
}

/* The size is the mapping's business (cuMemMap checks it). */
static int cuda_import_fd(void *ctx, int fd, size_t size, uint64_t *handle)
{
    CUmemGenericAllocationHandle h = 0;
    int pushed = 0;
    int rc;

    if (handle == NULL || fd < 0 || !sized(ctx, size))
        return XDRV_INVALID_VALUE;
    rc = ctx_enter(ctx, &pushed);
    if (rc != CUDA_SUCCESS)
        return rc;
    rc = leave_with(pushed, g_api.MemImportFromShareableHandle(
                                &h, (void *)(uintptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
    if (rc == CUDA_SUCCESS)
        *handle = (uint64_t)h;
    return rc;
}

/* Peer `ordinal` can reach the context's device (XDRV_SUCCESS), or why not. */
static int peer_ok(const cuda_ctx *c, int ordinal, int count)
{
    CUdevice peer = 0;
    int can = 0;
    int rc;

    if (ordinal < 0 || ordinal >= count || ordinal == c->ordinal)
        return XDRV_INVALID_DEVICE;
    rc = (int)g_api.DeviceGet(&peer, ordinal);
    if (rc != CUDA_SUCCESS)
        return rc;
    rc = (int)g_api.DeviceCanAccessPeer(&can, peer, c->dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    return can ? XDRV_SUCCESS : XDRV_NOT_SUPPORTED;
}

static int cuda_set_peers(void *ctx, const int *devices, int n)
{
    cuda_ctx *c = ctx;
    CUmemAccessDesc acc[1 + XDRV_MAX_PEERS];
    int count = 0;
    int rc;

    if (n < 0 || n > XDRV_MAX_PEERS || (n > 0 && devices == NULL))
        return XDRV_INVALID_VALUE;
    rc = (int)g_api.DeviceGetCount(&count);
    if (rc != CUDA_SUCCESS)
        return rc;
    acc[0] = c->acc[0];
    for (int i = 0; i < n; i++) {
        rc = peer_ok(c, devices[i], count);
        if (rc != XDRV_SUCCESS)
            return rc;
        acc[1 + i] = acc[0];
        acc[1 + i].location.id = devices[i];
    }
    pthread_mutex_lock(&c->acc_mu);
    memcpy(c->acc, acc, (size_t)(n + 1) * sizeof acc[0]);
    c->nacc = n + 1;
    pthread_mutex_unlock(&c->acc_mu);
    return XDRV_SUCCESS;
}

static int cuda_reg_granularity(void *ctx, size_t *bytes)
{
    if (bytes == NULL)
        return XDRV_INVALID_VALUE;
    *bytes = ((const cuda_ctx *)ctx)->reg_granularity;
    return XDRV_SUCCESS;
}

static int cuda_device_uuid(void *ctx, unsigned char uuid[16])
{
    CUuuid u;
    int rc;

    if (uuid == NULL)
        return XDRV_INVALID_VALUE;
    rc = (int)g_api.DeviceGetUuid(&u, ((const cuda_ctx *)ctx)->dev);
    if (rc == CUDA_SUCCESS)
        memcpy(uuid, u.bytes, 16);
    return rc;
}

static const xseg_driver xseg_driver_cuda = {
    .name = "cuda",
    .init = cuda_init,
    .fini = cuda_fini,
    .granularity = cuda_granularity,
    .mem_info = cuda_mem_info,
    .reserve = cuda_reserve,
    .address_free = cuda_address_free,
    .create = cuda_create,
    .release = cuda_release,
    .map = cuda_map,
    .unmap = cuda_unmap,
    .set_access = cuda_set_access,
    .event_create = cuda_event_create,
    .event_record = cuda_event_record,
    .event_query = cuda_event_query,
    .event_sync = cuda_event_sync,
    .event_destroy = cuda_event_destroy,
    .stream_sync = cuda_stream_sync,
    .host_alloc = cuda_host_alloc,
    .host_free = cuda_host_free,
    .copy = cuda_copy,
    .copy_wait = cuda_copy_wait,
    .error_name = cuda_error_name,
    .share_types = cuda_share_types,
    .create_as = cuda_create_as,
    .export_fd = cuda_export_fd,
    .import_fd = cuda_import_fd,
    .set_peers = cuda_set_peers,
    .reg_granularity = cuda_reg_granularity,
    .device_uuid = cuda_device_uuid,
};

const xseg_driver *const xseg_driver_cuda_ptr = &xseg_driver_cuda;
