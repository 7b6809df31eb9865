/* share_proof.c: issue 15's proof on a GPU (run by tools/gpu/share_proof.sh).
 * libxseg (backend:cuda) shares dedicated blocks between two processes; the
 * device work goes through the CUDA driver API, dlopen()ed (no nvcc, no CUDA
 * headers): cuMemsetD32 writes patterns on the GPU, cuMemcpyDtoH reads them
 * back.  NCCL is dlopen()ed too, with the few prototypes declared here.
 * One JSON line per mode on stdout; exit 0 when the mode's checks passed.
 *
 * usage: share_proof MODE [ARGS]
 *   patterns              a block written on the GPU by each process, read by the
 *                         other; the exporter frees it and fills new blocks while
 *                         the importer still reads its pattern
 *   sync BYTES            a "weight sync": BYTES (1.5 GB) exported, imported and
 *                         copied on the device by the other process; times
 *   dmabuf                cuMemGetHandleForAddressRange(DMA_BUF_FD) of a
 *                         registrable block, and of an ordinary one (several handles)
 *   nccl LIBNCCL          one-rank communicator: ncclCommRegister of a registrable
 *                         block and an all-reduce on it
 *   child FD MODE ...     (internal) the importing process, on socket FD */
#include <dlfcn.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "xseg.h"

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
static struct {
    CUresult (*Init)(unsigned);
    CUresult (*DeviceGet)(int *, int);
    CUresult (*PrimaryCtxRetain)(void **, int);
    CUresult (*CtxSetCurrent)(void *);
    CUresult (*MemsetD32)(CUdeviceptr, unsigned, size_t);
    CUresult (*MemcpyDtoH)(void *, CUdeviceptr, size_t);
    CUresult (*MemcpyDtoD)(CUdeviceptr, CUdeviceptr, size_t);
    CUresult (*StreamSynchronize)(void *);
    CUresult (*GetHandleForAddressRange)(void *, CUdeviceptr, size_t, int, unsigned long long);
    CUresult (*MemGetInfo)(size_t *, size_t *);
} cu;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void *sym(void *lib, const char *name)
{
    void *p = dlsym(lib, name);
    if (!p) {
        printf("{\"mode\":\"init\",\"ok\":false,\"error\":\"libcuda has no %s\"}\n", name);
        exit(2);
    }
    return p;
}

/* libcuda, the primary context of device 0 current (xseg uses it too). */
static void cuda_open(void)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW);
    void *ctx = NULL;
    int dev = 0;
    if (!lib) {
        printf("{\"mode\":\"init\",\"ok\":false,\"error\":\"dlopen libcuda.so.1: %s\"}\n", dlerror());
        exit(2);
    }
    *(void **)&cu.Init = sym(lib, "cuInit");
    *(void **)&cu.DeviceGet = sym(lib, "cuDeviceGet");
    *(void **)&cu.PrimaryCtxRetain = sym(lib, "cuDevicePrimaryCtxRetain");
    *(void **)&cu.CtxSetCurrent = sym(lib, "cuCtxSetCurrent");
    *(void **)&cu.MemsetD32 = sym(lib, "cuMemsetD32_v2");
    *(void **)&cu.MemcpyDtoH = sym(lib, "cuMemcpyDtoH_v2");
    *(void **)&cu.MemcpyDtoD = sym(lib, "cuMemcpyDtoD_v2");
    *(void **)&cu.StreamSynchronize = sym(lib, "cuStreamSynchronize");
    *(void **)&cu.MemGetInfo = sym(lib, "cuMemGetInfo_v2");
    *(void **)&cu.GetHandleForAddressRange = dlsym(lib, "cuMemGetHandleForAddressRange");
    if (cu.Init(0) || cu.DeviceGet(&dev, 0) || cu.PrimaryCtxRetain(&ctx, dev) ||
        cu.CtxSetCurrent(ctx)) {
        printf("{\"mode\":\"init\",\"ok\":false,\"error\":\"cuInit / primary context failed\"}\n");
        exit(2);
    }
}

static xseg_t *xseg_open(void)
{
    xseg_t *xs = NULL;
    if (xseg_create(&xs, 0, "backend:cuda,shareable:fd") != XSEG_OK) {
        printf("{\"mode\":\"init\",\"ok\":false,\"error\":\"xseg_create: %s\"}\n", xseg_last_error());
        exit(2);
    }
    return xs;
}

/* Every 1 MiB (and the last word) of [p, p + n) reads `word`. */
static int check_words(void *p, size_t n, unsigned word)
{
    unsigned v = 0;
    for (size_t off = 0; off < n; off += (size_t)1 << 20)
        if (cu.MemcpyDtoH(&v, (CUdeviceptr)(uintptr_t)p + off, 4) || v != word)
            return 0;
    return !cu.MemcpyDtoH(&v, (CUdeviceptr)(uintptr_t)p + n - 4, 4) && v == word;
}

static int fill(void *p, size_t n, unsigned word)
{
    return !cu.MemsetD32((CUdeviceptr)(uintptr_t)p, word, n / 4) && !cu.StreamSynchronize(NULL);
}

/* Start `share_proof child FD mode arg` on one end of a socketpair (exec:
 * CUDA must not be used in a forked child of a CUDA process). */
static pid_t spawn_child(const char *mode, const char *arg, int *sock)
{
    int sv[2];
    char fdtxt[16];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        close(sv[0]);
        snprintf(fdtxt, sizeof fdtxt, "%d", sv[1]);
        execl("/proc/self/exe", "share_proof", "child", fdtxt, mode, arg ? arg : "", (char *)NULL);
        _exit(127);
    }
    close(sv[1]);
    *sock = sv[0];
    return pid;
}

static char get(int s)
{
    char c = 0;
    return read(s, &c, 1) == 1 ? c : 0;
}

static int child_status(pid_t pid)
{
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* ---- patterns ---- */

#define PAT_SIZE ((size_t)64 << 20)

static int mode_patterns(void)
{
    xseg_t *xs = xseg_open();
    void *a = NULL, *more[4] = {0};
    xseg_export_desc d;
    int s = -1, ok = 1;
    const char *err = "";
    if (xseg_alloc_registrable(xs, PAT_SIZE, NULL, &a) || !fill(a, PAT_SIZE, 0xA5A5A5A5u) ||
        xseg_export(xs, a, &d)) {
        printf("{\"mode\":\"patterns\",\"ok\":false,\"error\":\"exporter: %s\"}\n", xseg_last_error());
        return 1;
    }
    pid_t pid = spawn_child("patterns", NULL, &s);
    if (pid < 0 || xseg_send_export(s, &d) || get(s) != 'w') {
        ok = 0;
        err = "child did not import and write";
    }
    xseg_export_close(&d);
    /* the importer wrote its pattern over the second half on the GPU */
    int saw_child = ok && check_words((char *)a + PAT_SIZE / 2, PAT_SIZE / 2, 0x5A5A5A5Au);
    int kept_own = ok && check_words(a, PAT_SIZE / 2, 0xA5A5A5A5u);
    int freed = ok && xseg_free(xs, a) == XSEG_OK;
    for (int i = 0; ok && i < 4; i++) { /* new memory: never the exported pages */
        if (xseg_alloc_registrable(xs, PAT_SIZE, NULL, &more[i]) ||
            !fill(more[i], PAT_SIZE, 0x11111111u * (unsigned)(i + 1)))
            ok = 0;
    }
    if (write(s, "c", 1) != 1)
        ok = 0;
    int child_ok = get(s) == 'k';
    int rc = child_status(pid);
    for (int i = 0; i < 4; i++)
        if (more[i]) {
            ok &= check_words(more[i], PAT_SIZE, 0x11111111u * (unsigned)(i + 1));
            xseg_free(xs, more[i]);
        }
    ok = ok && saw_child && kept_own && freed && child_ok && rc == 0;
    printf("{\"mode\":\"patterns\",\"ok\":%s,\"bytes\":%zu,\"importer_wrote_seen\":%s,"
           "\"exporter_half_kept\":%s,\"exporter_freed\":%s,\"importer_after_free_ok\":%s,"
           "\"child_exit\":%d,\"error\":\"%s\"}\n", ok ? "true" : "false", PAT_SIZE,
           saw_child ? "true" : "false", kept_own ? "true" : "false", freed ? "true" : "false",
           child_ok ? "true" : "false", rc, err);
    xseg_destroy(xs);
    return !ok;
}

static int child_patterns(int s)
{
    xseg_t *xs = xseg_open();
    xseg_export_desc d;
    void *p = NULL;
    if (xseg_recv_export(s, &d) || xseg_import(xs, &d, &p)) {
        fprintf(stderr, "child: %s\n", xseg_last_error());
        return 3;
    }
    xseg_export_close(&d);
    if (!check_words(p, PAT_SIZE, 0xA5A5A5A5u) ||
        !fill((char *)p + PAT_SIZE / 2, PAT_SIZE / 2, 0x5A5A5A5Au))
        return 4;
    if (write(s, "w", 1) != 1 || get(s) != 'c')
        return 5;
    /* the exporter freed the block and filled new ones meanwhile */
    if (!check_words(p, PAT_SIZE / 2, 0xA5A5A5A5u) ||
        !check_words((char *)p + PAT_SIZE / 2, PAT_SIZE / 2, 0x5A5A5A5Au) ||
        !fill(p, PAT_SIZE, 0x77777777u) || !check_words(p, PAT_SIZE, 0x77777777u))
        return 6;
    if (xseg_unimport(xs, p) || write(s, "k", 1) != 1)
        return 7;
    xseg_destroy(xs);
    return 0;
}

/* ---- weight sync ---- */

static int mode_sync(size_t bytes)
{
    xseg_t *xs = xseg_open();
    void *w = NULL;
    xseg_export_desc d;
    int s = -1;
    bytes = bytes / 4 * 4;
    if (xseg_alloc_registrable(xs, bytes, NULL, &w) || !fill(w, bytes, 0x3C3C3C3Cu)) {
        printf("{\"mode\":\"sync\",\"ok\":false,\"error\":\"%s\"}\n", xseg_last_error());
        return 1;
    }
    char arg[32];
    snprintf(arg, sizeof arg, "%zu", bytes);
    pid_t pid = spawn_child("sync", arg, &s);
    double t0 = now_s();
    int ok = pid > 0 && xseg_export(xs, w, &d) == XSEG_OK;
    double t_export = now_s() - t0;
    ok = ok && xseg_send_export(s, &d) == XSEG_OK;
    if (ok)
        xseg_export_close(&d);
    double times[3] = {0, 0, 0}; /* child: import, copy, verify seconds */
    ok = ok && read(s, times, sizeof times) == (ssize_t)sizeof times;
    double t_total = now_s() - t0;
    int rc = child_status(pid);
    ok = ok && rc == 0 && times[0] > 0;
    printf("{\"mode\":\"sync\",\"ok\":%s,\"bytes\":%zu,\"export_s\":%.6f,\"import_s\":%.6f,"
           "\"copy_s\":%.6f,\"copy_GBps\":%.2f,\"total_s\":%.6f,\"total_GBps\":%.2f,"
           "\"child_exit\":%d}\n", ok ? "true" : "false", bytes, t_export, times[0], times[1],
           times[1] > 0 ? (double)bytes / times[1] / 1e9 : 0.0, t_total,
           t_total > 0 ? (double)bytes / t_total / 1e9 : 0.0, rc);
    xseg_free(xs, w);
    xseg_destroy(xs);
    return !ok;
}

/* Import, copy into an own (ordinary) buffer on the device, check it. */
static int child_sync(int s, size_t bytes)
{
    xseg_t *xs = xseg_open();
    xseg_export_desc d;
    void *p = NULL, *mine = NULL;
    double t0 = now_s();
    if (xseg_recv_export(s, &d) || xseg_import(xs, &d, &p))
        return 3;
    xseg_export_close(&d);
    double t1 = now_s();
    if (xseg_alloc(xs, bytes, NULL, &mine))
        return 4;
    double t2 = now_s();
    if (cu.MemcpyDtoD((CUdeviceptr)(uintptr_t)mine, (CUdeviceptr)(uintptr_t)p, bytes) ||
        cu.StreamSynchronize(NULL))
        return 5;
    double t3 = now_s();
    if (!check_words(mine, bytes, 0x3C3C3C3Cu))
        return 6;
    double times[3] = {t1 - t0, t3 - t2, now_s() - t3};
    if (write(s, times, sizeof times) != (ssize_t)sizeof times)
        return 7;
    xseg_free(xs, mine);
    xseg_unimport(xs, p);
    xseg_destroy(xs);
    return 0;
}

/* ---- dmabuf ---- */

static int dmabuf_of(void *p, size_t n, int *fd)
{
    *fd = -1;
    if (!cu.GetHandleForAddressRange)
        return -1;
    return cu.GetHandleForAddressRange(fd, (CUdeviceptr)(uintptr_t)p, n, 1 /* DMA_BUF_FD */, 0);
}

static int mode_dmabuf(void)
{
    xseg_t *xs = xseg_open(), *paged = NULL;
    void *r = NULL, *o = NULL;
    int fd_r = -1, fd_o = -1, rc_r = -1, rc_o = -1;
    size_t n = (size_t)64 << 20;
    if (!xseg_alloc_registrable(xs, n, NULL, &r))
        rc_r = dmabuf_of(r, n, &fd_r);
    /* an ordinary block under handle_size:page: 32 handles of 2 MiB */
    if (!xseg_create(&paged, 0, "backend:cuda,handle_size:page") &&
        !xseg_alloc(paged, n, NULL, &o))
        rc_o = dmabuf_of(o, n, &fd_o);
    int ok = rc_r == 0 && fd_r >= 0;
    printf("{\"mode\":\"dmabuf\",\"ok\":%s,\"bytes\":%zu,\"registrable_rc\":%d,"
           "\"registrable_fd\":%s,\"ordinary_paged_rc\":%d,\"ordinary_paged_fd\":%s,"
           "\"have_entry\":%s}\n", ok ? "true" : "false", n, rc_r, fd_r >= 0 ? "true" : "false",
           rc_o, fd_o >= 0 ? "true" : "false", cu.GetHandleForAddressRange ? "true" : "false");
    if (fd_r >= 0)
        close(fd_r);
    if (fd_o >= 0)
        close(fd_o);
    if (r)
        xseg_free(xs, r);
    if (o)
        xseg_free(paged, o);
    if (paged)
        xseg_destroy(paged);
    xseg_destroy(xs);
    return !ok;
}

/* ---- NCCL, one rank ---- */

typedef struct { char internal[128]; } ncclUniqueId;
typedef void *ncclComm_t;

static int mode_nccl(const char *path)
{
    void *lib = dlopen(path, RTLD_NOW);
    if (!lib) {
        printf("{\"mode\":\"nccl\",\"ok\":false,\"error\":\"dlopen %s: %s\"}\n", path, dlerror());
        return 1;
    }
    int (*get_id)(ncclUniqueId *);
    int (*init)(ncclComm_t *, int, ncclUniqueId, int);
    int (*reg)(ncclComm_t, void *, size_t, void **);
    int (*dereg)(ncclComm_t, void *);
    int (*allreduce)(const void *, void *, size_t, int, int, ncclComm_t, void *);
    int (*destroy)(ncclComm_t);
    const char *(*errstr)(int);
    *(void **)&get_id = dlsym(lib, "ncclGetUniqueId");
    *(void **)&init = dlsym(lib, "ncclCommInitRank");
    *(void **)&reg = dlsym(lib, "ncclCommRegister");
    *(void **)&dereg = dlsym(lib, "ncclCommDeregister");
    *(void **)&allreduce = dlsym(lib, "ncclAllReduce");
    *(void **)&destroy = dlsym(lib, "ncclCommDestroy");
    *(void **)&errstr = dlsym(lib, "ncclGetErrorString");
    if (!get_id || !init || !reg || !dereg || !allreduce || !destroy || !errstr) {
        printf("{\"mode\":\"nccl\",\"ok\":false,\"error\":\"%s lacks an entry point\"}\n", path);
        return 1;
    }
    xseg_t *xs = xseg_open();
    ncclUniqueId id;
    ncclComm_t comm = NULL;
    void *buf = NULL, *h = NULL;
    size_t n = (size_t)256 << 20, count = n / 4;
    int r_id = get_id(&id), r_init = r_id ? -1 : init(&comm, 1, id, 0);
    int r_alloc = xseg_alloc_registrable(xs, n, NULL, &buf);
    int r_reg = -1, r_ar = -1, r_dereg = -1, correct = 0;
    if (!r_init && !r_alloc && fill(buf, n, 0x3FC00000u /* 1.5f */)) {
        r_reg = reg(comm, buf, n, &h);
        r_ar = allreduce(buf, buf, count, 7 /* ncclFloat32 */, 0 /* ncclSum */, comm, NULL);
        correct = !r_ar && !cu.StreamSynchronize(NULL) && check_words(buf, n, 0x3FC00000u);
        if (!r_reg)
            r_dereg = dereg(comm, h);
    }
    int ok = !r_init && !r_alloc && !r_reg && !r_ar && !r_dereg && correct;
    printf("{\"mode\":\"nccl\",\"ok\":%s,\"bytes\":%zu,\"init\":\"%s\",\"register\":\"%s\","
           "\"allreduce\":\"%s\",\"deregister\":\"%s\",\"result_correct\":%s}\n",
           ok ? "true" : "false", n, r_init >= 0 ? errstr(r_init) : "skipped",
           r_reg >= 0 ? errstr(r_reg) : "skipped", r_ar >= 0 ? errstr(r_ar) : "skipped",
           r_dereg >= 0 ? errstr(r_dereg) : "skipped", correct ? "true" : "false");
    if (comm)
        destroy(comm);
    if (buf)
        xseg_free(xs, buf);
    xseg_destroy(xs);
    return !ok;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: share_proof patterns|sync BYTES|dmabuf|nccl LIBNCCL\n");
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGPIPE, SIG_IGN); /* a dead child is an answer, not a signal */
    cuda_open();
    if (!strcmp(argv[1], "child") && argc >= 4) {
        int s = atoi(argv[2]);
        if (!strcmp(argv[3], "patterns"))
            return child_patterns(s);
        if (!strcmp(argv[3], "sync") && argc >= 5)
            return child_sync(s, (size_t)strtoull(argv[4], NULL, 10));
        return 2;
    }
    if (!strcmp(argv[1], "patterns"))
        return mode_patterns();
    if (!strcmp(argv[1], "sync"))
        return mode_sync(argc > 2 ? (size_t)strtoull(argv[2], NULL, 10) : (size_t)1536 << 20);
    if (!strcmp(argv[1], "dmabuf"))
        return mode_dmabuf();
    if (!strcmp(argv[1], "nccl") && argc > 2)
        return mode_nccl(argv[2]);
    fprintf(stderr, "share_proof: unknown mode %s\n", argv[1]);
    return 2;
}
